"""Kafka brokers in Docker containers via testcontainers-python: `testcontainers[:VERSION|IMAGE][:nodes=N]`.

start() gets an engine from targets.docker_engine (found, or installed and started when
root; DockerUnavailable - a NotSupportedByTarget, reported as a skip with the reason -
otherwise), imports testcontainers lazily (TestcontainersNotInstalled when the optional
extra is missing), makes `apache/kafka:<release>` present (targets.kafka_image: cache,
registry or an offline build), and starts one container per node on a Docker network of
its own. Each node is a combined broker+controller configured through the upstream
image's KAFKA_* variables: the client listener listens on the same port inside as the
published one outside (so the advertised address works from the host and the broker
itself), brokers talk over a separate INTERNAL listener on the cluster network, and the
features are finalized as kafka-native does (targets.kafka_native.config.format_features).

Ryuk is off (its image cannot be pulled here); containers and networks carry the run id
and the owner pid as labels and are removed by stop(), atexit/SIGTERM, a watcher process
that outlives a SIGKILL (targets.container_reaper), and at the next start (dead owners).
`confluentinc/cp-kafka` images are driven by testcontainers' own KafkaContainer (one node).
"""

from __future__ import annotations

import atexit
import base64
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from targets.docker_engine import LABEL_OWNER, LABEL_RUN, ensure_engine, remove_labelled
from targets.target import NotSupportedByTarget, Target, TargetError, TargetSpec, probe_capabilities
from reference_impl.client.raw_client import ClusterClient
from targets.kafka_image import ensure_image
from targets.kafka_native.config import cluster_defaults, format_features
from targets.kafka_native.versions import resolve_release

DEFAULT_REPOSITORY = "apache/kafka"
DEFAULT_TAG = "4.4.0"
"""Newest 4.x release (same as targets/kafka_native/versions.DEFAULT_VERSION)."""
DEFAULT_IMAGE = f"{DEFAULT_REPOSITORY}:{DEFAULT_TAG}"
CONTAINER_PORT = 9092
DEFAULT_STARTUP_TIMEOUT_S = 600
"""Per start attempt; the wait ends early when a broker exited or stalled (STALL_S)."""
START_ATTEMPTS = 2
STALL_S = 120.0
PAUSE_ATTEMPTS = 5


class TestcontainersNotInstalled(NotSupportedByTarget):
    """The optional testcontainers package is missing."""

    __test__ = False  # not a pytest test class despite the name


# --- the target ---------------------------------------------------------------------------

INTERNAL_PORT = 19092
CONTROLLER_PORT = 9093
CONTAINER_PREFIX = "kipcheck-kafka"


def resolve_image(version: str | None) -> str:
    """None -> default image; a bare version like '4.2.1' or '3.9' -> apache/kafka:<release>."""
    if not version:
        return DEFAULT_IMAGE
    if "/" not in version and ":" not in version and version[:1].isdigit():
        try:
            return f"{DEFAULT_REPOSITORY}:{resolve_release(version).version}"
        except ValueError:  # a tag kipcheck does not pin: only a registry can have it
            return f"{DEFAULT_REPOSITORY}:{version}"
    return version


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _advertised_host(engine_url: str) -> str:
    override = os.environ.get("TESTCONTAINERS_HOST_OVERRIDE")
    if override:
        return override
    parsed = urlparse(engine_url)
    if parsed.scheme in ("tcp", "http", "https") and parsed.hostname not in (None, "localhost", "127.0.0.1"):
        return parsed.hostname
    return "localhost"


def property_env_name(prop: str) -> str:
    """The upstream image's KAFKA_* spelling of a server property (inverse of its mapping)."""
    return "KAFKA_" + prop.replace("-", "___").replace("_", "__").replace(".", "_").upper()


def node_properties(release: Any, node_id: int, nodes: int, port: int, host: str) -> dict[str, str]:
    """One combined broker+controller: the client listener on the same port inside as outside
    (advertised as host:port), a separate INTERNAL listener for inter-broker traffic on the
    cluster network, a static controller quorum over that network."""
    alias = f"kafka-{node_id}"
    props = {
        "node.id": str(node_id),
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://:{port},INTERNAL://:{INTERNAL_PORT},CONTROLLER://:{CONTROLLER_PORT}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port},INTERNAL://{alias}:{INTERNAL_PORT}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": ",".join(f"{i}@kafka-{i}:{CONTROLLER_PORT}" for i in range(1, nodes + 1)),
        "log.dirs": "/var/lib/kafka/data",
    }
    props.update(cluster_defaults(nodes, release))
    return props


def _install_process_cleanup() -> None:
    """atexit plus SIGTERM/SIGHUP: stop every live target of this process (once)."""
    if getattr(_install_process_cleanup, "done", False):
        return
    _install_process_cleanup.done = True  # type: ignore[attr-defined]
    atexit.register(_stop_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous = signal.getsignal(sig)
            if previous in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)


def _on_signal(signum: int, _frame: Any) -> None:
    _stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_LIVE: "weakref.WeakSet[TestcontainersTarget]" = weakref.WeakSet()


def _stop_all() -> None:
    for target in list(_LIVE):
        try:
            target.stop()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _configure_testcontainers() -> None:
    """No Ryuk (its image cannot be pulled here; kipcheck reaps by label), and inside a
    container (/.dockerenv) talk to the published ports on the docker host."""
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    if os.path.exists("/.dockerenv"):
        os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
    from testcontainers.core.config import testcontainers_config as c  # optional heavy dependency: only a container start needs it

    c._ryuk_disabled = os.environ["TESTCONTAINERS_RYUK_DISABLED"].lower() in ("1", "true", "yes")


class TestcontainersTarget(Target):
    """`testcontainers[:VERSION|IMAGE][:nodes=N][:timeout=S][:KAFKA_SETTING=value...]`."""

    __test__ = False

    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        self.image = resolve_image(spec.version or spec.option("image"))
        if spec.nodes != 1 and self.is_confluent_image:
            raise ValueError("testcontainers: confluentinc images run one broker (nodes=1)")
        self.env_overrides: dict[str, str] = {}
        self.startup_timeout = float(DEFAULT_STARTUP_TIMEOUT_S)
        for key, value in spec.options:
            if key == "image":
                continue
            if key == "timeout":
                try:
                    self.startup_timeout = float(value)
                except ValueError:
                    raise ValueError(f"testcontainers: timeout must be seconds, got {value!r}") from None
                if not 0 < self.startup_timeout < float("inf"):
                    raise ValueError(f"testcontainers: timeout must be a positive number of seconds, got {value!r}")
            elif key.startswith("KAFKA_"):
                self.env_overrides[key] = value
        self.run_id = uuid.uuid4().hex[:10]
        self._containers: dict[int, Any] = {}
        self._ports: dict[int, int] = {}
        self._network: Any = None
        self._watcher: subprocess.Popen | None = None
        self._bootstrap: str | None = None
        self.engine: str | None = None
        self.image_source: str | None = None
        self.log_dir = Path(tempfile.gettempdir()) / f"kipcheck-containers-{self.run_id}"

    @property
    def version(self) -> str:
        return self.image

    @property
    def bootstrap_servers(self) -> str:
        if self._bootstrap is None:
            raise TargetError("testcontainers target is not started")
        return self._bootstrap

    @property
    def is_confluent_image(self) -> bool:
        return "cp-kafka" in self.image.split(":")[0]

    @property
    def labels(self) -> dict[str, str]:
        return {LABEL_OWNER: str(os.getpid()), LABEL_RUN: self.run_id}

    def start(self) -> None:
        if self._containers:
            return
        t0 = time.monotonic()
        url, api = ensure_engine()  # DockerUnavailable when no engine can be had
        self.engine = f"{url} (API {api})"
        try:
            _configure_testcontainers()
            from testcontainers.core.container import DockerContainer  # optional heavy dependency (see _configure_testcontainers)
        except ImportError as exc:
            raise TestcontainersNotInstalled(
                f"the testcontainers package is not importable (reinstall kipcheck: pip install -e .): {exc}"
            ) from exc
        remove_labelled(only_dead_owners=True)  # what a killed earlier run left
        _install_process_cleanup()
        _LIVE.add(self)
        self._watcher = _spawn_watcher(self.run_id)
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start_once(DockerContainer, url)
                break
            except Exception as exc:
                diagnosis = self._diagnosis()
                self.stop(keep_watcher=True)
                if attempt < START_ATTEMPTS and isinstance(exc, TargetError):
                    # Seen in CI, undiagnosed: a running container whose published port refuses
                    # connections for minutes. Say so with the evidence, then start afresh.
                    print(f"kipcheck: testcontainers start attempt {attempt} failed, retrying: {exc}\n{diagnosis}",
                          file=sys.stderr, flush=True)
                    continue
                self.stop()
                if isinstance(exc, (TargetError, NotSupportedByTarget)):
                    raise type(exc)(f"{exc}\n{diagnosis}" if diagnosis else str(exc)) from exc
                raise TargetError(f"cannot start Kafka container {self.image}: {exc}") from exc
        self.startup_seconds = time.monotonic() - t0

    def _start_once(self, DockerContainer: Any, url: str) -> None:
        if self.is_confluent_image:
            self._start_confluent()
        else:
            self._start_apache(DockerContainer, _advertised_host(url))
        self._wait_all(self.node_ids, f"Kafka container {self.image}")

    def _diagnosis(self) -> str:
        """Each container's state, published ports and last log lines, for a failed start."""
        out = []
        for nid, container in self._containers.items():
            try:
                wrapped = container.get_wrapped_container()
                wrapped.reload()
                state = wrapped.attrs.get("State", {})
                out.append(f"--- node {nid}: status={state.get('Status')} exit={state.get('ExitCode')} "
                           f"oom={state.get('OOMKilled')} ports={wrapped.ports} ---")
            except Exception as exc:  # noqa: BLE001 - the container may be gone
                out.append(f"--- node {nid}: no state ({exc}) ---")
            out.append(self.container_logs(tail=30, node_id=nid))
        return "\n".join(out)

    def _start_apache(self, DockerContainer: Any, host: str) -> None:
        from testcontainers.core.network import Network  # optional heavy dependency (see _configure_testcontainers)

        repo, _, tag = self.image.partition(":")
        try:
            release, pinned = resolve_release(tag), repo == DEFAULT_REPOSITORY
        except ValueError:  # another image or an unpinned tag: pulled by testcontainers
            release, pinned = resolve_release(None), False
        if pinned:
            _, self.image_source = ensure_image(release.version)
        features = " ".join(f"{k}={v}" for k, v in format_features(release).items()) if pinned else ""
        self._network = Network(docker_network_kw={"labels": self.labels})
        self._network.name = f"{CONTAINER_PREFIX}-{self.run_id}"
        self._network.create()
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        n = self.spec.nodes
        for node_id in self.node_ids:
            self._ports[node_id] = _free_port()
        for node_id in self.node_ids:
            port = self._ports[node_id]
            env = {property_env_name(k): v for k, v in node_properties(release, node_id, n, port, host).items()}
            env.update({"CLUSTER_ID": cluster_id, "KIPCHECK_FEATURES": features,
                        "KAFKA_HEAP_OPTS": "-Xmx384m -Xms128m"})
            env.update(self.env_overrides)
            container = (
                DockerContainer(self.image)
                .with_name(f"{CONTAINER_PREFIX}-{self.run_id}-{node_id}")
                .with_network(self._network)
                .with_network_aliases(f"kafka-{node_id}")
                .with_bind_ports(port, port)
                .with_kwargs(labels=self.labels, hostname=f"kafka-{node_id}")
            )
            for key, value in env.items():
                container.with_env(key, value)
            self._containers[node_id] = container
            container.start()
        self._bootstrap = ",".join(f"{host}:{self._ports[i]}" for i in self.node_ids)

    def _start_confluent(self) -> None:
        from testcontainers.kafka import KafkaContainer  # optional heavy dependency (see _configure_testcontainers)

        container = KafkaContainer(self.image).with_kwargs(labels=self.labels)
        if hasattr(container, "with_kraft"):
            container.with_kraft()
        for key, value in self.env_overrides.items():
            container.with_env(key, value)
        self._containers[1] = container
        container.start(timeout=int(self.startup_timeout))
        self._ports[1] = int(container.get_exposed_port(container.port))
        self._bootstrap = f"{container.get_container_host_ip()}:{self._ports[1]}"

    def _wait_all(self, node_ids: list[int], what: str, timeout: float | None = None) -> None:
        """Every node answers ApiVersions and Metadata lists all brokers (within the timeout).
        A loaded machine may need minutes, so the wait lasts while the brokers make progress;
        a container that exited or logged nothing for STALL_S fails at once (start retries)."""
        deadline = time.monotonic() + (self.startup_timeout if timeout is None else timeout)
        watch = _Progress(self, node_ids)
        pending, last = list(node_ids), None
        while time.monotonic() < deadline:
            pending = [n for n in pending if not self._answers(n)]
            if not pending:
                try:
                    with ClusterClient(self.bootstrap_servers, timeout=5.0) as cc:
                        last = sorted(cc.nodes)
                        if len(cc.nodes) >= len(self.node_ids):
                            return
                except Exception as exc:  # noqa: BLE001 - not up yet
                    last = exc
            watch.check(pending or list(node_ids), what)
            time.sleep(0.5)
        if pending:
            raise TargetError(f"{what} did not become ready within {deadline - watch.t0:.0f}s: "
                              f"nodes {pending} do not answer")
        raise TargetError(f"{what}: Metadata did not list {len(self.node_ids)} brokers in time ({last})")

    def _answers(self, node_id: int) -> bool:
        """One ApiVersions + Metadata round trip to the node's published port."""
        try:
            probe_capabilities(self.node_bootstrap(node_id), timeout=5.0)
            with ClusterClient(self.node_bootstrap(node_id), timeout=5.0) as cc:
                return bool(cc.nodes)
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def stop(self, keep_watcher: bool = False) -> None:
        """Remove the containers and the network; the reaper goes too unless a retried start
        still needs it."""
        containers, self._containers = self._containers, {}
        network, self._network = self._network, None
        self._bootstrap = None
        self._capabilities = None
        for container in containers.values():
            try:
                container.stop()  # removes the container and its volumes
            except Exception:  # noqa: BLE001 - already gone
                pass
        if network is not None:
            try:
                network.remove()
            except Exception:  # noqa: BLE001
                pass
        if not keep_watcher:
            self._stop_watcher()
            _LIVE.discard(self)

    def _stop_watcher(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher.poll() is None:
            watcher.terminate()
            watcher.wait(10)

    # -- containers, logs, description -----------------------------------------------

    def container(self, node_id: int) -> Any:
        """The docker-py Container of a node (reloaded)."""
        if not self._containers:
            raise TargetError("testcontainers target is not started")
        if node_id not in self._containers:
            raise ValueError(f"testcontainers target has nodes {self.node_ids}, not {node_id}")
        c = self._containers[node_id].get_wrapped_container()
        c.reload()
        return c

    def network_name(self) -> str:
        if self._network is None:
            raise NotSupportedByTarget("this testcontainers cluster has no network of its own (confluent image)")
        return self._network.name

    def node_port(self, node_id: int) -> int:
        return self._ports[node_id]

    def node_bootstrap(self, node_id: int) -> str:
        host = self.bootstrap_servers.split(",")[0].rsplit(":", 1)[0]
        return f"{host}:{self._ports[node_id]}"

    def node_bind_address(self, node_id: int) -> tuple[str, int]:
        host, _, port = self.node_bootstrap(node_id).rpartition(":")
        return host, int(port)

    def container_logs(self, tail: int = 200, node_id: int | None = None) -> str:
        """The last log lines of one node or every node ('' when there is no container)."""
        out = []
        for nid, container in self._containers.items():
            if node_id is not None and nid != node_id:
                continue
            try:
                raw = container.get_wrapped_container().logs(tail=tail)
                text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            except Exception:  # noqa: BLE001
                continue
            out.append(text if len(self._containers) == 1 else f"--- node {nid} ---\n{text}")
        return "\n".join(out)

    def log_paths(self) -> list[Path]:
        """`docker logs` of every node written to node<N>.log (refreshed on every call)."""
        paths = []
        for nid in self._containers:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            path = self.log_dir / f"node{nid}.log"
            path.write_text(self.container_logs(tail=100000, node_id=nid))
            paths.append(path)
        return paths

    def describe(self) -> dict[str, Any]:
        d = {
            "spec": self.name, "kind": self.kind, "version": self.version, "nodes": len(self.node_ids),
            "bootstrap": self._bootstrap, "startup_seconds": self.startup_seconds,
            "image": self.image, "image_source": self.image_source, "docker_engine": self.engine,
            "run_id": self.run_id,
        }
        if self._containers:
            d["containers"] = {nid: c.get_wrapped_container().short_id for nid, c in self._containers.items()}
        return d

    # -- lifecycle through the Docker API ----------------------------------------------

    def kill_node(self, node_id: int) -> None:
        """SIGKILL the broker (docker kill); the container and its data stay."""
        self.container(node_id).kill()

    def restart_node(self, node_id: int) -> None:
        c = self.container(node_id)
        if c.status == "paused":
            c.unpause()
        if c.status == "running":
            c.restart(timeout=10)
        else:
            c.start()
        self._wait_all([node_id], f"restarted Kafka container {self.image} node {node_id}")

    def pause_node(self, node_id: int) -> None:
        """docker pause (cgroup freezer): connections stay open, nothing answers. The freezer
        can fail transiently ("unable to freeze": a task in uninterruptible sleep, seen in CI);
        the pause is retried, and still failing it raises."""
        import docker.errors  # optional heavy dependency, comes with testcontainers

        for attempt in range(PAUSE_ATTEMPTS):
            try:
                self.container(node_id).pause()
                return
            except docker.errors.APIError as exc:
                if "unable to freeze" not in str(exc) or attempt == PAUSE_ATTEMPTS - 1:
                    raise
                time.sleep(1.0)

    def resume_node(self, node_id: int) -> None:
        self.container(node_id).unpause()


def _cpu_usage(container_id: str) -> int | None:
    """CPU time a container has used (cgroup v1 cpuacct or v2 cpu.stat), None when this
    machine cannot see the engine's cgroups (a remote engine)."""
    for path in (f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage",
                 f"/sys/fs/cgroup/cpu,cpuacct/docker/{container_id}/cpuacct.usage",
                 f"/sys/fs/cgroup/docker/{container_id}/cpu.stat",
                 f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat"):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if path.endswith("cpu.stat"):
            return next((int(v) for k, v in (ln.split() for ln in text.splitlines() if ln) if k == "usage_usec"), None)
        return int(text.strip())
    return None


class _Progress:
    """Whether starting brokers still make progress: a container that exited, or that used
    no CPU and logged no new line for STALL_S, will not become ready by waiting longer (seen
    in CI: a port that refused connections for minutes). A JVM on a machine with a load of
    70 can go minutes without a log line while it works, hence the CPU time; where the
    cgroups are out of sight only the log counts, and only once the broker has logged."""

    POLL_S = 5.0

    def __init__(self, target: "TestcontainersTarget", node_ids: list[int]) -> None:
        self.target, self.t0 = target, time.monotonic()
        self.last: dict[int, tuple[str, int | None]] = {}
        self.changed: dict[int, float] = {n: self.t0 for n in node_ids}
        self.next_poll = self.t0 + self.POLL_S

    def check(self, node_ids: list[int], what: str) -> None:
        now = time.monotonic()
        if now < self.next_poll:
            return
        self.next_poll = now + self.POLL_S
        for nid in node_ids:
            try:
                c = self.target.container(nid)
                status, token = c.status, (c.logs(tail=1).decode(errors="replace"), _cpu_usage(c.id))
            except Exception:  # noqa: BLE001 - the engine itself is slow: not a verdict
                continue
            if status in ("exited", "dead"):
                raise TargetError(f"{what}: node {nid} container {status} while starting")
            if token != self.last.get(nid):
                self.last[nid], self.changed[nid] = token, now
            elif (token[1] is not None or token[0]) and now - self.changed.setdefault(nid, now) > STALL_S:
                raise TargetError(f"{what}: node {nid} used no CPU and logged nothing for {STALL_S:.0f}s, "
                                  "and does not answer")


def _spawn_watcher(run_id: str) -> subprocess.Popen:
    """A process in its own session that removes this run's containers and network when this
    process dies, even by SIGKILL (Ryuk's job, done without its image)."""
    root = str(Path(__file__).resolve().parents[1])
    return subprocess.Popen(
        [sys.executable, "-m", "targets.container_reaper", str(os.getpid()), run_id],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, cwd=root, env={**os.environ, "PYTHONPATH": root},
    )


__all__ = [
    "DEFAULT_IMAGE",
    "TestcontainersNotInstalled",
    "TestcontainersTarget",
    "resolve_image",
]
