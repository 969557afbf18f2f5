"""The guardian's user count across independent processes: a kipcheck-started engine stays up
while any registered process lives, and goes (daemon included) once the last one is gone,
even by SIGKILL. Runs a private dockerd (KIPCHECK_DOCKER_ROOT), so the machine's shared
engine and other runs are never touched."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from targets import docker_engine as de
from targets.docker_engine import ENGINE_PING_TIMEOUT_S

pytestmark = pytest.mark.deadline(300)

REPO = Path(__file__).resolve().parents[2]
USER = (
    "import sys; from targets.docker_engine import ensure_engine; "
    "print(ensure_engine()[0], flush=True); sys.stdin.read()"
)


def test_a_recycled_pid_is_not_a_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KIPCHECK_DOCKER_ROOT", str(tmp_path))
    (de.state_dir() / "users").write_text(f"{os.getpid()} 1\n")  # same pid, another start time
    assert de.live_users() == []
    de.register_user()
    assert de.live_users() == [os.getpid()]
    assert (de.state_dir() / "users").read_text().split() == [str(os.getpid()), de._start_time(os.getpid())]


@pytest.fixture
def private_engine() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0 or de._dockerd() is None:
        pytest.skip("DockerUnavailable: a private dockerd needs root and docker.io's dockerd")
    root = tempfile.mkdtemp(prefix="kc-eng-", dir="/tmp")  # short: a unix socket path is <108 bytes
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    env.update(KIPCHECK_DOCKER_ROOT=root, PYTHONPATH=str(REPO))
    yield env
    pid_file = Path(root) / "state" / "dockerd.pid"
    if pid_file.exists() and de.pid_alive(int(pid_file.read_text())):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    for mnt in (f"{root}/exec/netns/default", f"{root}/data"):  # left mounted only by a failed run
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=30, check=False)
    shutil.rmtree(root, ignore_errors=True)


def _user(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", USER], cwd=REPO, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stdout.readline().strip()  # bounded by ensure_engine's own start timeout
    assert line.startswith("unix://"), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, line


def _wait(cond, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def _holds_open(pid: int, path: str) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def _slow_engine_is_waited_for(env: dict[str, str], dockerd: int, users: set[int]) -> None:
    """A kipcheck dockerd that does not answer the 3 s ping (SIGSTOPped here, a loaded machine
    in CI) is waited for: no second daemon, no registration lost."""
    state = Path(env["KIPCHECK_DOCKER_ROOT"]) / "state"
    os.kill(dockerd, signal.SIGSTOP)
    try:
        c = subprocess.Popen([sys.executable, "-c", USER], cwd=REPO, env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        lock = str(state / "engine.lock")
        assert _wait(lambda: _holds_open(c.pid, lock), 120), "C never reached ensure_engine's lock"
        time.sleep(2 * ENGINE_PING_TIMEOUT_S)  # C's ping must time out while dockerd is stopped
    finally:
        os.kill(dockerd, signal.SIGCONT)
    try:
        assert c.stdout.readline().startswith("unix://"), c.stderr.read() if c.poll() is not None else ""
        assert int((state / "dockerd.pid").read_text()) == dockerd
        registered = {int(line.split()[0]) for line in (state / "users").read_text().splitlines()}
        assert users | {c.pid} <= registered
    finally:
        c.kill()
        c.wait(30)


def test_engine_outlives_its_starter_while_another_process_uses_it(private_engine: dict[str, str]) -> None:
    env, t0 = private_engine, time.monotonic()
    state = Path(env["KIPCHECK_DOCKER_ROOT"]) / "state"
    a, url = _user(env)  # starts dockerd and the guardian
    b, url_b = _user(env)  # finds it, registers
    try:
        assert url == url_b == f"unix://{env['KIPCHECK_DOCKER_ROOT']}/docker.sock"
        dockerd = int((state / "dockerd.pid").read_text())
        users = {int(line.split()[0]) for line in (state / "users").read_text().splitlines()}
        assert {a.pid, b.pid} <= users
        _slow_engine_is_waited_for(env, dockerd, {a.pid, b.pid})
        a.stdin.close()
        a.wait(30)
        # The guardian polls every second after a 10 s grace: let it look several times with
        # the starter gone; the engine must stay, since B is alive.
        time.sleep(max(0.0, t0 + 10 + 5 * de.GUARD_POLL_S - time.monotonic()))
        assert de.pid_alive(dockerd), (state / "guardian.log").read_text()
        assert de.ping_ok(url), "the engine B uses stopped answering"
        os.kill(b.pid, signal.SIGKILL)
        b.wait(30)
        # The guardian unlinks the pidfile last, once dockerd is gone and its mounts undone.
        gone = _wait(lambda: not de.pid_alive(dockerd) and not (state / "dockerd.pid").exists(), 90)
        assert gone, "dockerd still runs after its last user was SIGKILLed"
        assert not de.ping_ok(url)
        assert "no kipcheck user left" in (state / "guardian.log").read_text()
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait(30)
