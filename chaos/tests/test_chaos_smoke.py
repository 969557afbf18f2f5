"""Fixed-seed chaos smoke run (CI): `kipcheck chaos` on reference:nodes=3 with the EOS
copier and node kills. The run must be valid, every fault shown effective, and every
artefact written. Runs in a subprocess with a hard deadline, so a hang fails the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEED, TIME_LIMIT_S, DEADLINE_S = 20261126, 20, 240


def _kipcheck(*args: str, out: Path | None = None, timeout: float = DEADLINE_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_copier_under_kills_is_valid(tmp_path):
    out = tmp_path / "run"
    r = _kipcheck("chaos", "--target", "reference:nodes=3", "--workload", "copier", "--nemesis", "kill",
                  "--seed", str(SEED), "--time-limit", str(TIME_LIMIT_S), "--out", str(out))
    assert r.stdout.splitlines()[0] == f"seed={SEED}", r.stdout
    check = json.loads((out / "check.json").read_text()) if (out / "check.json").exists() else {}
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}\n{json.dumps(check)[:3000]}"
    assert check["valid"] is True
    faults = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
    assert faults and all(f["effective"] is True for f in faults), faults
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert any(op["process"] == "nemesis" for op in history)
    assert sum(op["f"] == "txn" and op["type"] == "ok" for op in history) >= 5
    assert "<svg" in (out / "report.html").read_text()


def test_bad_input_is_one_line_and_exit_2():
    r = _kipcheck("chaos", "--nemesis", "kill:nowhere", timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and r.stderr.startswith("kipcheck chaos: error: ")


def test_bad_queue_option_is_one_line_and_exit_2():
    r = _kipcheck("chaos", "--workload", "queue", "--replication-factor", "0", "--faults", "none", timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == ("kipcheck chaos: error: argument --replication-factor: 0 must be >= 1 "
                                "(see kipcheck chaos --help)")
