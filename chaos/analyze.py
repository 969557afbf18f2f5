"""``kipcheck chaos --analyze DIR``: judge a recorded run again (issue 23).

Histories are evidence: after a checker fix, or attached to a bug report, a run directory
is judged again without the target. The workload is rebuilt from ``run.json`` (runs
recorded before it existed: the same keys in ``check.json``), the checkers run on
``history.jsonl`` (the whole history: the copier subprocesses' own log,
``copier/copier-history.jsonl``, is already merged into it) and the verdict folds in
``faults.jsonl`` exactly as the run did (``chaos.runner.verdict``). A run recorded as
"incomplete" stays incomplete.

The new verdict goes to ``check-analyzed.json`` next to the history; ``check.json``, the
verdict given when the run happened, is never touched (the new file records it as
``recorded_valid``). Analysing again replaces ``check-analyzed.json``: it is derived data.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from checkers.history import History
from chaos.runner import INCOMPLETE, RunConfig, incomplete, run_workload, verdict
from chaos.schedule import parse_faults

ANALYZED = "check-analyzed.json"
META_KEYS = ("seed", "target", "workload", "faults")


class NotARun(ValueError):
    """The directory is not a readable chaos run: one line, exit 2."""


def _json_lines(path: Path) -> list[dict]:
    ops = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            ops.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise NotARun(f"{path}:{n}: not a JSON line ({exc.msg})") from None
    return ops


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise NotARun(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise NotARun(f"{path}: not a JSON object")
    return data


def load_run(out: Path) -> tuple[RunConfig, dict]:
    """The run's configuration and the verdict recorded with it ({} if none)."""
    if not out.is_dir():
        raise NotARun(f"{out} is not a directory")
    if not (out / "history.jsonl").is_file():
        raise NotARun(f"{out} is not a chaos run directory (no history.jsonl)")
    recorded = _json(out / "check.json") if (out / "check.json").is_file() else {}
    meta = {**recorded, **(_json(out / "run.json") if (out / "run.json").is_file() else {})}
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise NotARun(f"{out}: neither run.json nor check.json records the run's {', '.join(missing)}")
    try:
        cfg = RunConfig(target=str(meta["target"]), workload=str(meta["workload"]), faults=str(meta["faults"]),
                        seed=int(meta["seed"]), time_limit_s=float(meta.get("time_limit_s", 0.0)), out=out,
                        workload_options=dict(meta.get("workload_options") or {}))
        parse_faults(cfg.faults)
    except (TypeError, ValueError) as exc:
        raise NotARun(f"{out}: the recorded run configuration is unreadable ({exc})") from None
    return cfg, recorded


def analyze(out: Path) -> dict[str, Any]:
    """Judge the run in ``out`` again; write and return the verdict (check.json's shape)."""
    cfg, recorded = load_run(out)
    try:
        workload = run_workload(cfg)
        history = getattr(workload, "history_class", History).from_list(_json_lines(out / "history.jsonl")).validate()
    except (TypeError, ValueError, KeyError) as exc:
        raise NotARun(f"{out}: cannot rebuild the run's history ({type(exc).__name__}: {exc})") from None
    faults = _json_lines(out / "faults.jsonl") if (out / "faults.jsonl").is_file() else []
    result = verdict(workload.check(history), faults, calm=not parse_faults(cfg.faults))
    if recorded.get("valid") == INCOMPLETE:
        result = incomplete(result, str(recorded.get("incomplete_because", "the recorded run was incomplete")))
    result.update({**cfg.meta(), "ops": len(history), "recorded_valid": recorded.get("valid"),
                   "analyzed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    (out / ANALYZED).write_text(json.dumps(result, indent=1, default=str))
    return result
