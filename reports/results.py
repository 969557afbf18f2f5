"""Reading a results directory: the rows the conformance plugin wrote (one JSON lines
file per xdist worker), the target descriptions (``targets-<worker>.json``, merged over
workers) and the run metadata (``session.json``, ``run.json``); then one clean row per
(test, target).
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from reports import seal as _seal
from reports.evidence import clean_evidence
from reports.verdicts import NO_TARGET, TEST_VERDICTS, deviation_of


class Results:
    """Rows, target descriptions and run metadata read from a results directory; `requested`
    the targets the run was asked to certify (the matrix columns, in order); `seal` the
    evidence seal the rows were checked against (None: the folder has none); `client_rows`
    the rows of client libraries' own suites (client_suites/: no KIP verdict, a report
    section of their own, reports/client_suites.py)."""

    def __init__(
        self,
        rows: list[dict[str, Any]] | None = None,
        targets: dict[str, dict[str, Any]] | None = None,
        run: dict[str, Any] | None = None,
        problems: list[str] | None = None,
        requested: list[str] | None = None,
        seal: dict[str, Any] | None = None,
        client_rows: list[dict[str, Any]] | None = None,
    ) -> None:
        self.rows = rows or []
        self.targets = targets or {}
        self.run = run or {}
        self.problems = problems or []
        self.requested = requested or []
        self.seal = seal
        self.client_rows = client_rows or []


def read_results(results_dir: str | Path) -> Results:
    """Read every worker's rows and target files; tolerate partial or malformed files, but
    refuse (reports.seal.SealError) a sealed folder that no longer matches its seal."""
    d = Path(results_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"results directory {d} does not exist")
    seal = _seal.verified(d)
    problems: list[str] = [] if seal else [f"{_seal.SEAL_FILE} missing: {_seal.statement(None)['text']}"]
    rows: list[dict[str, Any]] = []
    client_rows: list[dict[str, Any]] = []
    for f in sorted(d.glob("*.jsonl")) + sorted(d.glob("*.ndjson")):
        with open(f, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    problems.append(f"{f.name}:{n}: unreadable result row ({exc.msg})")
                    continue
                if isinstance(row, dict) and "verdict" in row and row.get("client_suite"):
                    client_rows.append(row)
                elif isinstance(row, dict) and "verdict" in row:
                    # Each worker appends its rows in the order it ran them (timeline fallback).
                    row.setdefault("worker", f.stem.removeprefix("results-"))
                    rows.append(row)
                else:
                    problems.append(f"{f.name}:{n}: not a result row")
    targets: dict[str, dict[str, Any]] = {}
    for f in sorted(d.glob("targets*.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            problems.append(f"{f.name}: unreadable target description ({exc})")
            continue
        if isinstance(data, dict):
            merge_target_descriptions(targets, data)
    run, requested = _read_run_metadata(d, problems)
    if seal is None and isinstance(run.get("requested_targets"), list):
        # certify seals every folder it finishes; a certify folder without its seal had it removed
        raise _seal.SealError(f"{_seal.SEAL_FILE} is missing, but certify wrote this folder (run.json names the "
                              "targets it was asked to certify): its rows cannot be checked")
    return Results(rows, targets, run, problems, requested, seal, client_rows)


def _read_json(path: Path, problems: list[str], what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        problems.append(f"{path.name}: unreadable {what} ({exc})")
        return {}
    return data if isinstance(data, dict) else {}


def _read_run_metadata(d: Path, problems: list[str]) -> tuple[dict[str, Any], list[str]]:
    """session.json (written by the plugin) overlaid with run.json (written by certify), and
    the requested targets: run.json's `requested_targets`, else session.json's `targets`
    (run.json's `targets` maps every described target, the differential oracle included, to
    its facts: it is no list of columns)."""
    run: dict[str, Any] = {}
    requested: list[str] = []
    session = d / "session.json"
    if session.is_file():
        s = _read_json(session, problems, "session metadata")
        for src, dst in (("started_at", "started_at"), ("finished_at", "finished_at"), ("targets", "targets"),
                         ("exitstatus", "pytest_exit_code"), ("differential", "differential")):
            if s.get(src) is not None:
                run[dst] = s[src]
        if isinstance(s.get("args"), list):
            run.setdefault("pytest_args", s["args"])
        if isinstance(s.get("targets"), list):
            requested = [str(t) for t in s["targets"]]
    # OUT/run.json: certify's command record; OUT/results/run.json: the run side's
    # completeness record (schema 1), which wins where both say something.
    for cand in (d.parent / "run.json", d / "run.json"):
        if cand.is_file():
            run.update(_read_json(cand, problems, "run metadata"))
    if isinstance(run.get("requested_targets"), list):
        requested = [str(t) for t in run["requested_targets"]]
    if run.get("wall_time_s") is None and run.get("started_at") and run.get("finished_at"):
        try:
            t0 = _dt.datetime.fromisoformat(str(run["started_at"]))
            t1 = _dt.datetime.fromisoformat(str(run["finished_at"]))
            run["wall_time_s"] = round((t1 - t0).total_seconds(), 3)
        except ValueError:
            pass
    return run, requested


def merge_target_descriptions(into: dict[str, dict[str, Any]], data: Mapping[str, Any]) -> None:
    """Merge one worker's target file into `into` (non-null values win).

    Accepts the plugin's ``{"worker": w, "targets": {spec: {...}}}`` and the bare
    ``{spec: {"describe": {...}, "capabilities": {...}}}``. A part that is only
    ``{"error": ...}`` (describe or probe failed) is kept as an error string.
    """
    if isinstance(data.get("targets"), Mapping):
        data = data["targets"]
    for spec, info in data.items():
        if not isinstance(info, Mapping):
            continue
        cur = into.setdefault(
            str(spec), {"describe": {}, "capabilities": {}, "errors": [], "start_error": None, "skip_reason": None}
        )
        for key in ("start_error", "skip_reason", "kind"):
            if info.get(key):
                cur[key] = str(info[key])
        for part in ("describe", "capabilities"):
            src = info.get(part)
            if not isinstance(src, Mapping):
                continue
            if set(src) == {"error"}:
                msg = f"{part}: {src['error']}"
                if msg not in cur["errors"]:
                    cur["errors"].append(msg)
                continue
            for k, v in src.items():
                if v is None or v == {} or v == []:
                    cur[part].setdefault(k, v)
                elif k == "startup_seconds" and isinstance(cur[part].get(k), (int, float)):
                    # Each worker starts its own cluster: keep the slowest start.
                    cur[part][k] = max(cur[part][k], v)
                else:
                    cur[part][k] = v


def unique_rows(raw_rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Clean rows, one per (nodeid, target): the last one wins (e.g. a rerun appended)."""
    dedup: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in raw_rows:
        row = clean_row(raw)
        dedup[(row["nodeid"], row["target"])] = row
    return list(dedup.values())


def clean_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A result row with every field the report reads; an unknown verdict is an error."""
    verdict = str(row.get("verdict", "error"))
    reason = row.get("reason") or ""
    if verdict not in TEST_VERDICTS:
        reason = f"unknown verdict {verdict!r} reported" + (f": {reason}" if reason else "")
        verdict = "error"
    nodeid = str(row.get("nodeid") or row.get("test") or "?")
    reqs = row.get("requirements") or []
    if isinstance(reqs, str):
        reqs = [reqs]
    try:
        duration = float(row.get("duration_s") or 0.0)
    except (TypeError, ValueError):
        duration = 0.0
    return {
        "nodeid": nodeid,
        "test": str(row.get("test") or nodeid.rsplit("::", 1)[-1]),
        "suite": row.get("suite"),
        "target": str(row.get("target") or NO_TARGET),
        "target_kind": row.get("target_kind"),
        "target_version": row.get("target_version"),
        "requirements": [str(r) for r in reqs],
        "verdict": verdict,
        "reason": str(reason),
        "duration_s": duration,
        "divergences": [d for d in (row.get("divergences") or []) if isinstance(d, Mapping)],
        "deviation": deviation_of(verdict, str(reason)),
        "timed_out": bool(row.get("timed_out")),
        "deadline_s": row.get("deadline_s"),
        "evidence": clean_evidence(row.get("evidence")),
        "allure_uuid": row.get("allure_uuid"),
        "worker": row.get("worker"),
        "start": _num(row.get("start")),
        "stop": _num(row.get("stop")),
        # conformance/target_health.py: the target had stopped answering / answered again
        "target_down": row.get("target_down") if isinstance(row.get("target_down"), Mapping) else None,
        "target_resumed": row.get("target_resumed") if isinstance(row.get("target_resumed"), Mapping) else None,
    }


def _num(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None
