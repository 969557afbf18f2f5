"""run.json: how complete a certification run was (the report's source for `incomplete`,
`not-run` and `partial-scope`).

Written by the plugin at session finish (the xdist controller or the single process) and
completed by `kipcheck certify` after pytest exits, because pytest may have been
signalled, timed out by --time-limit, or died before writing it. `finalize` recounts what
the results directory really holds, so the numbers never depend on who wrote last.
Schema: see the interface in docs/cli.md (schema 1).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Iterable

from reports import statement
from reports.certification import kipcheck_version

SCHEMA = 1
RUN_FILE = "run.json"
STATUSES = ("complete", "interrupted", "target_unreachable", "internal_error")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def empty_scope() -> dict[str, Any]:
    return {"narrowed": False, "suite_exprs": [], "keyword": None, "explicit_tests": [],
            "collected": None, "selected": None, "deselected": None}


def new_run(command: Iterable[str] = ()) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "status": "complete", "reasons": [], "interrupted": None,
        "unreachable_targets": {}, "scope": empty_scope(), "expected_tests": None,
        "finished_tests": 0, "timed_out": [], "worker_crashes": [], "started_at": now_iso(),
        "finished_at": None, "duration_s": None, "command": list(command),
        "kipcheck": kipcheck_identity(), "clients": client_versions(), "targets": {},
    }


def load(results_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((results_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write(results_dir: Path, run: dict[str, Any]) -> Path:
    """Atomic write: a reader never sees half a run.json."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / RUN_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(run, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_rows(results_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for f in sorted(results_dir.glob("results-*.jsonl")):
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and "verdict" in row:
                    rows.append(row)
    return rows


def read_targets(results_dir: Path) -> dict[str, dict[str, Any]]:
    """Per-spec facts from the workers' targets-*.json (first non-empty value wins)."""
    out: dict[str, dict[str, Any]] = {}
    for f in sorted(results_dir.glob("targets-*.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for spec, row in (data.get("targets") or {}).items():
            desc = row.get("describe") or {}
            caps = row.get("capabilities") or {}
            facts = {
                "cluster_id": desc.get("cluster_id"),
                "broker_version": desc.get("version") or desc.get("broker_version"),
                "finalized_features": caps.get("finalized_features") or caps.get("features") or {},
                "bootstrap": desc.get("bootstrap_servers") or desc.get("bootstrap"),
                "security_protocol": desc.get("security_protocol") or "PLAINTEXT",
            }
            have = out.setdefault(spec, {})
            for k, v in facts.items():
                if not have.get(k):
                    have[k] = v
    return out


def kipcheck_identity() -> dict[str, Any]:
    return {"version": kipcheck_version(), "commit": statement.kipcheck_commit()}


def client_versions() -> dict[str, Any]:
    """The client libraries as the report's statement names them (one definition)."""
    return dict(statement.client_versions())


def _timed_out(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"nodeid": r.get("nodeid"), "target": r.get("target"), "deadline_s": r.get("deadline_s")}
            for r in rows if r.get("timed_out")]


def finalize(results_dir: Path, run: dict[str, Any] | None = None, **updates: Any) -> dict[str, Any]:
    """Merge `updates` into the stored run.json (or `run`), recount rows, derive the status."""
    base = run if run is not None else (load(results_dir) or new_run())
    for key, value in updates.items():
        if key == "scope" and isinstance(value, dict):
            base["scope"] = {**(base.get("scope") or empty_scope()), **value}
        elif key == "reasons":
            base["reasons"] = list(dict.fromkeys([*(base.get("reasons") or []), *value]))
        elif key in ("unreachable_targets",) and isinstance(value, dict):
            base[key] = {**(base.get(key) or {}), **value}
        elif key == "worker_crashes":
            base[key] = list(dict.fromkeys([*(base.get(key) or []), *value]))
        else:
            base[key] = value
    rows = read_rows(results_dir)
    base["finished_tests"] = len(rows)
    base["timed_out"] = _timed_out(rows)
    targets = read_targets(results_dir)
    if targets:
        base["targets"] = {**(base.get("targets") or {}), **targets}
    base["status"] = derive_status(base)
    base.setdefault("schema", SCHEMA)
    return base


def derive_status(run: dict[str, Any]) -> str:
    """The worst thing that happened decides: unreachable, interrupted, internal error."""
    if run.get("unreachable_targets"):
        return "target_unreachable"
    if run.get("interrupted"):
        return "interrupted"
    if run.get("status") == "internal_error" or run.get("worker_crashes"):
        return "internal_error"
    return "complete"


def is_incomplete(run: dict[str, Any]) -> bool:
    expected = run.get("expected_tests")
    return run.get("status") in ("interrupted", "internal_error") or (
        isinstance(expected, int) and run.get("finished_tests", 0) < expected)


def outcome(run: dict[str, Any] | None, report_result: str) -> tuple[str, str]:
    """(result word, console line) that agree with the report's outcome rules; the
    report computes the same from run.json (reports/certification.py)."""
    if run is None:
        return report_result, f"result: {report_result.upper()}"
    done, expected = run.get("finished_tests", 0), run.get("expected_tests")
    of = f"{done} of {expected}" if expected is not None else f"{done}"
    if run.get("status") == "target_unreachable":
        why = "; ".join(f"{s}: {r}" for s, r in (run.get("unreachable_targets") or {}).items())
        return "not-run", f"result: NOT RUN: target unreachable — {why}"
    if is_incomplete(run):
        why = "; ".join(run.get("reasons") or []) or f"{of} tests finished"
        return "incomplete", f"result: INCOMPLETE ({of} tests finished) — {why}"
    scope = run.get("scope") or {}
    if scope.get("narrowed") and report_result in ("pass", "partial-scope"):
        what = ", ".join(filter(None, [*(f"suite {s}" for s in scope.get("suite_exprs") or []),
                                       f"-k {scope['keyword']}" if scope.get("keyword") and not scope.get("suite_exprs") else None,
                                       f"{len(scope.get('explicit_tests') or [])} explicit test(s)"
                                       if scope.get("explicit_tests") else None]))
        return "partial-scope", f"result: PARTIAL SCOPE ({of} tests; {what or 'narrowed selection'}) — no failure in scope"
    return report_result, f"result: {report_result.upper()}"
