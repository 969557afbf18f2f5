"""Nothing a run starts is left behind: containers and networks of a SIGKILLed run are
removed (the reaper), and a clean stop removes them at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from targets.docker_engine import LABEL_OWNER, ensure_engine, remove_labelled
from targets.target import NotSupportedByTarget
from targets.factory import create_target
from targets.kafka_image import BASE_IMAGE, ensure_base_image

# A container start waits while the brokers make progress: up to two attempts of 600 s.
pytestmark = pytest.mark.deadline(1300)

REPO = Path(__file__).resolve().parents[2]


def _engine_or_skip() -> None:
    try:
        ensure_engine()
    except NotSupportedByTarget as exc:
        print(f"no Docker engine: {exc.reason}")
        pytest.skip(f"{type(exc).__name__}: {exc.reason}")


def _labelled(kind: str, owner: int) -> list[str]:
    ls = ["docker", "ps", "-aq"] if kind == "container" else ["docker", "network", "ls", "-q"]
    out = subprocess.run([*ls, "--filter", f"label={LABEL_OWNER}={owner}"], capture_output=True, text=True,
                         timeout=60, check=True)
    return out.stdout.split()


def test_sigkilled_run_leaves_no_container_or_network() -> None:
    _engine_or_skip()
    proc = subprocess.Popen([sys.executable, "-m", "targets.target_up", "testcontainers:nodes=3"],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # blocks until ready or exit (the target's own deadline)
        assert first.startswith("bootstrap="), (first, proc.stderr.read() if proc.poll() is not None else "")
        assert len(_labelled("container", proc.pid)) == 3 and len(_labelled("network", proc.pid)) == 1
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (_labelled("container", proc.pid) or _labelled("network", proc.pid)):
            time.sleep(0.5)
        assert _labelled("container", proc.pid) == [] and _labelled("network", proc.pid) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_clean_stop_leaves_nothing() -> None:
    _engine_or_skip()
    target = create_target("testcontainers")
    target.start()
    run = target.run_id
    target.stop()
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=org.kipcheck.run={run}"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == []


def test_start_time_reaper_removes_what_dead_owners_left() -> None:
    """remove_labelled(only_dead_owners=True): a container and a network whose owner pid is
    dead go, one of a live owner (this process) stays."""
    _engine_or_skip()
    ensure_base_image()
    dead = subprocess.Popen(["true"])
    dead.wait(10)
    made = []
    try:
        for owner in (dead.pid, os.getpid()):
            cid = subprocess.run(["docker", "create", "--label", f"{LABEL_OWNER}={owner}", BASE_IMAGE, "true"],
                                 capture_output=True, text=True, timeout=120, check=True).stdout.strip()
            net = subprocess.run(["docker", "network", "create", "--label", f"{LABEL_OWNER}={owner}",
                                  f"kc-reap-{owner}"], capture_output=True, text=True, timeout=120, check=True)
            made.append((cid, net.stdout.strip()))
        removed = remove_labelled(only_dead_owners=True)
        assert any(r.startswith("container ") and made[0][0].startswith(r.split()[1]) for r in removed), removed
        assert _labelled("container", dead.pid) == [] and _labelled("network", dead.pid) == []
        assert len(_labelled("container", os.getpid())) >= 1
    finally:
        for cid, net in made:
            subprocess.run(["docker", "rm", "-f", cid], capture_output=True, timeout=120, check=False)
            subprocess.run(["docker", "network", "rm", net], capture_output=True, timeout=120, check=False)
