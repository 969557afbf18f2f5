"""The run outcome: what a certification run may claim, from run.json and the result rows.

A report may only say PASS when the run finished every selected test on a reachable
target over the whole catalog; an interrupted run is INCOMPLETE (never pass, never
non-compliant), an unreachable target is NOT RUN, a narrowed selection is PARTIAL SCOPE.
The rules are the interface between the run side (conformance plugin and CLI, which
write ``results/run.json``) and the report side; see docs/report.md "Outcome".
"""

from __future__ import annotations

from typing import Any, Mapping

# summary.result values and their exit codes (cli.main uses exit_code()).
EXIT_CODES = {"pass": 0, "partial-scope": 0, "fail": 1, "incomplete": 2, "not-run": 2, "no-results": 2}
RUN_STATUSES = ("complete", "interrupted", "target_unreachable", "internal_error")


def run_record(run: Mapping[str, Any]) -> bool:
    """Whether run metadata carries the completeness record (run.json schema 1)."""
    return run.get("schema") == 1 and run.get("status") in RUN_STATUSES


def is_narrowed(run: Mapping[str, Any]) -> bool:
    """A selection narrower than the whole catalog (--suite, -k, explicit tests).

    Older results without a completeness record only know certify's suite filter."""
    if run_record(run):
        return bool((run.get("scope") or {}).get("narrowed"))
    return bool(run.get("suite") or _legacy_keyword(run))


def _legacy_keyword(run: Mapping[str, Any]) -> str | None:
    """The -k expression of an older run, from the pytest command it recorded."""
    for key in ("pytest_command", "pytest_args"):
        args = run.get(key)
        if isinstance(args, list):
            for i, a in enumerate(args):
                if a == "-k" and i + 1 < len(args):
                    return str(args[i + 1])
                if isinstance(a, str) and a.startswith("-k") and len(a) > 2:
                    return a[2:]
    return None


def scope_text(run: Mapping[str, Any]) -> str:
    """One line saying what was selected, e.g. `--suite kip447 -k "fencing" (12 of 181 tests)`."""
    scope = run.get("scope") or {}
    parts = []
    exprs = scope.get("suite_exprs") or ([run["suite"]] if run.get("suite") else [])
    if exprs:
        parts.append("--suite " + " or ".join(str(x) for x in exprs))
    keyword = scope.get("keyword") or (None if run_record(run) else _legacy_keyword(run))
    if keyword:
        parts.append(f'-k "{keyword}"')
    if scope.get("explicit_tests"):
        parts.append(f"{len(scope['explicit_tests'])} explicitly named test(s)")
    text = ", ".join(parts) or "a narrowed selection"
    if scope.get("selected") is not None and scope.get("collected") is not None:
        text += f" ({scope['selected']} of {scope['collected']} tests selected)"
    return text


def decide(run: Mapping[str, Any], rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """summary.result, the banner line and the completeness facts behind them.

    `rows` are the cleaned result rows of every target (self-checks included: a failing
    self-check is a failing test)."""
    recorded = run_record(run)
    status = run.get("status") if recorded else None
    expected = run.get("expected_tests") if recorded else None
    finished = run.get("finished_tests") if recorded else None
    if recorded and finished is None:
        finished = len(rows)
    reasons = [str(r) for r in (run.get("reasons") or [])] if recorded else []
    failing = [r for r in rows if r["verdict"] in ("fail", "error")]
    timed_out = [r for r in failing if r.get("timed_out")]
    short = isinstance(expected, int) and isinstance(finished, int) and finished < expected
    unreachable = dict(run.get("unreachable_targets") or {}) if recorded else {}
    narrowed = is_narrowed(run)

    if status == "target_unreachable":
        result = "not-run"
        why = "; ".join(f"{spec}: {msg}" for spec, msg in unreachable.items()) or "; ".join(reasons) or "no reason recorded"
        banner = f"NOT RUN: target unreachable — {why}"
    elif status in ("interrupted", "internal_error") or short:
        result = "incomplete"
        why = "; ".join(reasons) or (
            "the run was interrupted" if status == "interrupted" else
            "internal error" if status == "internal_error" else "not every selected test produced a result"
        )
        counts = f" — {finished} of {expected} selected tests finished" if expected is not None else ""
        banner = f"INCOMPLETE: {why}{counts}. No verdict: failures seen so far are listed below."
    elif not rows:
        result = "no-results"
        banner = "NO RESULTS — no test ran"
    elif failing:
        result = "fail"
        extra = f", {len(timed_out)} of them timed out" if timed_out else ""
        banner = f"FAIL — {len(failing)} test(s) failed{extra}"
    elif narrowed:
        result = "partial-scope"
        banner = (f"PARTIAL SCOPE: {scope_text(run)} — every selected test passed; "
                  "requirements outside the selection were not tested")
    else:
        result = "pass"
        banner = "PASS — every selected test passed on every target"
    return {
        "result": result,
        "banner": banner,
        "completeness": {
            "recorded": recorded,
            "status": status,
            "text": _completeness_text(recorded, status, expected, finished),
            "reasons": reasons,
            "expected_tests": expected,
            "finished_tests": finished,
            "unreachable_targets": unreachable,
            "timed_out": len(timed_out),
            "worker_crashes": list(run.get("worker_crashes") or []) if recorded else [],
            "narrowed": narrowed,
            "scope": scope_text(run) if narrowed else "whole catalog",
        },
    }


def _completeness_text(recorded: bool, status: Any, expected: Any, finished: Any) -> str:
    if not recorded:
        return "completeness not recorded (results written before run.json schema 1)"
    counts = f"{finished} of {expected} selected tests finished" if expected is not None else f"{finished} tests finished"
    return f"{status}: {counts}"


def cell_verdict(result: str, narrowed: bool, word: str, counts: Mapping[str, int]) -> str:
    """A matrix cell's word once the outcome is known: no compliance word on an
    incomplete or not-run run; `out of scope` for a KIP nothing was selected from."""
    if result == "not-run":
        return "not run"
    if result == "incomplete":
        return "incomplete"
    if narrowed and word == "untested":
        return "out of scope"
    return word


def exit_code(report: Mapping[str, Any]) -> int:
    """0 pass or partial scope; 1 a test failed on a complete run; 2 incomplete, not run,
    no results, or a target failed to start (infrastructure, not a verdict)."""
    result = report["summary"]["result"]
    code = EXIT_CODES.get(result, 2)
    if any(t.get("start_error") for t in report.get("targets", [])):
        return 2
    return code
