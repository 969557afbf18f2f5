"""The report's "Client libraries" section: rows of client libraries' own integration suites
(client_suites/, e.g. franz-go's kgo tests) run against the targets. They are outside
evidence: no KIP verdict is computed from them; each row is pass, fail, skipped by the client
(its own reason), error (the suite could not be built) or not run (the target stopped
answering after a failed test; client_suites/runner.py run_suite). A failure the deviation register
names is worded like the conformance plugin's strict xfail, so it is linked to its entry
(reports/sections.py deviation_section) and a fixed target shows an unexpected pass.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

from reports.verdicts import EXPECTED_FAILURE, UNEXPECTED_PASS, deviation_of

COUNT_KEYS = ("pass", "fail", "registered", "unexpected_pass", "skipped", "error", "not_run")


def clean_client_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A client-suite row with every field the report reads (the fields the deviation section
    reads among them)."""
    verdict = str(row.get("verdict") or "error")
    reason = str(row.get("reason") or "")
    try:
        duration = float(row.get("duration_s") or 0.0)
    except (TypeError, ValueError):
        duration = 0.0
    return {
        "suite": str(row.get("client_suite")),
        "version": row.get("client_version"),
        "nodeid": str(row.get("nodeid") or "?"),
        "test": str(row.get("test") or "?"),
        "target": str(row.get("target") or "?"),
        "target_kind": row.get("target_kind"),
        "target_version": row.get("target_version"),
        "requirements": [str(r) for r in row.get("requirements") or []],
        "verdict": verdict,
        "reason": reason,
        "deviation": deviation_of(verdict, reason),
        "duration_s": duration,
        "timed_out": bool(row.get("timed_out")),
        "output_tail": str(row.get("output_tail") or ""),
    }


def client_rows(raw_rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Clean rows, one per (suite, test, target) (the last one wins), in a stable order."""
    dedup = {(r["nodeid"], r["target"]): r for r in map(clean_client_row, raw_rows)}
    return sorted(dedup.values(), key=lambda r: (r["suite"], r["target"], r["nodeid"]))


def count_key(row: Mapping[str, Any]) -> str:
    """Which COUNT_KEYS bucket a clean row falls in."""
    dv = row.get("deviation") or {}
    if dv.get("status") == EXPECTED_FAILURE:
        return "registered"
    if dv.get("status") == UNEXPECTED_PASS:
        return "unexpected_pass"
    return row["verdict"] if row["verdict"] in COUNT_KEYS else "error"


def label(row: Mapping[str, Any]) -> str:
    """The row's verdict as the report shows it: "fail (registered DEV-700)", ..."""
    key = count_key(row)
    dv = row.get("deviation") or {}
    return {"registered": f"fail (registered {dv.get('id')})", "unexpected_pass": f"unexpected pass ({dv.get('id')})",
            "skipped": "skipped by client", "not_run": "not run (target down)"}.get(key, key)


def client_section(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """report.json clients: per (suite, target) counts, then every row."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["suite"], r["target"]), []).append(r)
    suites = []
    for (suite, target), rs in groups.items():
        c = Counter(count_key(r) for r in rs)
        suites.append({"suite": suite, "version": rs[0]["version"], "target": target,
                       "target_kind": rs[0]["target_kind"], "target_version": rs[0]["target_version"],
                       "counts": {k: c.get(k, 0) for k in COUNT_KEYS}, "tests_total": len(rs),
                       "duration_s": round(sum(r["duration_s"] for r in rs if "/" not in r["test"]), 3)})
    return {"suites": suites, "rows": rows}


def unexpected(section: Mapping[str, Any]) -> int:
    """Rows that make a client-suite run fail: a failure nobody registered, an unexpected
    pass (the register is stale), an error."""
    return sum(s["counts"][k] for s in section["suites"] for k in ("fail", "unexpected_pass", "error"))


def summary_lines(section: Mapping[str, Any]) -> list[str]:
    """Console lines: counts per suite and target, then every row that is not a pass or a
    client's skip."""
    lines = []
    for s in section["suites"]:
        counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in s["counts"].items() if v)
        lines.append(f"client suite {s['suite']} {s['version']} on {s['target']}: {s['tests_total']} tests ({counts})")
    for r in section["rows"]:
        if r["verdict"] not in ("pass", "skipped", "not_run"):
            lines.append(f"  {label(r)}: {r['nodeid']} on {r['target']}: {r['reason'][:160]}")
    return lines
