"""A Toxiproxy server process on a free loopback port, with its seed recorded.

``-port 0`` binds but the server then logs ``:0``, so the port is chosen here. ``-seed``
makes toxicity and jitter reproducible; the seed goes into the run's record.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from chaos.toxiproxy.install import ensure_server

HOST = "127.0.0.1"


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG=SIGKILL: a test process that dies without stop() leaves no server."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: stop()/atexit only
        pass


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ToxiproxyServer:
    """One ``toxiproxy-server`` child process; ``start()`` waits until ``GET /version`` answers."""

    def __init__(self, seed: int = 0, host: str = HOST, port: int | None = None) -> None:
        self.seed = seed
        self.host = host
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.version: str | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 20.0) -> "ToxiproxyServer":
        binary = ensure_server()
        for _ in range(3):  # a chosen port can be taken before the server binds it
            port = self.port or free_port(self.host)
            fd, log = tempfile.mkstemp(prefix="kipcheck-toxiproxy-", suffix=".log")
            self.log_path = Path(log)
            argv = [str(binary), "-host", self.host, "-port", str(port), "-seed", str(self.seed)]
            self.proc = subprocess.Popen(argv, stdout=fd, stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=_die_with_parent)
            os.close(fd)
            self.port = port
            if self._wait_up(timeout_s):
                return self
            self.stop()
            self.port = None
        raise RuntimeError(f"toxiproxy-server did not come up; log {self.log_path}:\n{self.log_tail()}")

    def _wait_up(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/version", timeout=2.0) as resp:
                    self.version = json.loads(resp.read()).get("version")
                    return True
            except OSError:
                time.sleep(0.1)
        return False

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:] if self.log_path else ""
        except OSError:
            return ""

    def stop(self, timeout_s: float = 5.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    def describe(self) -> dict[str, object]:
        return {"url": self.url, "seed": self.seed, "version": self.version}

    def __enter__(self) -> "ToxiproxyServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
