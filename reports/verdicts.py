"""The report's verdict vocabulary and rules: test verdicts (as the conformance plugin
writes them), a requirement's verdict on one target from its covering tests, a KIP row's
word from its requirement counts, and the registered deviation a failing row names.

Honesty rules: a requirement passes on a target only when every covering test that ran
there passed; "not supported by target" and skipped tests are never counted as passes.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Mapping

from reports import outcome as _outcome

# Test-level verdicts written by the conformance plugin.
TEST_VERDICTS = ("pass", "fail", "error", "not_supported", "skipped", "not_run")
# A test the plugin did not run because its target had stopped answering (conformance/target_health.py):
# never a failure of its requirements; the outcome names the test after which the target went quiet.
NOT_RUN = "not_run"
# Requirement-level verdicts (per requirement, per target).
REQ_VERDICTS = ("pass", "fail", "not_supported", "incomplete", "untested")
# On a narrowed run a requirement no selected test covers is out of scope, not untested.
OUT_OF_SCOPE = "out_of_scope"
# KIP-level verdict words (per KIP row, per target column of the matrix).
KIP_VERDICTS = ("compliant", "non-compliant", "partial", "not supported", "untested", "out of scope",
                "incomplete", "not run")

# How the conformance plugin words a registered deviation (registers/deviations.py:
# Deviation.reason is "registered deviation DEV-00N (REQ): observed"): a strict xfail
# that failed as expected, or a strict xpass (the deviation did not occur this time).
_DEV_EXPECTED = re.compile(r"^\s*expected failure \(xfail\): registered deviation (DEV-\d{3,})\b")
_DEV_XPASS = re.compile(r"^\s*\[XPASS\(strict\)\]\s*registered deviation (DEV-\d{3,})\b")
EXPECTED_FAILURE = "expected-failure"
UNEXPECTED_PASS = "unexpected-pass"
NO_TARGET = "(self-checks, no target)"  # rows of tests that use no target: model and reference-vs-reference checks


def requirement_verdict(tests: list[dict[str, Any]]) -> tuple[str, str]:
    """Verdict and reason of one requirement on one target, from its covering tests."""
    if not tests:
        return "untested", "no test covering this requirement ran on this target"
    ran = [t for t in tests if t["verdict"] != NOT_RUN]
    if not ran:
        return "untested", "not run: the target had stopped answering (" + tests[0]["test"] + ")"
    tests = ran
    c = Counter(t["verdict"] for t in tests)

    def reasons(*verdicts: str) -> str:
        seen: list[str] = []
        for t in tests:
            if t["verdict"] in verdicts:
                r = f"{t['test']}: {t['reason']}" if t.get("reason") else f"{t['test']}: {t['verdict']}"
                if r not in seen:
                    seen.append(r)
        return "; ".join(seen)

    if c["fail"] or c["error"]:
        return "fail", reasons("fail", "error")
    if c["pass"] and not c["not_supported"] and not c["skipped"]:
        return "pass", f"{c['pass']} covering test(s) passed"
    if c["pass"]:
        parts = [f"{c['pass']} passed"]
        if c["not_supported"]:
            parts.append(f"{c['not_supported']} not supported by target")
        if c["skipped"]:
            parts.append(f"{c['skipped']} skipped")
        detail = reasons("not_supported", "skipped")
        return "incomplete", ", ".join(parts) + (f" ({detail})" if detail else "")
    if c["not_supported"]:
        return "not_supported", reasons("not_supported")
    return "untested", "every covering test was skipped: " + reasons("skipped")


def kip_verdict(counts: Mapping[str, int]) -> str:
    """Verdict word of a KIP row on one target from its requirement verdict counts."""
    tested = sum(counts.get(v, 0) for v in ("pass", "fail", "not_supported", "incomplete"))
    if tested == 0:
        return "untested"
    if counts.get("fail", 0):
        return "non-compliant"
    if counts.get("pass", 0) and not counts.get("not_supported", 0) and not counts.get("incomplete", 0):
        return "compliant"
    if not counts.get("pass", 0) and not counts.get("incomplete", 0):
        return "not supported"
    return "partial"


def cell(counts: Mapping[str, int], result: str, narrowed: bool) -> dict[str, Any]:
    """Requirement verdict counts of one matrix cell and its word under the run outcome."""
    out: dict[str, Any] = {v: counts.get(v, 0) for v in (*REQ_VERDICTS, OUT_OF_SCOPE)}
    out["verdict"] = _outcome.cell_verdict(result, narrowed, kip_verdict(out), out)
    return out


def deviation_of(verdict: str, reason: str | None) -> dict[str, str] | None:
    """The registered deviation a failing result row names, if any.

    {"id": "DEV-001", "status": "expected-failure"} for a strict xfail that failed as
    registered; status "unexpected-pass" for a strict xpass (the test passed, so the
    deviation did not occur and the register entry may be stale). None otherwise.
    """
    if verdict != "fail" or not reason:
        return None
    m = _DEV_EXPECTED.match(reason)
    if m:
        return {"id": m.group(1), "status": EXPECTED_FAILURE}
    m = _DEV_XPASS.match(reason)
    if m:
        return {"id": m.group(1), "status": UNEXPECTED_PASS}
    return None
