"""Pure configuration for the kafka-native target: spec options, node layout,
server.properties and the StorageTool / kafka.Kafka command lines. No processes here.

Spec options (``kafka-native[:VERSION][:nodes=N][:key=value...]``):

  broker.<name>=<value>   extra broker property <name>=<value> on every node; overrides
                          the defaults below (e.g. ``broker.group.share.record.lock.duration.ms=15000``).
                          Spec parts are split on ':' so a value cannot contain ':'.
  feature.<name>=<level>  finalize a feature at format time (``--feature name=level``),
                          e.g. ``feature.transaction.version=1``; replaces the release default.
  heap=<size>             JVM -Xmx per node (default 512m).
  quorum=dynamic|static   KRaft quorum: dynamic (KIP-853; ``--standalone`` for 1 node,
                          ``--initial-controllers`` for more; default) or static
                          (``controller.quorum.voters``).
  startup_timeout=<s>     seconds to wait for the cluster (default 120, 180 for >1 node).
  stop_timeout=<s>        grace between SIGTERM and SIGKILL on stop (default 10).
  keep_logs=1             keep the run dir after stop (also env KIPCHECK_KEEP_LOGS=1).
  security=<mode>         client listener protocol: plaintext (default), ssl, sasl_plaintext,
                          sasl_ssl (see targets/kafka_native/security.py).
  sasl_mechanism=<m>      the mechanism of the written client config (default SCRAM-SHA-512;
                          PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER are all enabled).
  authorizer=<a>          none (default) or standard: Kafka's StandardAuthorizer with
                          allow.everyone.if.no.acl.found=false, super user kipcheck (the
                          suite's clients) and unprivileged SASL users targets.target.ACL_USERS.
                          Needs a SASL client listener: security defaults to sasl_plaintext,
                          an explicit plaintext or ssl is refused.
  advertised_ports=P1,P2  node i advertises its client listener at 127.0.0.1:Pi (a fault
                          proxy that forwards to the bound port); brokers then talk to
                          each other on a separate INTERNAL listener, so a proxy fault
                          cuts clients, not replication (see docs/chaos.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from targets.kafka_native import security as sec
from targets.kafka_native.versions import KafkaRelease
from targets.target import AUTHORIZERS, KIND_OPTIONS

HOST = "127.0.0.1"
CLIENT_LISTENER = "PLAINTEXT"
CONTROLLER_LISTENER = "CONTROLLER"
INTERNAL_LISTENER = sec.INTERNAL_LISTENER

_SIZE = re.compile(r"^[1-9][0-9]*[kKmMgG]?$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class NativeOptions:
    """Spec options of a kafka-native target, validated."""

    broker_properties: dict[str, str] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    heap: str = "512m"
    quorum: str = "dynamic"
    startup_timeout_s: float | None = None
    stop_timeout_s: float = 10.0
    keep_logs: bool | None = None  # None: decided by KIPCHECK_KEEP_LOGS
    advertised_ports: tuple[int, ...] = ()  # per node (1-based order); () = advertise the bound port
    security: str = "plaintext"
    sasl_mechanism: str = sec.DEFAULT_MECHANISM
    authorizer: str = "none"

    @property
    def secured(self) -> bool:
        return self.security != "plaintext"

    @property
    def authorized(self) -> bool:
        """True with authorizer=standard: ACLs are checked, principals are SASL users."""
        return self.authorizer != "none"


def _parse_bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"kafka-native: option {name} must be a boolean (1/0/true/false), got {value!r}")


def _parse_seconds(name: str, value: str) -> float:
    try:
        s = float(value)
    except ValueError:
        s = -1.0
    if not 0 < s < float("inf"):
        raise ValueError(f"kafka-native: option {name} must be a positive number of seconds, got {value!r}")
    return s


def _parse_ports(value: str) -> tuple[int, ...]:
    parts = value.split(",")
    if not all(p.isdigit() and 0 < int(p) < 65536 for p in parts):
        raise ValueError(f"kafka-native: advertised_ports must be comma-separated port numbers, got {value!r}")
    return tuple(int(p) for p in parts)


def parse_options(options: tuple[tuple[str, str], ...] | dict[str, str]) -> NativeOptions:
    items = options.items() if isinstance(options, dict) else options
    broker: dict[str, str] = {}
    features: dict[str, int] = {}
    kw: dict[str, object] = {}
    for key, value in items:
        if key.startswith("broker.") and len(key) > len("broker."):
            broker[key[len("broker.") :]] = value
        elif key.startswith("feature.") and len(key) > len("feature."):
            if not value.isdigit():
                raise ValueError(f"kafka-native: feature level must be a non-negative integer: {key}={value!r}")
            features[key[len("feature.") :]] = int(value)
        elif key == "heap":
            if not _SIZE.match(value):
                raise ValueError(f"kafka-native: heap must look like 512m or 1g, got {value!r}")
            kw["heap"] = value
        elif key == "quorum":
            if value not in ("dynamic", "static"):
                raise ValueError(f"kafka-native: quorum must be 'dynamic' or 'static', got {value!r}")
            kw["quorum"] = value
        elif key == "startup_timeout":
            kw["startup_timeout_s"] = _parse_seconds(key, value)
        elif key == "stop_timeout":
            kw["stop_timeout_s"] = _parse_seconds(key, value)
        elif key == "keep_logs":
            kw["keep_logs"] = _parse_bool(key, value)
        elif key == "security":
            if value.lower() not in sec.MODES:
                raise ValueError(f"kafka-native: security must be one of {', '.join(sec.MODES)}, got {value!r}")
            kw["security"] = value.lower()
        elif key == "sasl_mechanism":
            if value.upper() not in sec.MECHANISMS:
                raise ValueError(f"kafka-native: sasl_mechanism must be one of {', '.join(sec.MECHANISMS)}, got {value!r}")
            kw["sasl_mechanism"] = value.upper()
        elif key == "authorizer":
            if value.lower() not in AUTHORIZERS:
                raise ValueError(f"kafka-native: authorizer must be one of {', '.join(AUTHORIZERS)}, got {value!r}")
            kw["authorizer"] = value.lower()
        elif key == "advertised_ports":
            kw["advertised_ports"] = _parse_ports(value)
        else:
            raise ValueError(f"kafka-native: unknown option {key!r}; known: {KIND_OPTIONS['kafka-native'].listing()}")
    if kw.get("authorizer", "none") != "none":
        _sasl_for_authorizer(kw)
    return NativeOptions(broker_properties=broker, features=features, **kw)  # type: ignore[arg-type]


def _sasl_for_authorizer(kw: dict[str, object]) -> None:
    """ACLs name SASL users: authorizer=standard defaults security to sasl_plaintext and
    refuses a listener without SASL (every client there would be User:ANONYMOUS)."""
    security = kw.setdefault("security", "sasl_plaintext")
    if not str(security).startswith("sasl_"):
        raise ValueError(
            f"kafka-native: authorizer=standard needs a SASL client listener "
            f"(security=sasl_plaintext or sasl_ssl), got security={security}"
        )


@dataclass(frozen=True)
class NodeLayout:
    """Where one node listens and keeps its files (all under the run dir)."""

    node_id: int
    client_port: int
    controller_port: int
    node_dir: Path
    host: str = HOST
    advertised_client_port: int | None = None  # a fault proxy's port; None: the bound one
    internal_port: int | None = None  # PLAINTEXT inter-broker listener (secured clients, or fault proxies)

    @property
    def data_dir(self) -> Path:
        return self.node_dir / "data"

    @property
    def logs_dir(self) -> Path:
        return self.node_dir / "logs"

    @property
    def properties_file(self) -> Path:
        return self.node_dir / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.logs_dir / f"node{self.node_id}.log"

    @property
    def format_log_file(self) -> Path:
        return self.logs_dir / "format.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def controller_endpoint(self) -> str:
        return f"{self.host}:{self.controller_port}"

    @property
    def internal_endpoint(self) -> str:
        return f"{self.host}:{self.internal_port}"


def layout_nodes(
    run_dir: Path, ports: list[int], nodes: int, advertised_ports: tuple[int, ...] = (), *, internal: bool = False
) -> list[NodeLayout]:
    """Node i (1-based) gets client, controller and (with `internal`, or advertised proxy
    ports, which need an inter-broker listener no proxy sits on) INTERNAL ports from
    consecutive slots of `ports`."""
    internal = internal or bool(advertised_ports)
    per = 3 if internal else 2
    if len(ports) < per * nodes:
        raise ValueError(f"need {per * nodes} ports for {nodes} nodes, got {len(ports)}")
    if advertised_ports and len(advertised_ports) != nodes:
        raise ValueError(f"kafka-native: advertised_ports lists {len(advertised_ports)} ports for {nodes} nodes")
    return [
        NodeLayout(
            i, ports[per * (i - 1)], ports[per * (i - 1) + 1], run_dir / f"node{i}",
            advertised_client_port=advertised_ports[i - 1] if advertised_ports else None,
            internal_port=ports[per * (i - 1) + 2] if internal else None,
        )
        for i in range(1, nodes + 1)
    ]


def cluster_defaults(nodes: int, release: KafkaRelease) -> dict[str, str]:
    """Settings that make a small test cluster start fast and behave predictably."""
    rf, min_isr = str(min(nodes, 3)), ("1" if nodes < 3 else "2")
    props = {
        "num.partitions": "1",
        "default.replication.factor": rf,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        # No time-based retention: tests write records with fixed timestamps (e.g. 2023), which
        # the 7-day default deletes at the next retention check (every 5 min), so acknowledged
        # data would vanish mid-run. Topics that test retention set retention.ms themselves.
        "log.retention.ms": "-1",
        # Abort timed-out transactions within ~1s and expire transactional ids promptly.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "10000",
    }
    if release.major >= 4:  # the share coordinator exists from 4.0 on
        props.update(
            {
                "share.coordinator.state.topic.replication.factor": rf,
                "share.coordinator.state.topic.min.isr": min_isr,
                "share.coordinator.state.topic.num.partitions": "3",
                # Lets a share group set share.record.lock.duration.ms down to 1 s, so lock
                # expiry is observable in a test (Kafka's minimum is 15 s).
                "group.share.min.record.lock.duration.ms": "1000",
            }
        )
    return props


def server_properties(
    release: KafkaRelease,
    nodes: list[NodeLayout],
    node: NodeLayout,
    *,
    quorum: str = "dynamic",
    extra: dict[str, str] | None = None,
    security: dict[str, str] | None = None,
    security_mode: str = "plaintext",
) -> dict[str, str]:
    """server.properties of one combined broker+controller node, in file order. A secured
    `security_mode` names the client listener after its protocol and moves inter-broker
    traffic to a PLAINTEXT listener on the node's internal port; `security` holds that
    listener's TLS/SASL properties."""
    controllers = ",".join(n.controller_endpoint for n in nodes)
    client = CLIENT_LISTENER if security_mode == "plaintext" else sec.client_listener_name(security_mode)
    inter = CLIENT_LISTENER if node.internal_port is None else INTERNAL_LISTENER
    listeners = f"{client}://{node.bootstrap},{CONTROLLER_LISTENER}://{node.controller_endpoint}"
    # 3.x rejects controller listeners in advertised.listeners on a node with the broker role;
    # 4.x accepts them (and uses them to advertise the controller endpoint).
    advertised_client = node.bootstrap if node.advertised_client_port is None else f"{node.host}:{node.advertised_client_port}"
    advertised = f"{client}://{advertised_client}"
    protocol_map = f"{CONTROLLER_LISTENER}:PLAINTEXT,{client}:{security_mode.upper()}"
    if node.internal_port is not None:
        # Brokers replicate and send markers on INTERNAL, which neither client security nor
        # a fault proxy sits on (a proxy fault must cut clients, not replication).
        listeners += f",{inter}://{node.internal_endpoint}"
        advertised += f",{inter}://{node.internal_endpoint}"
        protocol_map += f",{inter}:PLAINTEXT"
    if release.major >= 4:
        advertised += f",{CONTROLLER_LISTENER}://{node.controller_endpoint}"
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
    }
    if quorum == "static":
        props["controller.quorum.voters"] = ",".join(f"{n.node_id}@{n.controller_endpoint}" for n in nodes)
    elif quorum == "dynamic":
        props["controller.quorum.bootstrap.servers"] = controllers
    else:
        raise ValueError(f"unknown quorum mode {quorum!r}")
    props.update(
        {
            "listeners": listeners,
            "advertised.listeners": advertised,
            "inter.broker.listener.name": inter,
            "controller.listener.names": CONTROLLER_LISTENER,
            "listener.security.protocol.map": protocol_map,
            "log.dirs": str(node.data_dir),
        }
    )
    props.update(cluster_defaults(len(nodes), release))
    props.update(security or {})
    for key, value in (extra or {}).items():
        props[key] = value
    return props


def _escape(text: str, key: bool) -> str:
    out = text.replace("\\", "\\\\").replace("\n", "\\n")
    if key:
        out = out.replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ")
    return out


def render_properties(props: dict[str, str], header: str = "") -> str:
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{_escape(k, True)}={_escape(v, False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def format_features(release: KafkaRelease, overrides: dict[str, int] | None = None) -> dict[str, int]:
    """Features finalized at format time: release defaults, then spec overrides."""
    features = dict(release.format_features)
    features.update(overrides or {})
    return features


def expected_features(release: KafkaRelease, overrides: dict[str, int] | None = None) -> dict[str, tuple[str, int]]:
    """name -> ("==" | ">=", level) that a started cluster must advertise as finalized."""
    expect = {name: (">=", level) for name, level in release.min_features}
    for name, level in format_features(release, overrides).items():
        expect[name] = ("==", level)
    return expect


def initial_controllers(nodes: list[NodeLayout], directory_ids: dict[int, str]) -> str:
    """The --initial-controllers value: id@host:port:directoryId,... (same on every node)."""
    return ",".join(f"{n.node_id}@{n.controller_endpoint}:{directory_ids[n.node_id]}" for n in nodes)


def format_args(
    release: KafkaRelease,
    node: NodeLayout,
    cluster_id: str,
    *,
    nodes: int,
    quorum: str,
    initial_controllers_value: str | None = None,
    features: dict[str, int] | None = None,
    extra_args: list[str] | None = None,
) -> list[str]:
    """Arguments of `kafka.tools.StorageTool format` for one node (`extra_args`: e.g. --add-scram)."""
    args = ["format", "--cluster-id", cluster_id, "--config", str(node.properties_file)]
    if quorum == "dynamic":
        if nodes == 1:
            args.append("--standalone")
        else:
            if not initial_controllers_value:
                raise ValueError("a dynamic quorum of several nodes needs --initial-controllers")
            args += ["--initial-controllers", initial_controllers_value]
    for name, level in (features or {}).items():
        args += ["--feature", f"{name}={level}"]
    return args + list(extra_args or [])


def jvm_args(
    release: KafkaRelease,
    node_logs_dir: Path,
    logging_config: Path,
    *,
    heap: str,
    root_level: str = "INFO",
    markers: dict[str, str] | None = None,
    tool: bool = False,
) -> list[str]:
    """JVM options: like bin/kafka-run-class.sh's for a broker (small heap, our logging
    config); for a short-lived tool (StorageTool) a quick-starting client-compiler JVM."""
    log_cfg = str(logging_config) if release.logging == "log4j2" else logging_config.as_uri()
    if tool:
        args = [f"-Xmx{heap}", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    else:
        args = [
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent",
            "-XX:+ExitOnOutOfMemoryError",
        ]
    if release.logging == "log4j2":
        # Kafka logs through its own shutdown hook; log4j2's hook would stop the logger
        # context first and the rest of the shutdown would be logged nowhere.
        args.append("-Dlog4j2.shutdownHookEnabled=false")
    args += [
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={node_logs_dir}",
        f"-D{release.logging_system_property}={log_cfg}",
        f"-Dkipcheck.root.level={root_level}",
    ]
    args += [f"-Dkipcheck.{k}={v}" for k, v in (markers or {}).items()]
    return args
