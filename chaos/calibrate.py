"""Calibration: the false-alarm rate of the chaos verdicts, measured (issue 23, item 3).

    python -m chaos.calibrate [--target SPEC]... [--runs N] [--time-limit S] [--seed BASE]
        [--workloads queue,copier,share] [--nemeses KIND,...] [--out DIR] [--keep-anomalies DIR]

Runs many seeded ``kipcheck chaos`` runs on implementations believed correct (default:
``reference:nodes=3``) across every workload x nemesis kind, and counts what they say. On a
correct broker a safety anomaly is a false alarm (a checker bug) until a history read by
hand shows a broker bug. A target's runs take the cells in turn, run ``i`` with seed
``BASE + i``, so ``--runs`` spreads evenly and any run can be replayed alone with its seed.
Each run is a ``kipcheck chaos`` process of its own (a fresh target, a hard deadline,
``--out DIR/<target>/<workload>-<nemesis>-<seed>``); a cell the target cannot inject
("not supported by target") is tried once, then the kind is left out on that target.

Writes ``DIR/calibration.json``: per target x workload x nemesis the runs, valid,
anomalies, unknown, could-not-run and not-supported counts, the anomaly types and the
directories of the anomalous runs; per target the totals and ``false_alarm_rate``
(anomalies / judged runs, judged = valid + anomalies + unknown). Prints the table. Exit 0
no anomaly, 1 an anomaly (its run directory is copied to ``--keep-anomalies``), 2 bad
input or not one run judged.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from chaos.workloads import WORKLOADS
from reports.usage import non_empty_path, non_negative_int, positive_float, positive_int

REPO = Path(__file__).resolve().parents[1]
PROG = "python -m chaos.calibrate"
NEMESES = ("kill", "stop", "bounce", "restart", "isolate", "pause", "partition", "blackhole", "reset",
           "limit-data", "latency", "bandwidth", "slicer", "hold-endtxn", "hijack")
"""Every fault kind a bare ``--nemesis KIND`` injects (``hold``, ``delay``, ``drop`` and
``error`` need an ``api_key`` the command line does not take)."""
ONLY_FOR = {"hijack": ("copier",), "hold-endtxn": ("queue", "copier")}
"""Kinds that need what only some workloads do: the hijacker takes the copier's
transactional id; an EndTxn hold needs transactions (a share run can only be "unknown")."""
OUTCOMES = ("valid", "anomalies", "unknown", "could_not_run", "not_supported")
RUN_GRACE_S = 600.0
"""A run's deadline past its time limit: target start, readiness, the fault being applied
at the limit, catch-up reads (a kafka-native bounce alone can take minutes)."""


@dataclass
class Cell:
    target: str
    workload: str
    nemesis: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    anomaly_types: dict[str, int] = field(default_factory=dict)
    anomaly_runs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"target": self.target, "workload": self.workload, "nemesis": self.nemesis,
                "runs": sum(self.counts.values()), **self.counts, "anomaly_types": self.anomaly_types,
                "anomaly_runs": self.anomaly_runs}


def cells(target: str, workloads: Sequence[str], nemeses: Sequence[str]) -> list[Cell]:
    """Nemesis-major, so that a few runs already meet every workload."""
    return [Cell(target, w, n) for n in nemeses for w in workloads if w in ONLY_FOR.get(n, (w,))]


def classify(rc: int | None, stderr: str) -> str:
    """A run's outcome from its exit code (None: killed at its deadline)."""
    if rc == 0:
        return "valid"
    if rc == 1:
        return "anomalies"
    if rc == 3:
        return "unknown"
    return "not_supported" if rc == 2 and "not supported by target" in stderr else "could_not_run"


def _one_run(cell: Cell, seed: int, time_limit_s: float, out: Path) -> tuple[int | None, str]:
    """One ``kipcheck chaos`` process in its own session (killed whole at its deadline)."""
    argv = [sys.executable, "-m", "cli.main", "chaos", "--target", cell.target, "--workload", cell.workload,
            "--nemesis", cell.nemesis, "--seed", str(seed), "--time-limit", f"{time_limit_s:g}", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    log = out.parent / f"{out.name}.log"
    with log.open("w") as f:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=f, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            _, err = proc.communicate(timeout=time_limit_s + RUN_GRACE_S)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            rc, err = None, f"killed after {time_limit_s + RUN_GRACE_S:g}s\n{err}"
        except BaseException:  # Ctrl-C of the calibration: the run (its own session) stops cleanly too
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(RUN_GRACE_S)
            raise
        f.write(err)
    return rc, err


def _record(cell: Cell, outcome: str, out: Path, keep: Path | None) -> None:
    cell.counts[outcome] += 1
    if outcome != "anomalies":
        return
    check = json.loads((out / "check.json").read_text())
    for a in check.get("anomalies", []):
        cell.anomaly_types[a["type"]] = cell.anomaly_types.get(a["type"], 0) + a["count"]
    kept = out
    if keep is not None:
        kept = keep / out.parent.name / out.name
        shutil.copytree(out, kept, dirs_exist_ok=True)
    cell.anomaly_runs.append(str(kept))


def calibrate(targets: Sequence[str], runs: int, time_limit_s: float, seed: int, out: Path,
              workloads: Sequence[str] = WORKLOADS, nemeses: Sequence[str] = NEMESES,
              keep: Path | None = None, log=print) -> dict:
    """``runs`` runs per target, round-robin over the cells; returns calibration.json."""
    started = time.time()
    table: list[Cell] = []
    for target in targets:
        todo = cells(target, workloads, nemeses)
        table += todo
        tdir = out / target.replace(":", "_").replace("=", "-")
        tdir.mkdir(parents=True, exist_ok=True)
        order = itertools.cycle(todo)
        unsupported: set[str] = set()
        for i in range(runs):
            cell = next((c for c in itertools.islice(order, len(todo)) if c.nemesis not in unsupported), None)
            if cell is None:
                break
            run_dir = tdir / f"{cell.workload}-{cell.nemesis}-{seed + i}"
            rc, err = _one_run(cell, seed + i, time_limit_s, run_dir)
            outcome = classify(rc, err)
            _record(cell, outcome, run_dir, keep)
            if outcome == "not_supported":  # the kind, whatever the workload
                unsupported.add(cell.nemesis)
            log(f"{target} {cell.workload:6} {cell.nemesis:11} seed={seed + i}: {outcome}")
    return summary(table, {"runs_per_target": runs, "time_limit_s": time_limit_s, "seed": seed,
                           "wall_s": round(time.time() - started, 1)})


def summary(table: Sequence[Cell], params: dict) -> dict:
    totals: dict[str, dict] = {}
    for c in table:
        t = totals.setdefault(c.target, dict.fromkeys(OUTCOMES, 0))
        for k, v in c.counts.items():
            t[k] += v
    for t in totals.values():
        t["judged"] = t["valid"] + t["anomalies"] + t["unknown"]
        t["false_alarm_rate"] = round(t["anomalies"] / t["judged"], 4) if t["judged"] else None
    return {**params, "totals": totals, "cells": [c.to_dict() for c in table if sum(c.counts.values())]}


def table_text(result: dict) -> str:
    head = f"{'target':22} {'workload':8} {'nemesis':12} {'runs':>4} {'valid':>5} {'anom':>4} {'unkn':>4} {'fail':>4} {'n/s':>4}"
    lines = [head]
    for c in result["cells"]:
        lines.append(f"{c['target']:22} {c['workload']:8} {c['nemesis']:12} {c['runs']:4} {c['valid']:5} "
                     f"{c['anomalies']:4} {c['unknown']:4} {c['could_not_run']:4} {c['not_supported']:4}"
                     + (f"  {c['anomaly_types']}" if c["anomaly_types"] else ""))
    for target, t in result["totals"].items():
        lines.append(f"{target}: {t['judged']} judged, {t['anomalies']} anomalous (false-alarm rate "
                     f"{t['false_alarm_rate']}), {t['valid']} valid, {t['unknown']} unknown, "
                     f"{t['could_not_run']} could not run, {t['not_supported']} not supported")
    return "\n".join(lines)


def _names(allowed: Sequence[str], what: str):
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad) or '(none)'}; known: {', '.join(allowed)}")
        return names
    return parse


def _error(what: str) -> int:
    print(f"{PROG}: error: {what}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--target", action="append", default=None, help="repeatable (default: reference:nodes=3)")
    p.add_argument("--runs", type=positive_int(), default=20, help="runs per target (default: 20)")
    p.add_argument("--time-limit", type=positive_float(3600), default=12.0, metavar="SECONDS",
                   help="each run's time limit (default: 12)")
    p.add_argument("--seed", type=non_negative_int(), default=1, help="seed of the first run (default: 1)")
    p.add_argument("--workloads", type=_names(WORKLOADS, "workload"), default=list(WORKLOADS))
    p.add_argument("--nemeses", type=_names(NEMESES, "nemesis"), default=list(NEMESES))
    p.add_argument("--out", type=non_empty_path, default="chaos-out/calibration")
    p.add_argument("--keep-anomalies", type=non_empty_path, default=None, metavar="DIR",
                   help="copy every anomalous run directory here")
    args = p.parse_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):  # never mix two calibrations' runs
        return _error(f"--out {out} is not a new or empty directory (choose a new --out)")
    try:
        result = calibrate(args.target or ["reference:nodes=3"], args.runs, args.time_limit, args.seed, out,
                           args.workloads, args.nemeses, Path(args.keep_anomalies) if args.keep_anomalies else None,
                           log=lambda m: print(m, flush=True))
    except KeyboardInterrupt:
        return _error(f"interrupted: no calibration.json written (the runs are in {out})")
    result["command"] = ["python", "-m", "chaos.calibrate", *(sys.argv[1:] if argv is None else argv)]
    (out / "calibration.json").write_text(json.dumps(result, indent=1))
    print(table_text(result))
    print(f"written: {out / 'calibration.json'}")
    if any(t["anomalies"] for t in result["totals"].values()):
        return 1
    return 0 if any(t["judged"] for t in result["totals"].values()) else 2


if __name__ == "__main__":
    sys.exit(main())
