"""kafka-native: real Apache Kafka from Maven Central jars, KRaft combined nodes on loopback.

Spec: ``kafka-native[:VERSION][:nodes=N][:option=value...]``; VERSION is an exact release
or a line (``4.2`` -> newest pinned patch), default versions.DEFAULT_VERSION. Options are
documented in targets/kafka_native/config.py (``broker.<prop>=v``, ``feature.<name>=level``,
``heap``, ``quorum``, ``startup_timeout``, ``stop_timeout``, ``keep_logs``).

Environment:
  KIPCHECK_CACHE, KIPCHECK_MVN, KIPCHECK_MAVEN_REPO   jar cache and Maven (see jars.py)
  KIPCHECK_JAVA        java executable (default $JAVA_HOME/bin/java, then java on PATH)
  KIPCHECK_RUN_DIR     parent of run dirs (default: the system temp dir)
  KIPCHECK_KEEP_LOGS=1 keep the run dir after stop()

Run dir layout: ``<run dir>/node<N>/{server.properties, data/, logs/node<N>.log, logs/format.log}``.

Process hygiene: every JVM is started with PR_SET_PDEATHSIG=SIGKILL (it dies with this
Python process) from a long-lived spawner thread (the death signal follows the thread
that forked), in its own session; stop() sends SIGTERM, waits, then SIGKILLs; an atexit
handler stops targets that were never stopped.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
import ctypes
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from targets.kafka_native import config as cfg
from targets.kafka_native import security as sec
from targets.kafka_native.jars import classpath, ensure_jars
from targets.kafka_native.versions import KafkaRelease, resolve_release
from targets.target import ACL_USERS, AclPrincipals, Capabilities, Target, TargetError, TargetSpec, wait_until_ready
from reference_impl.client.raw_client import ClusterClient

PACKAGE_DIR = Path(__file__).resolve().parent
_UUID_RE = re.compile(r"^[A-Za-z0-9_-]{22}$")
_BIND_FAILURE = ("Address already in use", "BindException")


# -- process plumbing ------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
try:
    _LIBC: Any = ctypes.CDLL(None, use_errno=True)
    _PRCTL: Any = _LIBC.prctl
except (OSError, AttributeError):  # not Linux: rely on atexit/stop only
    _PRCTL = None


def _child_preexec(parent_pid: int) -> Callable[[], None]:
    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class _Spawner:
    """Forks children from one daemon thread that lives as long as the process, so the
    parent-death signal fires when this process dies, not when some worker thread ends."""

    def __init__(self) -> None:
        self._q: queue.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _run(self) -> None:
        while True:
            fn, fut = self._q.get()
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # handed to the caller
                    fut.set_exception(exc)

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="kipcheck-kafka-spawner", daemon=True)
                self._thread.start()
        fut: concurrent.futures.Future[subprocess.Popen[Any]] = concurrent.futures.Future()
        kwargs.setdefault("preexec_fn", _child_preexec(os.getpid()))
        kwargs.setdefault("start_new_session", True)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        self._q.put((lambda: subprocess.Popen(argv, **kwargs), fut))
        return fut.result()


_SPAWNER = _Spawner()
_LIVE: set["KafkaNativeTarget"] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all_at_exit() -> None:
    with _LIVE_LOCK:
        targets = list(_LIVE)
    for t in targets:
        try:
            t.stop(timeout_s=3.0)
        except Exception:
            pass


def find_java() -> str:
    env = os.environ.get("KIPCHECK_JAVA")
    if env:
        return env
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise TargetError("kafka-native needs Java 17+: no java on PATH (set JAVA_HOME or KIPCHECK_JAVA)")
    return found


def allocate_ports(count: int, host: str = cfg.HOST) -> list[int]:
    """Distinct free TCP ports on host (bound together, then released)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _live_cmdlines() -> list[tuple[int, list[bytes]]]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if cmdline and stat.rpartition(")")[2].split()[0] != "Z":  # zombies hold nothing
            out.append((int(entry.name), cmdline.split(b"\0")))
    return out


def processes_of_run(run_dir: Path | str) -> list[int]:
    """PIDs of live processes this target started for run_dir (JVMs carry -Dkipcheck.run=<dir>)."""
    marker = f"-Dkipcheck.run={run_dir}".encode()
    return [pid for pid, args in _live_cmdlines() if marker in args]


def processes_referencing(text: str) -> list[int]:
    """PIDs of live processes with text anywhere in their command line."""
    needle = text.encode()
    return [pid for pid, args in _live_cmdlines() if any(needle in a for a in args)]


def tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(data.rstrip().splitlines()[-lines:])


def first_errors(path: Path, most: int = 3) -> str:
    """The log's first ERROR/FATAL lines: a node that dies in start-up says why before the 40
    lines of orderly shutdown a tail shows (a clean-clone CI run lost the cause that way)."""
    try:
        with open(path, "rb") as f:
            lines = f.read(4 * 1024 * 1024).decode(errors="replace").splitlines()
    except OSError:
        return ""
    found = [ln.strip() for ln in lines if " ERROR " in ln or " FATAL " in ln or ln.startswith(("Exception", "Error"))]
    return (": " + " | ".join(found[:most])[:2000]) if found else ""


class _Node:
    def __init__(self, layout: cfg.NodeLayout) -> None:
        self.layout = layout
        self.proc: subprocess.Popen[Any] | None = None
        self.paused = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class KafkaNativeTarget(Target):
    """Apache Kafka `version`, `spec.nodes` combined broker+controller JVMs on 127.0.0.1."""

    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        self.release: KafkaRelease = resolve_release(spec.version)
        self.options = cfg.parse_options(spec.options)
        self.run_dir: Path | None = None
        self.libs_dir: Path | None = None
        self.java: str | None = None
        self.cluster_id: str | None = None
        self.jar_seconds: float | None = None
        self._nodes: dict[int, _Node] = {}
        self._lock = threading.RLock()
        self._started = False
        self.phase_seconds: dict[str, float] = {}
        self._password = sec.new_password()
        # The unprivileged users of authorizer=standard (name -> password).
        self._acl_passwords = {u: sec.new_password() for u in ACL_USERS} if self.options.authorized else {}
        self._security_files: sec.SecurityFiles | None = None
        self.client_properties_path: Path | None = None

    # -- Target basics --------------------------------------------------------------

    @property
    def version(self) -> str:
        return self.release.version

    @property
    def bootstrap_servers(self) -> str:
        if not self._nodes:
            raise TargetError("kafka-native target is not started")
        return ",".join(n.layout.bootstrap for n in self._nodes.values())

    @property
    def started(self) -> bool:
        """True between a successful start() and stop()."""
        return self._started and bool(self._nodes)

    def node_bootstrap(self, node_id: int) -> str:
        return self._node(node_id).layout.bootstrap

    @property
    def client_bootstrap(self) -> str:
        """Where clients bootstrap: each node's advertised client address (a fault proxy's,
        with `advertised_ports`), so no client connection goes around the proxies."""
        return ",".join(
            f"{n.layout.host}:{n.layout.advertised_client_port or n.layout.client_port}" for n in self._nodes.values()
        )

    def client_config(self) -> dict[str, str]:
        """bootstrap.servers plus, with `security=`, the TLS/SASL settings of the client listener."""
        if not self.options.secured:
            return {"bootstrap.servers": self.client_bootstrap}
        return sec.client_properties(
            self.options.security, self.client_bootstrap, self._security_files, self._password,
            self.options.sasl_mechanism,
        )

    def acl_principals(self) -> AclPrincipals:
        if not self.options.authorized:
            return super().acl_principals()
        return AclPrincipals(self.options.authorizer, sec.USER, tuple(self._acl_passwords))

    def client_config_as(self, user: str) -> dict[str, str]:
        """client_config() as `user`: the super user or one of the unprivileged ACL users."""
        principals = self.acl_principals()
        if user == principals.super_user:
            return self.client_config()
        if user not in self._acl_passwords:
            raise ValueError(f"kafka-native: no user {user!r}; users are {', '.join(principals.users)}")
        return sec.client_properties(
            self.options.security, self.client_bootstrap, self._security_files, self._acl_passwords[user],
            self.options.sasl_mechanism, user=user,
        )

    advertises_client_ports = True

    def advertise_client_ports(self, ports: dict[int, int]) -> None:
        """Before start: node id -> the client port Metadata advertises (a fault proxy that
        forwards to ``node_bind_address``); adds the INTERNAL inter-broker listener."""
        if self._started:
            raise TargetError("kafka-native: advertised ports are set before start")
        if sorted(ports) != self.node_ids:
            raise ValueError(f"kafka-native: advertised ports for nodes {sorted(ports)}, nodes are {self.node_ids}")
        self.options = dataclasses.replace(self.options, advertised_ports=tuple(ports[n] for n in self.node_ids))

    def node_bind_address(self, node_id: int) -> tuple[str, int]:
        lay = self._node(node_id).layout
        return lay.host, lay.client_port

    @property
    def keep_logs(self) -> bool:
        if self.options.keep_logs is not None:
            return self.options.keep_logs
        return os.environ.get("KIPCHECK_KEEP_LOGS", "").strip().lower() in ("1", "true", "yes", "on")

    @property
    def startup_timeout_s(self) -> float:
        if self.options.startup_timeout_s is not None:
            return self.options.startup_timeout_s
        return 120.0 if self.spec.nodes == 1 else 180.0

    def log_paths(self) -> list[Path]:
        out: list[Path] = []
        for n in self._nodes.values():
            out += [p for p in (n.layout.log_file, n.layout.format_log_file) if p.exists()]
        return out

    def describe(self) -> dict[str, Any]:
        d = super().describe() if self._nodes else {
            "spec": self.name,
            "kind": self.kind,
            "version": self.version,
            "nodes": len(self.node_ids),
            "bootstrap": None,
            "startup_seconds": self.startup_seconds,
        }
        d.update(
            {
                "version": self.version,
                "release_line": self.release.line,
                "run_dir": str(self.run_dir) if self.run_dir else None,
                "libs_dir": str(self.libs_dir) if self.libs_dir else None,
                "jar_seconds": self.jar_seconds,
                "java": self.java,
                "cluster_id": self.cluster_id,
                "quorum": self.options.quorum,
                "heap": self.options.heap,
                "broker_properties": dict(self.options.broker_properties),
                "format_features": cfg.format_features(self.release, self.options.features),
                "keep_logs": self.keep_logs,
                "phase_seconds": dict(self.phase_seconds),
                "security_protocol": self.options.security.upper(),
                "authorizer": self.options.authorizer,
                "client_config_file": str(self.client_properties_path) if self.client_properties_path else None,
            }
        )
        if self._capabilities is not None:
            d["finalized_features"] = dict(sorted(self._capabilities.finalized_features.items()))
        return d

    # -- start ----------------------------------------------------------------------

    def start(self) -> None:
        """Resolve jars (cached), format every node, start the JVMs, wait until the cluster
        serves, then check the finalized features. On failure nothing is left running."""
        with self._lock:
            if self._started:
                raise TargetError("kafka-native target is already started")
            self._nodes = {}
            self._capabilities = None
            self.startup_seconds = None
            self._started = True
            with _LIVE_LOCK:
                _LIVE.add(self)
            try:
                t_jars = time.monotonic()
                self.libs_dir = ensure_jars(self.release)
                self.jar_seconds = time.monotonic() - t_jars
                self.java = find_java()
                parent = os.environ.get("KIPCHECK_RUN_DIR") or None
                if parent:
                    Path(parent).mkdir(parents=True, exist_ok=True)
                self.run_dir = Path(tempfile.mkdtemp(prefix=f"kipcheck-kafka-{self.version}-", dir=parent))
                t0 = time.monotonic()
                crashed: _StartupExit | None = None
                for attempt in range(3):
                    try:
                        self._start_once()
                        break
                    except (_PortsTaken, _StartupExit) as exc:
                        if isinstance(exc, _StartupExit):
                            if crashed is not None:  # twice: not the machine's load, a real start-up failure
                                raise TargetError(f"{exc} (the first attempt failed too: {crashed.first})") from None
                            crashed = exc
                            print(f"kipcheck: warning: {exc.first}; starting the cluster once more", file=sys.stderr)
                        self._kill_all()
                        self._nodes = {}
                        for child in self.run_dir.iterdir():
                            shutil.rmtree(child, ignore_errors=True)
                        if attempt == 2:
                            raise TargetError(f"kafka-native: ports kept being taken; run dir {self.run_dir}")
                self.startup_seconds = time.monotonic() - t0
                self._check_features(self.capabilities(refresh=True))
            except BaseException:
                self.stop(timeout_s=3.0)
                raise

    def _start_once(self) -> None:
        assert self.run_dir is not None
        nodes = self.spec.nodes
        secured, adv = self.options.secured, self.options.advertised_ports
        internal = secured or bool(adv)
        layouts = cfg.layout_nodes(
            self.run_dir, allocate_ports((3 if internal else 2) * nodes), nodes, adv, internal=secured
        )
        self._nodes = {lay.node_id: _Node(lay) for lay in layouts}
        listener_props = self._prepare_security() if secured else {}
        for lay in layouts:
            lay.data_dir.mkdir(parents=True, exist_ok=True)
            lay.logs_dir.mkdir(parents=True, exist_ok=True)
            props = cfg.server_properties(
                self.release, layouts, lay, quorum=self.options.quorum, extra=self.options.broker_properties,
                security=listener_props, security_mode=self.options.security,
            )
            lay.properties_file.write_text(
                cfg.render_properties(props, f"kipcheck kafka-native {self.version} node {lay.node_id} of {nodes}")
            )
        t0 = time.monotonic()
        self._format(layouts)
        t1 = time.monotonic()
        for node in self._nodes.values():
            self._launch(node)
        self._wait_ready(self.node_ids, self.startup_timeout_s, "kafka-native cluster")
        self.phase_seconds = {"format": round(t1 - t0, 3), "brokers": round(time.monotonic() - t1, 3)}

    def _prepare_security(self) -> dict[str, str]:
        """Certificates (TLS modes) and the client properties file in the run dir; returns
        the secured listener's broker properties."""
        assert self.run_dir is not None
        mode = self.options.security
        if mode in ("ssl", "sasl_ssl"):
            self._security_files = sec.generate_certificates(self.run_dir / "security")
        path = self.run_dir / "client.properties"
        lines = [f"# kipcheck kafka-native {self.version} ({mode}); usable as KIPCHECK_EXTERNAL_CONFIG"]
        lines += [f"{k}={v}" for k, v in self.client_config().items()]
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)
        self.client_properties_path = path
        props = sec.broker_properties(mode, self._security_files, self._password, self._acl_passwords)
        if self.options.authorized:
            props.update(sec.authorizer_properties())
        return props

    def _tool(self, args: list[str], log: Path | None, timeout_s: float = 120.0) -> str:
        """Run kafka.tools.StorageTool with args; return stdout; raise with output on failure."""
        assert self.libs_dir is not None and self.java is not None and self.run_dir is not None
        argv = [
            self.java,
            *cfg.jvm_args(
                self.release,
                self.run_dir,
                PACKAGE_DIR / self.release.logging_config_name,
                heap="256m",
                root_level="WARN",
                markers={"run": str(self.run_dir)},
                tool=True,
            ),
            "-cp",
            classpath(self.libs_dir),
            "kafka.tools.StorageTool",
            *args,
        ]
        proc = _SPAWNER.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            raise TargetError(f"kafka-native: StorageTool {args[0]} timed out after {timeout_s:.0f}s:\n{out}")
        if log is not None:
            with open(log, "a") as f:
                f.write(f"$ {' '.join(argv)}\n{out}\n(exit {proc.returncode})\n")
        if proc.returncode != 0:
            raise TargetError(
                f"kafka-native {self.version}: StorageTool {' '.join(args)} failed (exit {proc.returncode}):\n"
                f"{out.strip()[-4000:]}"
            )
        return out

    def _random_uuid(self) -> str:
        out = self._tool(["random-uuid"], None, timeout_s=60.0)
        ids = [line.strip() for line in out.splitlines() if _UUID_RE.match(line.strip())]
        if not ids:
            raise TargetError(f"kafka-native: StorageTool random-uuid printed no id:\n{out}")
        return ids[-1]

    def _format(self, layouts: list[cfg.NodeLayout]) -> None:
        nodes = len(layouts)
        need_dir_ids = self.options.quorum == "dynamic" and nodes > 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            futures = [pool.submit(self._random_uuid) for _ in range(1 + (nodes if need_dir_ids else 0))]
            ids = [f.result() for f in futures]
            self.cluster_id = ids[0]
            ic = None
            if need_dir_ids:
                ic = cfg.initial_controllers(layouts, {lay.node_id: ids[i + 1] for i, lay in enumerate(layouts)})
            features = cfg.format_features(self.release, self.options.features)
            jobs = [
                pool.submit(
                    self._tool,
                    cfg.format_args(
                        self.release,
                        lay,
                        self.cluster_id,
                        nodes=nodes,
                        quorum=self.options.quorum,
                        initial_controllers_value=ic,
                        features=features,
                        extra_args=sec.scram_format_args(self._password, self._acl_passwords)
                        if self.options.security.startswith("sasl_") else None,
                    ),
                    lay.format_log_file,
                )
                for lay in layouts
            ]
            for j in jobs:
                j.result()

    def _launch(self, node: _Node) -> None:
        assert self.libs_dir is not None and self.java is not None and self.run_dir is not None
        lay = node.layout
        argv = [
            self.java,
            *cfg.jvm_args(
                self.release,
                lay.logs_dir,
                PACKAGE_DIR / self.release.logging_config_name,
                heap=self.options.heap,
                markers={"run": str(self.run_dir), "node": str(lay.node_id)},
            ),
            "-cp",
            classpath(self.libs_dir),
            "kafka.Kafka",
            str(lay.properties_file),
        ]
        with open(lay.log_file, "ab") as log:
            log.write(f"\n=== kipcheck: starting node {lay.node_id} at {time.strftime('%H:%M:%S')}: "
                      f"{' '.join(argv)}\n".encode())
            log.flush()
            node.proc = _SPAWNER.popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=str(lay.node_dir))
        node.paused = False

    # -- readiness ------------------------------------------------------------------

    def _wait_ready(self, node_ids: list[int], timeout_s: float, what: str) -> Capabilities:
        """Until each node answers ApiVersions + Metadata and Metadata lists every live node."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        pending = list(node_ids)
        caps: Capabilities | None = None
        while True:
            for nid in node_ids:
                node = self._nodes[nid]
                if not node.alive:
                    log_text = tail(node.layout.log_file)
                    if any(s in log_text for s in _BIND_FAILURE):
                        raise _PortsTaken()
                    code = node.proc.returncode if node.proc else None
                    first = f"{what}: Kafka {self.version} node {nid} exited (code {code}) during start-up"
                    raise _StartupExit(first + first_errors(node.layout.log_file),
                                       f"{first}{first_errors(node.layout.log_file)}; log {node.layout.log_file}:\n{log_text}")
            try:
                while pending:
                    nid = pending[0]
                    caps = wait_until_ready(self.node_bootstrap(nid), 1.0, f"node {nid}", security=self.raw_security())
                    pending.pop(0)
                if self._metadata_lists(node_ids[0], self._running_ids()):
                    assert caps is not None
                    return caps
                last = TargetError("Metadata does not list every running node yet")
            except TargetError as exc:
                last = exc
            if time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- node {n} ({self._nodes[n].layout.log_file}) ---\n{tail(self._nodes[n].layout.log_file, 25)}"
                    for n in node_ids
                )
                raise TargetError(
                    f"{what}: Kafka {self.version} did not become ready within {timeout_s:.0f}s "
                    f"(last: {last}); run dir {self.run_dir}\n{logs}"
                )
            time.sleep(0.2)

    def _running_ids(self) -> set[int]:
        return {nid for nid, n in self._nodes.items() if n.alive and not n.paused}

    def _metadata_lists(self, via_node: int, expected: set[int]) -> bool:
        try:
            with ClusterClient(self.node_bootstrap(via_node), timeout=5.0, security=self.raw_security()) as cc:
                return expected <= set(cc.nodes)
        except Exception:
            return False

    def _check_features(self, caps: Capabilities) -> None:
        problems = []
        for name, (op, level) in cfg.expected_features(self.release, self.options.features).items():
            got = caps.feature(name)
            if (op == "==" and got != level) or (op == ">=" and got < level):
                problems.append(f"{name}: expected {op} {level}, finalized {got}")
        if problems:
            raise TargetError(
                f"kafka-native {self.version}: finalized features differ from what was formatted: "
                f"{'; '.join(problems)} (all finalized: {caps.finalized_features})"
            )

    # -- lifecycle ------------------------------------------------------------------

    def _node(self, node_id: int) -> _Node:
        if not self._nodes:
            raise TargetError("kafka-native target is not started")
        try:
            return self._nodes[node_id]
        except KeyError:
            raise ValueError(f"kafka-native: no node {node_id}; nodes are {sorted(self._nodes)}") from None

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node's JVM (no shutdown hooks, no controlled shutdown)."""
        with self._lock:
            node = self._node(node_id)
            if node.proc is not None and node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait(30)
            node.paused = False

    def stop_node(self, node_id: int) -> None:
        """Clean shutdown of one node (SIGTERM: controlled shutdown; SIGKILL after the grace)."""
        with self._lock:
            self._terminate([self._node(node_id)], self.options.stop_timeout_s)

    def restart_node(self, node_id: int, timeout_s: float | None = None) -> None:
        """Start a node again (stopping it first if it runs) on the same ports and data dir,
        and wait until it answers and its Metadata lists every running node."""
        with self._lock:
            node = self._node(node_id)
            if node.alive:
                self._terminate([node], self.options.stop_timeout_s)
            self._launch(node)
            try:
                self._wait_ready([node_id], timeout_s or self.startup_timeout_s, f"kafka-native node {node_id} restart")
            except _PortsTaken:
                raise TargetError(
                    f"kafka-native node {node_id} cannot restart: its ports were taken meanwhile "
                    f"(client {node.layout.client_port}, controller {node.layout.controller_port}); "
                    f"log {node.layout.log_file}:\n{tail(node.layout.log_file)}"
                ) from None

    def pause_node(self, node_id: int) -> None:
        with self._lock:
            node = self._node(node_id)
            if not node.alive:
                raise TargetError(f"kafka-native node {node_id} is not running")
            os.kill(node.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            node.paused = True

    def resume_node(self, node_id: int) -> None:
        with self._lock:
            node = self._node(node_id)
            if node.alive:
                os.kill(node.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
            node.paused = False

    def node_alive(self, node_id: int) -> bool:
        return self._node(node_id).alive

    def _terminate(self, nodes: list[_Node], timeout_s: float) -> None:
        for n in nodes:
            if n.alive:
                try:
                    n.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
                    if n.paused:
                        n.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout_s
        for n in nodes:
            if n.proc is None:
                continue
            try:
                n.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                n.proc.kill()
                n.proc.wait(30)
            n.paused = False

    def _kill_all(self) -> None:
        for n in self._nodes.values():
            if n.proc is not None and n.proc.poll() is None:
                n.proc.kill()
                n.proc.wait(30)

    def stop(self, timeout_s: float | None = None, keep_run_dir: bool | None = None) -> None:
        """SIGTERM every JVM, SIGKILL what is left after the grace period, reap them all,
        and remove the run dir unless keep_logs."""
        with self._lock:
            try:
                if self._nodes:
                    grace = self.options.stop_timeout_s if timeout_s is None else timeout_s
                    self._terminate(list(self._nodes.values()), grace)
                if self.run_dir is not None:
                    # Anything else of this run (a StorageTool left by an interrupted start).
                    for pid in processes_of_run(self.run_dir):
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                keep = self.keep_logs if keep_run_dir is None else keep_run_dir
                if self.run_dir is not None and not keep:
                    shutil.rmtree(self.run_dir, ignore_errors=True)
            finally:
                self._started = False
                with _LIVE_LOCK:
                    _LIVE.discard(self)


class _StartupExit(TargetError):
    """A node exited during start-up for another reason than its ports: under heavy load a
    KRaft node can give up waiting for its quorum; the cluster is started once more, and a
    second exit is the error (with both causes)."""

    def __init__(self, first: str, message: str) -> None:
        super().__init__(message)
        self.first = first


class _PortsTaken(Exception):
    """A node could not bind its ports (taken between allocation and bind): retry."""
