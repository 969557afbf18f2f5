"""librdkafka's built-in mock cluster as a target: a third implementation to compare against.

How the mock cluster is obtained
--------------------------------
confluent-kafka-python 2.16 has no ``MockCluster`` class and no binding for the
``rd_kafka_mock_*`` C API; what it exposes is the hidden client property
``test.mock.num.brokers``. The librdkafka it bundles (``confluent_kafka.libs/librdkafka-*.so``)
does export the whole experimental mock API, so this module offers two modes:

``mode=api`` (default when the symbols are there)
    A ctypes shim onto the bundled librdkafka: create a bare ``rd_kafka_t`` holder
    (``rd_kafka_new``), then ``rd_kafka_mock_cluster_new(rk, N)``; the bootstrap list comes
    from ``rd_kafka_mock_cluster_bootstraps()``. Because we hold the ``rd_kafka_mock_cluster_t``
    we also get lifecycle and fault hooks: ``rd_kafka_mock_broker_set_down/up`` (kill/restart a
    node), ``rd_kafka_mock_broker_set_rtt``, ``rd_kafka_mock_push_request_errors_array``,
    ``rd_kafka_mock_set_apiversion`` and ``rd_kafka_mock_topic_create``.

``mode=config``
    A holder ``confluent_kafka.Producer({"test.mock.num.brokers": N})``; librdkafka replaces the
    holder's ``bootstrap.servers`` with the mock brokers (it logs "Mock cluster enabled: original
    bootstrap.servers ... replaced with 127.0.0.1:P1,..."); the addresses are read back from the
    holder's own metadata (``list_topics().brokers``). No lifecycle: Python has no handle on the
    cluster, so kill/restart raise NotSupportedByTarget.

Either way the mock brokers are plain-TCP listeners on 127.0.0.1 that any client can use
(other confluent-kafka clients, our RawClient), and they live exactly as long as the holder.

The mock API is marked experimental by librdkafka (outside its API/ABI guarantees); the
signatures bound here have been stable since librdkafka 1.x and are checked against the
pinned confluent-kafka 2.16.1 (librdkafka 2.16.0) by targets/tests/test_librdkafka_mock.py.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterable

import confluent_kafka
import confluent_kafka.cimpl  # noqa: F401  (loads the bundled librdkafka _candidate_libraries looks for)
from confluent_kafka import Producer, libversion
from confluent_kafka.admin import AdminClient

from targets.target import (
    NotSupportedByTarget,
    Target,
    TargetError,
    TargetSpec,
    probe_capabilities,
)

MODES = ("auto", "api", "config")

_REQUIRED_SYMBOLS = (
    "rd_kafka_conf_new",
    "rd_kafka_conf_set",
    "rd_kafka_conf_destroy",
    "rd_kafka_new",
    "rd_kafka_destroy",
    "rd_kafka_err2str",
    "rd_kafka_version_str",
    "rd_kafka_mock_cluster_new",
    "rd_kafka_mock_cluster_destroy",
    "rd_kafka_mock_cluster_bootstraps",
    "rd_kafka_mock_broker_set_down",
    "rd_kafka_mock_broker_set_up",
    "rd_kafka_mock_broker_set_rtt",
    "rd_kafka_mock_push_request_errors_array",
    "rd_kafka_mock_clear_request_errors",
    "rd_kafka_mock_set_apiversion",
    "rd_kafka_mock_topic_create",
)


# --- ctypes binding -------------------------------------------------------------------


class MockApi:
    """ctypes view of the mock-cluster part of a librdkafka shared library."""

    def __init__(self, path: str) -> None:
        self.path = path
        lib = ctypes.CDLL(path)
        missing = [s for s in _REQUIRED_SYMBOLS if not hasattr(lib, s)]
        if missing:
            raise NotSupportedByTarget(
                f"librdkafka at {path} does not export the mock cluster API ({', '.join(missing)})"
            )
        V, I32, I16 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int16
        errbuf = ctypes.c_char_p
        sig = {
            "rd_kafka_conf_new": (V, []),
            "rd_kafka_conf_set": (ctypes.c_int, [V, ctypes.c_char_p, ctypes.c_char_p, errbuf, ctypes.c_size_t]),
            "rd_kafka_conf_destroy": (None, [V]),
            "rd_kafka_new": (V, [ctypes.c_int, V, errbuf, ctypes.c_size_t]),
            "rd_kafka_destroy": (None, [V]),
            "rd_kafka_err2str": (ctypes.c_char_p, [ctypes.c_int]),
            "rd_kafka_version_str": (ctypes.c_char_p, []),
            "rd_kafka_mock_cluster_new": (V, [V, ctypes.c_int]),
            "rd_kafka_mock_cluster_destroy": (None, [V]),
            "rd_kafka_mock_cluster_bootstraps": (ctypes.c_char_p, [V]),
            "rd_kafka_mock_broker_set_down": (ctypes.c_int, [V, I32]),
            "rd_kafka_mock_broker_set_up": (ctypes.c_int, [V, I32]),
            "rd_kafka_mock_broker_set_rtt": (ctypes.c_int, [V, I32, ctypes.c_int]),
            "rd_kafka_mock_push_request_errors_array": (None, [V, I16, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]),
            "rd_kafka_mock_clear_request_errors": (None, [V, I16]),
            "rd_kafka_mock_set_apiversion": (ctypes.c_int, [V, I16, I16, I16]),
            "rd_kafka_mock_topic_create": (ctypes.c_int, [V, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]),
        }
        for name, (restype, argtypes) in sig.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        self.lib = lib
        self.version = lib.rd_kafka_version_str().decode()

    def err2str(self, err: int) -> str:
        return self.lib.rd_kafka_err2str(err).decode(errors="replace")

    def check(self, err: int, what: str) -> None:
        if err != 0:
            raise TargetError(f"librdkafka mock: {what} failed: {self.err2str(err)} ({err})")


_api_lock = threading.Lock()
_api: MockApi | None = None
_api_error: NotSupportedByTarget | None = None


def _candidate_libraries() -> list[str]:
    """Paths of librdkafka, the one confluent-kafka loaded first."""
    out: list[str] = []
    maps = Path("/proc/self/maps")
    if maps.exists():
        for line in maps.read_text().splitlines():
            path = line.split()[-1] if line.split() else ""
            if "librdkafka" in os.path.basename(path) and path not in out:
                out.append(path)
    pkg = Path(confluent_kafka.__file__).resolve().parent
    for pattern in (
        str(pkg.parent / "confluent_kafka.libs" / "librdkafka*.so*"),  # manylinux wheels (auditwheel)
        str(pkg / ".dylibs" / "librdkafka*.dylib"),  # macOS wheels (delocate)
        str(pkg.parent / "confluent_kafka.libs" / "librdkafka*.dll"),
    ):
        out.extend(p for p in sorted(glob.glob(pattern)) if p not in out)
    system = ctypes.util.find_library("rdkafka")
    if system and system not in out:
        out.append(system)
    return out


def load_mock_api() -> MockApi:
    """The ctypes binding onto the librdkafka confluent-kafka uses; NotSupportedByTarget if none."""
    global _api, _api_error
    with _api_lock:
        if _api is not None:
            return _api
        if _api_error is not None:
            raise _api_error
        errors = []
        for path in _candidate_libraries():
            try:
                _api = MockApi(path)
                return _api
            except (OSError, NotSupportedByTarget) as exc:
                errors.append(f"{path}: {exc}")
        _api_error = NotSupportedByTarget(
            "librdkafka mock API not reachable through ctypes"
            + (f" ({'; '.join(errors)})" if errors else " (no librdkafka shared library found)")
        )
        raise _api_error


# --- holders: what keeps the mock cluster alive ---------------------------------------


class _ApiHolder:
    """A bare rd_kafka_t plus the rd_kafka_mock_cluster_t created on it."""

    def __init__(self, api: MockApi, brokers: int, rtt_ms: int | None) -> None:
        self.api = api
        lib = api.lib
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        for key, value in (
            ("client.id", "kipcheck-mock-holder"),
            # The holder has no bootstrap.servers of its own: keep librdkafka's
            # "No bootstrap.servers configured" notice (level 5) off stderr.
            ("log_level", "4"),
        ):
            if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, len(errstr)) != 0:
                lib.rd_kafka_conf_destroy(conf)
                raise TargetError(f"librdkafka mock: cannot set {key}: {errstr.value.decode()}")
        rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # RD_KAFKA_PRODUCER; takes conf
        if not rk:
            lib.rd_kafka_conf_destroy(conf)
            raise TargetError(f"librdkafka mock: rd_kafka_new failed: {errstr.value.decode()}")
        self.rk: int | None = rk
        mc = lib.rd_kafka_mock_cluster_new(rk, brokers)
        if not mc:
            lib.rd_kafka_destroy(rk)
            self.rk = None
            raise TargetError(f"librdkafka mock: rd_kafka_mock_cluster_new(rk, {brokers}) failed")
        self.mc: int | None = mc
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(mc).decode()
        if rtt_ms:
            self.set_rtt(-1, rtt_ms)

    def _mc(self) -> int:
        if not self.mc:
            raise TargetError("librdkafka mock cluster is not running")
        return self.mc

    def set_down(self, node_id: int) -> None:
        self.api.check(self.api.lib.rd_kafka_mock_broker_set_down(self._mc(), node_id), f"set broker {node_id} down")

    def set_up(self, node_id: int) -> None:
        self.api.check(self.api.lib.rd_kafka_mock_broker_set_up(self._mc(), node_id), f"set broker {node_id} up")

    def set_rtt(self, node_id: int, rtt_ms: int) -> None:
        self.api.check(
            self.api.lib.rd_kafka_mock_broker_set_rtt(self._mc(), node_id, rtt_ms),
            f"set rtt of broker {node_id}",
        )

    def push_request_errors(self, api_key: int, errors: list[int]) -> None:
        arr = (ctypes.c_int * len(errors))(*errors)
        self.api.lib.rd_kafka_mock_push_request_errors_array(self._mc(), api_key, len(errors), arr)

    def clear_request_errors(self, api_key: int) -> None:
        self.api.lib.rd_kafka_mock_clear_request_errors(self._mc(), api_key)

    def set_apiversion(self, api_key: int, min_version: int, max_version: int) -> None:
        self.api.check(
            self.api.lib.rd_kafka_mock_set_apiversion(self._mc(), api_key, min_version, max_version),
            f"set ApiVersion range of api_key {api_key}",
        )

    def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        self.api.check(
            self.api.lib.rd_kafka_mock_topic_create(self._mc(), name.encode(), partitions, replication_factor),
            f"create topic {name!r}",
        )

    def close(self) -> None:
        mc, rk = self.mc, self.rk
        self.mc = self.rk = None
        if mc:
            self.api.lib.rd_kafka_mock_cluster_destroy(mc)
        if rk:
            self.api.lib.rd_kafka_destroy(rk)


class _ConfigHolder:
    """A confluent-kafka Producer with test.mock.num.brokers; it owns the mock cluster."""

    def __init__(self, brokers: int, rtt_ms: int | None, timeout: float) -> None:
        conf: dict[str, Any] = {
            "test.mock.num.brokers": brokers,
            "client.id": "kipcheck-mock-holder",
            # The "Mock cluster enabled" notice is level 5; keep it off stderr.
            "log_level": 4,
        }
        if rtt_ms:
            conf["test.mock.broker.rtt"] = rtt_ms
        self.producer: Any = Producer(conf)
        md = self.producer.list_topics(timeout=timeout)
        brokers_md = sorted(md.brokers.values(), key=lambda b: b.id)
        if len(brokers_md) != brokers:
            self.close()
            raise TargetError(f"librdkafka mock: holder metadata lists {len(brokers_md)} brokers, expected {brokers}")
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers_md)

    def close(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            try:
                producer.close()
            except Exception:  # noqa: BLE001 - older bindings have no close(); dealloc destroys it
                pass
            del producer


_NO_HANDLE = (
    "confluent-kafka-python has no binding for the librdkafka mock API "
    "(rd_kafka_mock_broker_set_down/up); in mode=config Python holds no rd_kafka_mock_cluster_t. "
    "Use librdkafka-mock:mode=api"
)


class LibrdkafkaMockTarget(Target):
    """`librdkafka-mock[:nodes=N][:mode=api|config][:rtt=MS][:timeout=S]`."""

    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        self.mode = (spec.option("mode", "auto") or "auto").lower()
        if self.mode not in MODES:
            raise ValueError(f"librdkafka-mock: mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        self.rtt_ms = _int_option(spec, "rtt", 0, minimum=0)
        self.timeout = float(_int_option(spec, "timeout", 10, minimum=1))
        self._holder: _ApiHolder | _ConfigHolder | None = None
        self._down: set[int] = set()
        self.mode_reason = ""

    # -- Target ------------------------------------------------------------------------

    @property
    def version(self) -> str:
        try:
            return f"librdkafka-{libversion()[0]}"
        except Exception:  # noqa: BLE001
            return "librdkafka"

    @property
    def bootstrap_servers(self) -> str:
        if self._holder is None:
            raise TargetError("librdkafka-mock target is not started")
        return self._holder.bootstrap

    @property
    def active_mode(self) -> str | None:
        """"api" or "config" once started."""
        if isinstance(self._holder, _ApiHolder):
            return "api"
        if isinstance(self._holder, _ConfigHolder):
            return "config"
        return None

    def start(self) -> None:
        if self._holder is not None:
            return
        t0 = time.monotonic()
        nodes = self.spec.nodes
        if self.mode in ("auto", "api"):
            try:
                api = load_mock_api()
                self._holder = _ApiHolder(api, nodes, self.rtt_ms)
                self.mode_reason = f"ctypes binding onto {api.path} (librdkafka {api.version})"
            except NotSupportedByTarget as exc:
                if self.mode == "api":
                    raise
                self.mode_reason = f"mode=api unavailable ({exc.reason}); using test.mock.num.brokers"
        if self._holder is None:
            self._holder = _ConfigHolder(nodes, self.rtt_ms, self.timeout)
            if not self.mode_reason:
                self.mode_reason = "holder Producer with test.mock.num.brokers"
        try:
            self._wait_ready()
        except Exception:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0

    def _wait_ready(self) -> None:
        """Protocol round trips: ApiVersions (raw client) and Metadata listing every broker.

        Not targets.target.wait_until_ready: its ClusterClient asks ApiVersions v3 and the
        mock answers only up to v2 (see docs/targets.md).
        """
        deadline = time.monotonic() + self.timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                self._capabilities = probe_capabilities(self.bootstrap_servers, timeout=2.0)
                admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 3})
                md = admin.list_topics(timeout=max(1.0, deadline - time.monotonic()))
                if len(md.brokers) == self.spec.nodes:
                    return
                last = TargetError(f"metadata lists {len(md.brokers)} of {self.spec.nodes} brokers")
            except Exception as exc:  # noqa: BLE001 - not up yet
                last = exc
            time.sleep(0.1)
        raise TargetError(
            f"librdkafka mock cluster did not become ready at {self.bootstrap_servers} within {self.timeout:.0f}s: {last}"
        )

    def stop(self) -> None:
        holder, self._holder = self._holder, None
        self._down.clear()
        self._capabilities = None
        if holder is not None:
            holder.close()

    def describe(self) -> dict[str, Any]:
        d = super().describe() if self._holder is not None else {
            "spec": self.name, "kind": self.kind, "version": self.version,
            "nodes": self.spec.nodes, "bootstrap": None, "startup_seconds": None,
        }
        d["mode"] = self.active_mode or self.mode
        d["mode_detail"] = self.mode_reason
        if self._down:
            d["nodes_down"] = sorted(self._down)
        return d

    # -- lifecycle -----------------------------------------------------------------------

    def _api_holder(self, what: str) -> _ApiHolder:
        if self._holder is None:
            raise TargetError("librdkafka-mock target is not started")
        if not isinstance(self._holder, _ApiHolder):
            raise NotSupportedByTarget(f"librdkafka-mock cannot {what}: {_NO_HANDLE}")
        return self._holder

    def _check_node(self, node_id: int) -> None:
        if node_id not in self.node_ids:
            raise ValueError(f"librdkafka-mock has nodes {self.node_ids}, not {node_id}")

    def kill_node(self, node_id: int) -> None:
        """rd_kafka_mock_broker_set_down: close its connections and refuse new ones.

        The mock does not move partition leadership or coordinators away from a down broker.
        """
        holder = self._api_holder("kill a node")
        self._check_node(node_id)
        holder.set_down(node_id)
        self._down.add(node_id)

    def restart_node(self, node_id: int) -> None:
        """Set the broker down (if it is up) and up again; its in-memory data survives."""
        holder = self._api_holder("restart a node")
        self._check_node(node_id)
        if node_id not in self._down:
            holder.set_down(node_id)
        holder.set_up(node_id)
        self._down.discard(node_id)

    def pause_node(self, node_id: int) -> None:
        raise NotSupportedByTarget(
            "librdkafka-mock cannot pause a node: the mock can only set a broker down "
            "(disconnect + refuse connections) or add round-trip time, not freeze it with connections open"
        )

    def resume_node(self, node_id: int) -> None:
        raise NotSupportedByTarget("librdkafka-mock cannot resume a node (it cannot pause one)")

    # -- mock-only hooks (mode=api) ------------------------------------------------------

    def set_rtt(self, node_id: int, rtt_ms: int) -> None:
        """Delay every response of a broker (-1: all brokers) by rtt_ms."""
        self._api_holder("set round-trip time").set_rtt(node_id, rtt_ms)

    def push_request_errors(self, api_key: int, errors: Iterable[int]) -> None:
        """The next len(errors) requests of api_key fail with these codes, in order.

        librdkafka's RD_KAFKA_RESP_ERR__TRANSPORT (-195) makes the broker disconnect instead.
        """
        self._api_holder("inject request errors").push_request_errors(api_key, [int(e) for e in errors])

    def clear_request_errors(self, api_key: int) -> None:
        self._api_holder("clear request errors").clear_request_errors(api_key)

    def set_api_version_range(self, api_key: int, min_version: int, max_version: int) -> None:
        """Narrow what ApiVersions advertises for api_key (-1, -1 disables the API)."""
        self._api_holder("change advertised API versions").set_apiversion(api_key, min_version, max_version)
        self._capabilities = None

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1) -> None:
        """Create a topic inside the mock (it does not implement CreateTopics)."""
        if replication_factor > self.spec.nodes:
            raise ValueError(f"replication factor {replication_factor} > {self.spec.nodes} mock brokers")
        self._api_holder("create a topic directly").create_topic(name, partitions, replication_factor)


    def provision_topic(self, name: str, partitions: int) -> None:
        """Target hook used by the suites: the mock's own topic creation, replicated like
        its auto-created topics (min(3, brokers))."""
        self.create_topic(name, partitions, min(3, self.spec.nodes))


def _int_option(spec: TargetSpec, name: str, default: int, minimum: int) -> int:
    raw = spec.option(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{spec.kind}: {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{spec.kind}: {name} must be >= {minimum}, got {value}")
    return value


__all__ = ["LibrdkafkaMockTarget", "MockApi", "load_mock_api"]
