"""Any running cluster a user points at (vendor certification): `external:BOOTSTRAP`.

    external:HOST:PORT[,HOST:PORT...][:config=PATH][:timeout=SECONDS][:version=TEXT][:probe=auto|raw|librdkafka]

Security settings come from a librdkafka-style properties file (``key=value`` lines) named
by the ``config=`` option or the ``KIPCHECK_EXTERNAL_CONFIG`` environment variable; every
property is passed through to ``client_config()`` (``security.protocol``, ``sasl.mechanism``,
``sasl.username``, ``sasl.password``, ``ssl.ca.location``, ...). The file is validated by
building a confluent-kafka client with it, so a misspelt property fails at start().

The raw protocol client reads the same properties (reference_impl.client.security): it
speaks PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL with PLAIN, SCRAM-SHA-256/512 and
unsecured-JWT OAUTHBEARER, so ``raw_client_supported`` is true for those and capabilities
(API ranges and feature levels) come from ApiVersions over the secured connection. For a
setup it cannot speak (GSSAPI, OIDC token endpoints, PKCS#12 keystores) the target reads
ApiVersions through confluent-kafka instead: librdkafka logs the broker's answer under
``debug=feature`` ("ApiKey Produce (0) Versions 0..12"), which is parsed into Capabilities;
that route sees API ranges only, not feature levels, and raw wire checks are not supported.

No lifecycle: kill/restart/pause raise NotSupportedByTarget.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from targets.target import (
    Capabilities,
    NotSupportedByTarget,
    Target,
    TargetError,
    TargetSpec,
    probe_capabilities,
    split_external_spec,
    wait_until_ready,
)
from reference_impl.client.raw_client import ClusterClient, RawClient, parse_bootstrap
from reference_impl.client.sasl import AuthenticationError
from reference_impl.client.security import ClientSecurity, SecurityConfigError

ENV_CONFIG = "KIPCHECK_EXTERNAL_CONFIG"
ENV_TIMEOUT = "KIPCHECK_EXTERNAL_TIMEOUT"
DEFAULT_TIMEOUT_S = 10.0
PROBES = ("auto", "raw", "librdkafka")
SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")

# Java client properties librdkafka does not understand, with what to use instead.
_JAVA_ONLY = {
    "sasl.jaas.config": "use sasl.username / sasl.password (PLAIN, SCRAM) or sasl.oauthbearer.* instead",
    "ssl.truststore.location": "use ssl.ca.location (PEM file) instead",
    "ssl.truststore.password": "use ssl.ca.location (PEM file) instead",
    "ssl.truststore.type": "use ssl.ca.location (PEM file) instead",
    "ssl.keystore.type": "librdkafka reads PKCS#12 keystores via ssl.keystore.location, or PEM via "
    "ssl.certificate.location / ssl.key.location",
    "sasl.login.callback.handler.class": "librdkafka has no Java callback handlers",
    "sasl.client.callback.handler.class": "librdkafka has no Java callback handlers",
}
_APIVERSION_LINE = re.compile(r"\[thrd:(?P<thread>[^\]]*)\].*?ApiKey \S+ \((?P<key>\d+)\) Versions (?P<lo>-?\d+)\.\.(?P<hi>-?\d+)")
_logger_ids = itertools.count(1)


def is_secret(key: str) -> bool:
    k = key.lower()
    return "password" in k or "secret" in k or k.endswith(".key.pem") or k == "sasl.oauthbearer.config"


def load_client_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a librdkafka-style properties file: `key=value` lines, `#`/`!` comments."""
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as exc:
        raise TargetError(f"external target: cannot read client config {p}: {exc.strerror or exc}") from exc
    props: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" in line:
            key, _, value = line.partition("=")
        elif ":" in line:
            key, _, value = line.partition(":")
        else:
            raise TargetError(f"{p}:{lineno}: expected key=value, got {line!r}")
        key, value = key.strip(), value.strip()
        if not key:
            raise TargetError(f"{p}:{lineno}: empty property name")
        if key in _JAVA_ONLY:
            raise TargetError(f"{p}:{lineno}: {key} is a Java client property; {_JAVA_ONLY[key]}")
        if key.endswith(".class"):
            raise TargetError(f"{p}:{lineno}: {key} is a Java client property; librdkafka has no Java classes")
        props[key] = value
    sp = props.get("security.protocol")
    if sp is not None and sp.lower() not in SECURITY_PROTOCOLS:
        raise TargetError(
            f"{p}: security.protocol={sp!r} is not one of {', '.join(s.upper() for s in SECURITY_PROTOCOLS)}"
        )
    return props


def _capture_logger() -> tuple[logging.Logger, list[str]]:
    lines: list[str] = []

    class _Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(f"kipcheck.external.librdkafka.{next(_logger_ids)}")
    logger.handlers[:] = [_Capture()]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger, lines


def parse_apiversion_log(lines: list[str]) -> dict[int, tuple[int, int]]:
    """API ranges from librdkafka's `debug=feature` log of one broker's ApiVersions answer."""
    by_thread: dict[str, dict[int, tuple[int, int]]] = {}
    for line in lines:
        m = _APIVERSION_LINE.search(line)
        if m:
            by_thread.setdefault(m["thread"], {})[int(m["key"])] = (int(m["lo"]), int(m["hi"]))
    if not by_thread:
        return {}
    return max(by_thread.values(), key=len)


def librdkafka_probe(config: dict[str, Any], timeout: float) -> tuple[Capabilities, Any]:
    """ApiVersions (from librdkafka's debug log) and Metadata through confluent-kafka."""
    logger, lines = _capture_logger()
    conf = dict(config)
    conf.update({"debug": "feature", "logger": logger, "log_level": 7})
    try:
        admin = AdminClient(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        raise TargetError(f"external target: client config rejected by librdkafka: {exc}") from exc
    try:
        try:
            md = admin.list_topics(timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - KafkaException: transport, auth, timeout
            admin.poll(0.2)
            hint = _last_failure(lines)
            raise TargetError(f"no metadata within {timeout:g}s: {exc}" + (f"; librdkafka: {hint}" if hint else "")) from exc
        deadline = time.monotonic() + timeout
        api = parse_apiversion_log(lines)
        while not api and time.monotonic() < deadline:
            admin.poll(0.1)  # deliver queued log lines
            api = parse_apiversion_log(lines)
    finally:
        del admin
    if not api:
        raise TargetError("external target: librdkafka logged no ApiVersions answer (debug=feature)")
    return Capabilities(api_versions=api), md


def _last_failure(lines: list[str]) -> str | None:
    for line in reversed(lines):
        head = line.split(" ", 1)[0]
        if head in ("FAIL", "ERROR", "SASLFAIL", "AUTHFAIL") or "failed" in line.lower():
            return line.split("]: ", 1)[-1][:300]
    return None


class ExternalTarget(Target):
    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        raw_bootstrap = spec.option("bootstrap")
        if not raw_bootstrap:
            raise ValueError("external target needs a bootstrap: external:HOST:PORT[,HOST:PORT...]")
        self._bootstrap, opts = split_external_spec(raw_bootstrap)
        # Options parse_target_spec may already have split off (other spec forms).
        for key, value in spec.options:
            if key != "bootstrap":
                opts.setdefault(key, value)
        self._addresses = parse_bootstrap(self._bootstrap)  # ValueError on HOST without PORT
        self.options = opts
        timeout_text = opts.get("timeout") or os.environ.get(ENV_TIMEOUT) or str(DEFAULT_TIMEOUT_S)
        try:
            self.timeout = float(timeout_text)
        except ValueError:
            raise ValueError(f"external target: timeout must be a number of seconds, got {timeout_text!r}") from None
        if not 0 < self.timeout < float("inf"):
            raise ValueError(f"external target: timeout must be positive, got {timeout_text!r}")
        self.probe = opts.get("probe", "auto").lower()
        if self.probe not in PROBES:
            raise ValueError(f"external target: probe must be one of {', '.join(PROBES)}, got {self.probe!r}")
        self.config_path: str | None = opts.get("config") or os.environ.get(ENV_CONFIG) or None
        self.properties: dict[str, str] = {}
        if self.config_path:
            self.properties = load_client_properties(self.config_path)
        self.security_protocol = self.properties.get("security.protocol", "PLAINTEXT").upper()
        self._raw_security, self.raw_client_unsupported_reason = self._parse_raw_security()
        if self.probe == "raw" and not self.raw_client_supported:
            raise ValueError(f"external target: probe=raw impossible: {self.raw_client_unsupported_reason}")
        self._node_ids: list[int] = []
        self._started = False
        self.cluster_id: str | None = None
        self.capabilities_source: str | None = None

    # -- Target ------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap

    @property
    def version(self) -> str | None:
        return self.options.get("version")

    @property
    def node_ids(self) -> list[int]:
        return list(self._node_ids)

    @property
    def raw_client_supported(self) -> bool:
        """Whether reference_impl's RawClient speaks this cluster's security setup."""
        return self._raw_security is not None

    def _parse_raw_security(self) -> tuple[Any, str | None]:
        try:
            return ClientSecurity.from_properties(self.properties), None
        except SecurityConfigError as exc:
            return None, str(exc)

    def raw_security(self) -> Any:
        if self._raw_security is None:
            raise NotSupportedByTarget(f"raw wire checks: {self.raw_client_unsupported_reason}")
        return self._raw_security

    def client_config(self) -> dict[str, str]:
        conf = {k: v for k, v in self.properties.items() if k != "bootstrap.servers"}
        conf["bootstrap.servers"] = self._bootstrap
        return conf

    def start(self) -> None:
        t0 = time.monotonic()
        self._preflight_tcp()
        what = f"external cluster {self._bootstrap}"
        use_raw = self.probe == "raw" or (self.probe == "auto" and self.raw_client_supported)
        try:
            if use_raw:
                self._first_answer(what)
                self._capabilities = wait_until_ready(self._bootstrap, self.timeout, what, security=self._raw_security)
                self.capabilities_source = "raw ApiVersions"
                brokers, cluster_id = self._raw_metadata()
            else:
                try:
                    self._capabilities, md = librdkafka_probe(self.client_config(), self.timeout)
                except TargetError as exc:
                    raise TargetError(f"{what} ({self.security_protocol}): {exc}") from exc
                self.capabilities_source = "librdkafka debug=feature log (no feature levels)"
                brokers = {int(b.id): (b.host, int(b.port)) for b in md.brokers.values()}
                cluster_id = getattr(md, "cluster_id", None)
        except TargetError:
            raise
        except Exception as exc:  # noqa: BLE001 - a KafkaException, timeout, ...
            raise TargetError(f"{what}: no protocol round trip within {self.timeout:g}s: {exc}") from exc
        self._node_ids = sorted(brokers)
        self.cluster_id = cluster_id
        self._check_advertised(brokers)
        self._started = True
        self.startup_seconds = time.monotonic() - t0

    def stop(self) -> None:
        """Nothing to tear down: the cluster belongs to the user."""
        self._started = False

    def capabilities(self, refresh: bool = False) -> Capabilities:
        if self._capabilities is not None and not refresh:
            return self._capabilities
        if self.probe == "raw" or (self.probe == "auto" and self.raw_client_supported):
            self._capabilities = probe_capabilities(self._bootstrap, timeout=self.timeout, security=self._raw_security)
        else:
            self._capabilities, _ = librdkafka_probe(self.client_config(), self.timeout)
        return self._capabilities

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["nodes"] = len(self._node_ids) if self._node_ids else None
        d["node_ids"] = self.node_ids
        d["cluster_id"] = self.cluster_id
        d["security_protocol"] = self.security_protocol
        if "sasl.mechanism" in self.properties or "sasl.mechanisms" in self.properties:
            d["sasl_mechanism"] = self.properties.get("sasl.mechanism") or self.properties.get("sasl.mechanisms")
        d["config_file"] = self.config_path
        d["config_keys"] = sorted(k for k in self.properties if not is_secret(k))
        d["raw_client_supported"] = self.raw_client_supported
        if not self.raw_client_supported:
            d["raw_client_unsupported_reason"] = self.raw_client_unsupported_reason
        d["capabilities_source"] = self.capabilities_source
        return d

    # -- lifecycle: none -----------------------------------------------------------------

    def kill_node(self, node_id: int) -> None:
        raise NotSupportedByTarget("external target: kipcheck does not control the cluster's processes")

    def restart_node(self, node_id: int) -> None:
        raise NotSupportedByTarget("external target: kipcheck does not control the cluster's processes")

    def pause_node(self, node_id: int) -> None:
        raise NotSupportedByTarget("external target: kipcheck does not control the cluster's processes")

    def resume_node(self, node_id: int) -> None:
        raise NotSupportedByTarget("external target: kipcheck does not control the cluster's processes")

    # -- helpers -------------------------------------------------------------------------

    def _preflight_tcp(self) -> None:
        """Fail fast (one connect timeout) when no bootstrap address accepts TCP."""
        errors = []
        connect_timeout = min(self.timeout, 3.0)
        for host, port in self._addresses:
            try:
                socket.create_connection((host, port), timeout=connect_timeout).close()
                return
            except OSError as exc:
                errors.append(f"{host}:{port}: {exc.strerror or exc}")
        raise TargetError(
            f"external cluster {self._bootstrap} is unreachable: {'; '.join(errors)} "
            "(is the cluster running and the bootstrap address right?)"
        )

    def _first_answer(self, what: str) -> None:
        """One ApiVersions v0 round trip within `timeout` (after TLS and SASL): tells a silent or
        non-Kafka listener, and rejected credentials, apart."""
        try:
            with RawClient.connect(self._bootstrap, timeout=self.timeout, security=self._raw_security) as client:
                client.request(18, 0)
        except AuthenticationError as exc:
            raise TargetError(f"{what} ({self.security_protocol}): {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - timeout, reset, undecodable answer
            raise TargetError(
                f"{what} accepts connections but gave no Kafka ApiVersions answer within {self.timeout:g}s "
                f"({type(exc).__name__}: {exc}); a TLS or SASL listener needs a client config "
                f"(config=PATH or {ENV_CONFIG})"
            ) from exc

    def _raw_metadata(self) -> tuple[dict[int, tuple[str, int]], str | None]:
        with ClusterClient(self._bootstrap, timeout=self.timeout, security=self._raw_security) as cc:
            md = cc.refresh()
            return dict(cc.nodes), getattr(md, "cluster_id", None)

    def _check_advertised(self, brokers: dict[int, tuple[str, int]]) -> None:
        """Every advertised broker address must be reachable from here (advertised.listeners)."""
        bad = []
        for node_id, (host, port) in sorted(brokers.items()):
            try:
                socket.create_connection((host, port), timeout=min(self.timeout, 3.0)).close()
            except OSError as exc:
                bad.append(f"broker {node_id} at {host}:{port} ({exc.strerror or exc})")
        if bad:
            raise TargetError(
                f"external cluster {self._bootstrap} answers, but advertises addresses this machine "
                f"cannot reach: {', '.join(bad)}; check the brokers' advertised.listeners"
            )


__all__ = [
    "ENV_CONFIG",
    "ENV_TIMEOUT",
    "ExternalTarget",
    "librdkafka_probe",
    "load_client_properties",
    "parse_apiversion_log",
    "split_external_spec",
]
