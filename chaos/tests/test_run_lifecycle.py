"""Runs that stop cleanly and never mix (issue 23, item 5), and `--analyze` (item 2), on real
`kipcheck chaos` processes against reference:nodes=3.

SIGINT or SIGTERM: exit 2, history, faults and a check.json whose verdict is "incomplete",
and no process the run started survives (every descendant inherits a per-test token in its
environment; /proc is scanned for it, so a child in its own session, like the Toxiproxy
server, is found too). A second signal stops at once. An --out that holds a run is refused
and left untouched. Each run is a subprocess with a hard deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOKEN_VAR = "KIPCHECK_TEST_RUN_TOKEN"
DEADLINE_S = 180


def _env(token: str) -> dict[str, str]:
    return {**os.environ, TOKEN_VAR: token,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _kipcheck(*args: str, timeout: float = DEADLINE_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", "chaos", *args], cwd=REPO, env=_env(uuid.uuid4().hex),
                          capture_output=True, text=True, timeout=timeout)


def _holders(token: str) -> list[int]:
    """Live processes whose environment carries ``token`` (zombies have none)."""
    needle = f"{TOKEN_VAR}={token}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


class Run:
    """A `kipcheck chaos` process whose descendants can be found after it exits."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.token = uuid.uuid4().hex
        self.stdout, self.stderr = tmp / "stdout", tmp / "stderr"
        with self.stdout.open("w") as out, self.stderr.open("w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "cli.main", "chaos", *args], cwd=REPO,
                                         env=_env(self.token), stdout=out, stderr=err, start_new_session=True)

    def wait_for_children(self, n: int, timeout_s: float = 120.0) -> list[int]:
        """Wait until the run has ``n`` live descendants (the copier, Toxiproxy)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            children = [p for p in _holders(self.token) if p != self.proc.pid]
            if len(children) >= n:
                return children
            time.sleep(0.2)
        raise AssertionError(f"fewer than {n} child processes came up\n{self.output()}")

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError(f"the run did not stop within {timeout_s}s\n{self.output()}") from None

    def survivors(self) -> list[int]:
        deadline = time.monotonic() + 5  # a SIGKILLed child may take a moment to be reaped
        while (left := _holders(self.token)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left

    def output(self) -> str:
        return f"stdout:\n{self.stdout.read_text()}\nstderr:\n{self.stderr.read_text()[-3000:]}"


def _copier_run(tmp_path: Path, nemesis: str) -> tuple[Run, Path]:
    out = tmp_path / "run"
    run = Run(tmp_path, "--target", "reference:nodes=3", "--workload", "copier", "--nemesis", nemesis,
              "--seed", "5", "--time-limit", "120", "--out", str(out))
    return run, out


@pytest.mark.parametrize("sig, nemesis", [(signal.SIGINT, "kill"), (signal.SIGTERM, "partition")])
def test_a_signal_stops_the_run_cleanly(tmp_path, sig, nemesis):
    run, out = _copier_run(tmp_path, nemesis)
    children = run.wait_for_children(2 if nemesis == "partition" else 1)  # the copier (+ Toxiproxy)
    time.sleep(3)  # the copier is copying
    t0 = time.monotonic()
    run.proc.send_signal(sig)
    rc = run.wait(120)
    assert rc == 2, run.output()
    assert time.monotonic() - t0 < 60, "a clean stop skips the rest of the 120 s time limit"
    assert run.survivors() == [], f"children {children} left behind\n{run.output()}"
    check = json.loads((out / "check.json").read_text())
    assert check["valid"] == "incomplete" and sig.name in check["incomplete_because"], check
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert any(op["process"].startswith("copier-") and op["f"] == "txn" for op in history)
    assert (out / "faults.jsonl").exists() and (out / "report.html").exists()
    assert "valid=incomplete" in run.stdout.read_text()
    _assert_analyze_agrees(out, 2)  # the copier's checks rebuilt from run.json; still incomplete


def test_a_second_signal_stops_at_once(tmp_path):
    run, out = _copier_run(tmp_path, "partition")
    run.wait_for_children(2)
    run.proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    run.proc.send_signal(signal.SIGINT)
    rc = run.wait(60)
    assert rc == 2, run.output()
    assert "stopped at once" in run.stderr.read_text(), run.output()
    assert run.survivors() == [], run.output()
    assert not (out / "check.json").exists()  # no verdict from a run stopped at once


@pytest.fixture(scope="module")
def calm_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A short calm queue run: a finished run directory to refuse and to analyse."""
    out = tmp_path_factory.mktemp("calm") / "run"
    r = _kipcheck("--target", "reference:nodes=3", "--workload", "queue", "--nemesis", "none", "--seed", "9",
                  "--time-limit", "3", "--max-ops", "60", "--out", str(out))
    assert r.returncode in (0, 3), f"{r.stdout}\n{r.stderr}"
    return out, r


def _snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_second_run_into_the_same_out_is_refused_and_the_first_is_untouched(calm_run):
    out, _ = calm_run
    before = _snapshot(out)
    r = _kipcheck("--target", "reference:nodes=3", "--workload", "queue", "--nemesis", "none", "--seed", "9",
                  "--time-limit", "3", "--out", str(out), timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [f"kipcheck chaos: error: --out {out} already holds a chaos run "
                                             "(run.json) (choose a new --out: two runs never share one)"]
    assert _snapshot(out) == before


def test_an_old_copier_history_alone_is_enough_to_refuse(tmp_path):
    """The bug of issue 23: the copier appends to copier/copier-history.jsonl."""
    (tmp_path / "copier").mkdir()
    old = tmp_path / "copier" / "copier-history.jsonl"
    old.write_text('{"process": "copier-1"}\n')
    r = _kipcheck("--workload", "copier", "--nemesis", "none", "--seed", "1", "--out", str(tmp_path), timeout=60)
    assert r.returncode == 2 and "already holds a chaos run (copier)" in r.stderr, r.stderr
    assert old.read_text() == '{"process": "copier-1"}\n' and not (tmp_path / "run.json").exists()


def _assert_analyze_agrees(out: Path, exit_code: int) -> None:
    """`--analyze` on an unchanged run gives the recorded verdict and counts, keeps check.json."""
    check_json = (out / "check.json").read_bytes()
    r = _kipcheck("--analyze", str(out), timeout=120)
    assert r.returncode == exit_code, r.stdout + r.stderr
    analyzed, recorded = json.loads((out / "check-analyzed.json").read_text()), json.loads(check_json)
    assert analyzed["valid"] == recorded["valid"] == analyzed["recorded_valid"]
    assert analyzed["anomalies"] == recorded["anomalies"] and analyzed["ops"] == recorded["ops"]
    counts = {k: v["counts"] for k, v in recorded["checkers"]["results"].items()}
    assert {k: v["counts"] for k, v in analyzed["checkers"]["results"].items()} == counts
    assert (out / "check.json").read_bytes() == check_json


def test_analyze_rejudges_with_the_same_verdict_and_keeps_check_json(calm_run):
    out, first = calm_run
    _assert_analyze_agrees(out, first.returncode)


def test_analyze_of_a_directory_that_is_not_a_run_is_one_line_exit_2(tmp_path):
    for where in (tmp_path, tmp_path / "missing"):
        r = _kipcheck("--analyze", str(where), timeout=60)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith("kipcheck chaos: error: ") and "Traceback" not in r.stderr
    (tmp_path / "history.jsonl").write_text("{not json\n")
    r = _kipcheck("--analyze", str(tmp_path), timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
