"""Tansu as a target: a fifth, independent broker implementation (Rust, Apache-2.0).

``tansu broker`` (built by ``targets.tansu.build``) on one loopback port, with the storage
engine the spec names: ``memory`` (``memory://tansu/``, feature dynostore: nothing survives
the process) or ``sqlite`` (``sqlite://tansu.db``, feature libsql; Tansu opens the path
relative to its working directory, the run directory here). Readiness is a protocol round
trip (ApiVersions plus a Metadata that lists the broker); stop is SIGTERM, which Tansu
handles by cancelling its tasks, then SIGKILL after STOP_TIMEOUT_S.

One node only: Tansu's broker has no node id setting (every process is node 111,
tansu_broker::NODE_ID) and brokers share a cluster only through a shared storage engine
(Postgres, S3), so there is no Kafka-style multi-node cluster to start here.

Lifecycle: with sqlite, ``kill_node`` is SIGKILL and ``restart_node`` starts the process again
on the same port and database file (a crash with its data kept on disk); ``stop_node`` is a
SIGTERM. With memory a restart would be a new, empty broker, so these are not supported.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from targets.tansu.build import TANSU_VERSION, TansuBuildError, ensure_binary
from targets.target import NotSupportedByTarget, Target, TargetError, TargetSpec, wait_until_ready

STORAGES = ("memory", "sqlite")
NODE_ID = 111  # tansu_broker::NODE_ID: the id every Tansu broker reports
CLUSTER_ID = "kipcheck-tansu"
STOP_TIMEOUT_S = 10.0
DEFAULT_TIMEOUT_S = 60.0
_PANIC = re.compile(r"panicked at")


class TansuTarget(Target):
    """One `tansu broker` process on a free loopback port."""

    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        self.storage, self.timeout = check_spec(spec)
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._run_dir: Path | None = None
        self._generation = 0

    @property
    def version(self) -> str:
        return f"tansu-{TANSU_VERSION} ({self.storage})"

    @property
    def node_ids(self) -> list[int]:
        return [NODE_ID]

    @property
    def bootstrap_servers(self) -> str:
        if self._port is None:
            raise TargetError("tansu target is not started")
        return f"127.0.0.1:{self._port}"

    def start(self) -> None:
        if self._proc is not None:
            return
        t0 = time.monotonic()
        try:
            binary = ensure_binary()
        except TansuBuildError as exc:
            raise TargetError(str(exc).splitlines()[0]) from None
        self._run_dir = self._run_dir or Path(tempfile.mkdtemp(prefix="kipcheck-tansu-"))
        self._port = self._port or _free_port()
        self._spawn(binary)
        self._capabilities = self._wait_ready(t0)
        self.startup_seconds = time.monotonic() - t0

    def _spawn(self, binary: Path) -> None:
        assert self._run_dir is not None and self._port is not None
        self._generation += 1
        with open(self._log_path(), "wb") as log:
            self._proc = subprocess.Popen(broker_argv(binary, self.storage, self._port), cwd=self._run_dir,
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          env=dict(os.environ, NO_COLOR="1"), preexec_fn=_die_with_parent())

    def _wait_ready(self, t0: float) -> Any:
        try:
            return wait_until_ready(self.bootstrap_servers, max(1.0, t0 + self.timeout - time.monotonic()), "tansu")
        except Exception as exc:
            exited = self._proc.poll() if self._proc else None
            tail = self._log_tail()
            self.stop()
            if exited is not None:
                raise TargetError(f"tansu broker exited ({exited}): {tail or 'no output'}") from exc
            raise

    def _log_path(self) -> Path:
        assert self._run_dir is not None
        return self._run_dir / ("tansu.log" if self._generation <= 1 else f"tansu-{self._generation}.log")

    def _log_tail(self, limit: int = 500) -> str:
        path = self._log_path() if self._run_dir else None
        return path.read_text(errors="replace").strip()[-limit:] if path and path.exists() else ""

    def stop(self) -> None:
        self._terminate(signal.SIGTERM)
        self._port, self._capabilities = None, None

    def _terminate(self, sig: signal.Signals) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)

    def log_paths(self) -> list[Path]:
        return sorted(self._run_dir.glob("tansu*.log")) if self._run_dir else []

    def panics(self) -> list[str]:
        """Tansu's panic lines (a panicking task leaves the process up; see docs/targets.md#tansu)."""
        return [line.strip() for p in self.log_paths() for line in p.read_text(errors="replace").splitlines()
                if _PANIC.search(line)]

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["storage"] = self.storage
        panics = self.panics()
        if panics:
            d["panics"] = panics[:10]
        return d

    # -- lifecycle (sqlite only: the memory engine keeps nothing across a restart) --------------

    def _durable(self, node_id: int, what: str) -> None:
        if node_id != NODE_ID:
            raise ValueError(f"tansu has node {NODE_ID} only, not {node_id}")
        if self.storage != "sqlite":
            raise NotSupportedByTarget(f"tansu:storage=memory cannot {what}: the memory engine keeps nothing "
                                       f"across a restart (use tansu:storage=sqlite)")

    def kill_node(self, node_id: int) -> None:
        """SIGKILL: the process dies, its sqlite database file stays."""
        self._durable(node_id, "kill and restart its broker")
        self._terminate(signal.SIGKILL)

    def stop_node(self, node_id: int) -> None:
        """SIGTERM: Tansu cancels its tasks and exits."""
        self._durable(node_id, "stop and restart its broker")
        self._terminate(signal.SIGTERM)

    def restart_node(self, node_id: int) -> None:
        """Start the broker again on the same port and database (after a kill if it is up)."""
        self._durable(node_id, "restart its broker")
        self._terminate(signal.SIGKILL)
        t0 = time.monotonic()
        self._spawn(ensure_binary())
        self._wait_ready(t0)


def broker_argv(binary: Path | str, storage: str, port: int) -> list[str]:
    """`tansu broker` on 127.0.0.1:port, advertising that address, with the storage engine."""
    engine = "memory://tansu/" if storage == "memory" else "sqlite://tansu.db"
    url = f"tcp://127.0.0.1:{port}"
    return [str(binary), "broker", "--cluster-id", CLUSTER_ID, "--listener-url", url,
            "--advertised-listener-url", url, "--storage-engine", engine]


def check_spec(spec: TargetSpec) -> tuple[str, float]:
    """(storage, start timeout) of a spec, or ValueError naming what is wrong (option names
    and the version are checked by targets.target.check_target_spec)."""
    if spec.nodes != 1:
        raise ValueError(f"tansu runs one broker (every Tansu broker is node {NODE_ID}), not nodes={spec.nodes}")
    storage = spec.option("storage") or "memory"
    if storage not in STORAGES:
        raise ValueError(f"tansu: storage must be one of {', '.join(STORAGES)}, got {storage!r}")
    raw = spec.option("timeout")
    if raw is not None and not (raw.isdigit() and int(raw) >= 1):
        raise ValueError(f"tansu: timeout must be a positive integer (seconds), got {raw!r}")
    return storage, float(raw) if raw else DEFAULT_TIMEOUT_S


def _die_with_parent() -> Callable[[], None] | None:
    """PR_SET_PDEATHSIG=SIGKILL, so a test process that dies without stop() leaves no broker.
    The signal follows the thread that forked: only set from the main thread, where a
    target's life is the process's (a restart from a chaos thread must outlive that thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def preexec() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # not Linux: stop() only
            pass

    return preexec


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


__all__ = ["TansuTarget", "broker_argv", "check_spec"]
