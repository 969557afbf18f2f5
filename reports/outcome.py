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
    down = target_down(rows)
    if down:
        if result in ("pass", "partial-scope", "no-results"):
            result = "incomplete"
        banner = "TARGET DOWN: " + "; ".join(d["text"] for d in down) + ". " + banner
        reasons = reasons + [d["text"] for d in down]
    return {
        "result": result,
        "banner": banner,
        "target_down": down,
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


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def name_kips(decided: Mapping[str, Any], kips: list[Mapping[str, Any]], specs: list[str]) -> dict[str, Any]:
    """`decided` with a passing banner that names what it does not cover (issue 24, item 4).

    A green PASS over KIPs the target wholly does not support reads as more than it is:
    "PASS — 4 KIPs passed; KIP-1289 and KIP-TXNRT not supported by this target". Only the
    banner text changes; the result and the exit code stay those of `decide`."""
    if decided["result"] not in ("pass", "partial-scope") or not specs:
        return dict(decided)
    words = {k["kip"]: [k["per_target"][s]["verdict"] for s in specs] for k in kips}
    passed = [kip for kip, w in words.items() if all(v == "compliant" for v in w)]
    parts = [f"{len(passed)} KIP{'s' if len(passed) != 1 else ''} passed"
             + (" on every target" if len(specs) > 1 else "")]
    for word, label in (("not supported", "not supported by"), ("partial", "partly supported by")):
        for spec_i, spec in enumerate(specs):
            named = [kip for kip, w in words.items() if w[spec_i] == word]
            if named:
                parts.append(f"{_and(named)} {label} {'this target' if len(specs) == 1 else spec}")
    if len(parts) == 1:
        return dict(decided)
    if decided["result"] == "partial-scope":
        parts.append("requirements outside the selection were not tested")
    head = "PASS — " if decided["result"] == "pass" else decided["banner"].split(" — ")[0] + " — "
    return {**decided, "banner": head + "; ".join(parts)}


def target_down(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per target that stopped answering during the run: after which test, its last request,
    how many tests were not run, and whether it answered again (conformance/target_health.py
    writes `target_down` on each test it did not run, `target_resumed` on the first after)."""
    out: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r.get("start") or 0)):
        down, back = r.get("target_down"), r.get("target_resumed")
        if r.get("verdict") == "not_run" and isinstance(down, Mapping):
            d = out.setdefault(str(down.get("spec") or r.get("target")), {
                "spec": str(down.get("spec") or r.get("target")), "after": down.get("after"),
                "last_request": down.get("last_request"), "why": down.get("why"), "not_run": 0, "resumed": False})
            d["not_run"] += 1
        if isinstance(back, Mapping) and str(back.get("spec")) in out:
            out[str(back.get("spec"))]["resumed"] = True
    for d in out.values():
        after = f" after {d['after']}" if d["after"] else " before its first test"
        request = f" (its last request: {d['last_request']})" if d["last_request"] else ""
        again = "; it answered again later and the run resumed" if d["resumed"] else ""
        d["text"] = (f"target {d['spec']} stopped answering{after}{request}; "
                     f"{d['not_run']} test(s) not run: target down{again}")
    return list(out.values())


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
