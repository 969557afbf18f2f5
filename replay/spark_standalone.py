"""A Spark standalone cluster on loopback (master + workers), for tests and benchmarks.

The pyspark distribution's own launcher (`bin/spark-class` with
`org.apache.spark.deploy.master.Master` / `...worker.Worker`) runs each daemon in the
foreground as a child process, so every one is owned and stopped by its id. `start()` waits
(bounded) for the master to report the workers alive through its JSON status page; `stop()`
terminates them, then kills whatever did not exit. Executors run `executor_python`, which
need not have kipcheck installed: jobs ship it (`--py-files`, see docs/trace-checks.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata as md
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> str:
    """The pip-installed pyspark is a whole Spark distribution (bin/, jars/)."""
    import pyspark  # heavy dependency: only a cluster start needs it

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClusterError(Exception):
    pass


@dataclass
class StandaloneCluster:
    executor_python: str
    workers: int = 2
    cores_per_worker: int = 1
    worker_memory: str = "1g"
    start_timeout_s: float = 600.0  # two JVMs and a master on shared cores: minutes under load
    work_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="kipcheck-spark-standalone-"))
    procs: list[subprocess.Popen] = field(default_factory=list)
    port: int = 0
    ui_port: int = 0

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1", SPARK_MASTER_HOST="127.0.0.1",
                   SPARK_LOG_DIR=self.work_dir, SPARK_NO_DAEMONIZE="1", PYSPARK_PYTHON=self.executor_python,
                   SPARK_DAEMON_MEMORY="512m")
        env.pop("PYTHONPATH", None)  # executors see only their own Python and what jobs ship
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(os.path.join(self.work_dir, f"{name}.log"), "wb")
        cmd = [os.path.join(spark_home(), "bin", "spark-class"), *args]
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                           cwd=self.work_dir, start_new_session=True))
        log.close()

    def start(self) -> "StandaloneCluster":
        self.port, self.ui_port = free_port(), free_port()
        self._spawn("master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                               "--webui-port", str(self.ui_port)])
        for i in range(self.workers):
            wdir = os.path.join(self.work_dir, f"worker-{i}")
            os.makedirs(wdir, exist_ok=True)
            self._spawn(f"worker-{i}", [WORKER_CLASS, self.master_url, "--host", "127.0.0.1", "--cores",
                                        str(self.cores_per_worker), "--memory", self.worker_memory,
                                        "--webui-port", str(free_port()), "--work-dir", wdir])
        try:
            self._wait_alive()
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.loads(r.read())

    def _wait_alive(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        last: object = None
        while time.monotonic() < deadline:
            dead = [p.args[1] for p in self.procs if p.poll() is not None]
            if dead:
                raise ClusterError(f"{dead[0]} exited with {self.procs[0].returncode} before the cluster was up; "
                                   f"logs in {self.work_dir}")
            try:
                st = self.status()
                alive = [w for w in st.get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) >= self.workers:
                    return
                last = f"{len(alive)} of {self.workers} workers alive"
            except OSError as exc:
                last = exc
            time.sleep(0.5)
        raise ClusterError(f"standalone cluster not up within {self.start_timeout_s:.0f} s ({last}); "
                           f"logs in {self.work_dir}")

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM every daemon (workers first, each in its own process group: the launcher
        and its JVM), then SIGKILL what is still there after `grace_s`."""
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
        self.procs.clear()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop()
        if exc_type is None:  # logs are kept only when something failed
            shutil.rmtree(self.work_dir, ignore_errors=True)


# ----------------------------------------------------------------------------- executor Python

EXECUTOR_PACKAGES = ("numpy", "pandas", "pyarrow", "kio", "cramjam")  # what the shipped kipcheck code imports on executors (cramjam: reference_impl.protocol.records)


def executor_venv(base_python: str | None = None, cache: str | None = None, timeout_s: float = 900) -> str:
    """The Python of a venv with only the executor dependencies (the versions of this
    interpreter's, so pickled Arrow/pandas data round-trips), created once under
    ~/.cache/kipcheck (a file lock serializes concurrent creators). No kipcheck in it.
    ``base_python``: default the interpreter this venv was made from (same minor version)."""
    base_python = base_python or getattr(sys, "_base_executable", None) or sys.executable

    pins = [f"{p}=={md.version(p)}" for p in EXECUTOR_PACKAGES]
    tag = hashlib.sha256(" ".join([base_python, *pins]).encode()).hexdigest()[:12]
    root = os.path.join(cache or os.path.expanduser("~/.cache/kipcheck"), f"spark-executor-venv-{tag}")
    python = os.path.join(root, "bin", "python")
    done = os.path.join(root, ".complete")
    os.makedirs(os.path.dirname(root), exist_ok=True)
    with open(root + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(done):
            # no pip inside (ensurepip is slow and not needed): this interpreter's pip installs into it
            subprocess.run([base_python, "-m", "venv", "--clear", "--without-pip", root], check=True, timeout=timeout_s)
            subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                            "--disable-pip-version-check", *pins], check=True, timeout=timeout_s, stdout=sys.stderr)
            open(done, "w").close()
    return python


if __name__ == "__main__":
    # `python -m replay.spark_standalone`: build the executor venv before xdist workers start
    print(executor_venv())
