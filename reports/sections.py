"""The report's sections beside the matrix, one function each: the target columns and
what is known of each target, the summary, the divergences observed against the
register, the rows that name a registered deviation, the self-checks and the tests
that claim no requirement.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

from reports.results import Results
from reports.verdicts import NO_TARGET, TEST_VERDICTS, UNEXPECTED_PASS, cell

# Fields of a target's description the run side's record fills in when the plugin's
# description lacks them: (description key, run.json targets[spec] key).
_RECORDED = (("cluster_id", "cluster_id"), ("bootstrap", "bootstrap"), ("version", "broker_version"),
             ("security_protocol", "security_protocol"), ("finalized_features", "finalized_features"))


def target_columns(results: Results, target_order: list[str] | None, rows: list[dict[str, Any]]) -> list[str]:
    """The matrix columns: the requested targets (in order), then any other seen in rows.
    A target that is only described (e.g. the reference started as differential oracle)
    is not a column."""
    specs: list[str] = []
    for s in list(target_order or results.run.get("targets") or []) + [r["target"] for r in rows]:
        if s not in specs and s != NO_TARGET:
            specs.append(s)
    if not specs:
        specs = [s for s in results.targets if s != NO_TARGET]
    return specs


def target_rows(
    results: Results, specs: list[str], rows: list[dict[str, Any]], problems: list[str]
) -> list[dict[str, Any]]:
    """report.json targets[]: each column's description, capabilities and test counts; a
    target that failed to start, was skipped or has no results is also a problem."""
    out = []
    for spec in specs:
        info = results.targets.get(spec, {})
        trows = [r for r in rows if r["target"] == spec]
        out.append(_target_row(spec, info, _run_target(results.run, spec), trows))
        if info.get("start_error"):
            problems.append(f"target {spec} failed to start: {info['start_error']}")
        if info.get("skip_reason"):
            problems.append(f"target {spec} skipped: {info['skip_reason']}")
        if not trows:
            problems.append(f"target {spec}: no test results")
    return out


def _target_row(
    spec: str, info: Mapping[str, Any], recorded: Mapping[str, Any], trows: list[dict[str, Any]]
) -> dict[str, Any]:
    desc = dict(info.get("describe") or {})
    caps = dict(info.get("capabilities") or {})
    for key, src in _RECORDED:  # what the run side asked the cluster
        if desc.get(key) in (None, {}, "") and recorded.get(src) not in (None, {}, ""):
            desc[key] = recorded[src]
    first = trows[0] if trows else {}
    counts = Counter(r["verdict"] for r in trows)
    return {
        "spec": spec,
        "kind": desc.get("kind") or info.get("kind") or first.get("target_kind") or spec.split(":", 1)[0],
        "version": desc.get("version") or first.get("target_version"),
        "nodes": desc.get("nodes"),
        "bootstrap": desc.get("bootstrap"),
        "cluster_id": desc.get("cluster_id"),
        "security_protocol": desc.get("security_protocol"),
        "startup_seconds": desc.get("startup_seconds"),
        "finalized_features": dict(caps.get("finalized_features") or desc.get("finalized_features") or {}),
        "supported_features": dict(caps.get("supported_features") or {}),
        "api_versions": dict(caps.get("api_versions") or {}),
        "described": bool(desc),
        "start_error": info.get("start_error"),
        "skip_reason": info.get("skip_reason"),
        "errors": list(info.get("errors") or []),
        "tests": {v: counts.get(v, 0) for v in TEST_VERDICTS},
        "tests_total": len(trows),
        "test_duration_s": round(sum(r["duration_s"] for r in trows), 3),
    }


def _run_target(run: Mapping[str, Any], spec: str) -> Mapping[str, Any]:
    targets = run.get("targets")
    rec = targets.get(spec) if isinstance(targets, Mapping) else None
    return rec if isinstance(rec, Mapping) else {}


def summary(
    decided: Mapping[str, Any],
    rows: list[dict[str, Any]],
    all_rows: list[dict[str, Any]],
    requirements: list[dict[str, Any]],
    specs: list[str],
) -> dict[str, Any]:
    """report.json summary: the run outcome, the test counts (self-checks apart) and each
    target's cell over the catalogued requirements."""
    result, narrowed = decided["result"], decided["completeness"]["narrowed"]
    test_counts = Counter(r["verdict"] for r in rows)
    catalogued = [r for r in requirements if r["in_catalog"]]
    per_target = {
        spec: cell(Counter(r["per_target"][spec]["verdict"] for r in catalogued), result, narrowed) for spec in specs
    }
    return {
        "result": result,
        "banner": decided["banner"],
        "completeness": decided["completeness"],
        "tests": {v: test_counts.get(v, 0) for v in TEST_VERDICTS},
        "tests_total": len(rows),
        "timed_out": sum(1 for r in all_rows if r["timed_out"]),
        "requirements_total": len(catalogued),
        "requirements_tested": sum(1 for r in catalogued if r["tested"]),
        "requirements_untested": sum(1 for r in catalogued if not r["tested"]),
        "per_target": per_target,
    }


def observed_divergences(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """report.json divergences.observed: what each row recorded where the target and the
    reference answered differently."""
    return [
        {
            "target": row["target"],
            "nodeid": row["nodeid"],
            "test": row["test"],
            "verdict": row["verdict"],
            "requirement": dv.get("requirement"),
            "what": dv.get("what"),
            "observed": dv.get("target"),
            "reference": dv.get("reference"),
        }
        for row in sorted(rows, key=lambda r: (r["target"], r["nodeid"]))
        for dv in row["divergences"]
    ]


def deviation_section(
    rows: list[dict[str, Any]], deviations: list[dict[str, Any]] | None, problems: list[str]
) -> dict[str, Any]:
    """report.json deviations: the known-deviation register and the rows that name one of
    its entries. A deviation that did not occur (strict xpass) or that the register lacks
    is a problem."""
    register = [dict(d) for d in (deviations or [])]
    matched = []
    for row in sorted(rows, key=lambda r: (r["target"], r["nodeid"])):
        dv = row["deviation"]
        if not dv:
            continue
        matched.append(
            {
                "id": dv["id"],
                "status": dv["status"],
                "target": row["target"],
                "target_kind": row["target_kind"],
                "nodeid": row["nodeid"],
                "test": row["test"],
                "requirements": list(row["requirements"]),
                "verdict": row["verdict"],
            }
        )
        if dv["status"] == UNEXPECTED_PASS:
            problems.append(
                f"registered deviation {dv['id']} did not occur on {row['target']} ({row['nodeid']}): the test "
                "passed, so its strict xfail failed; if the target is fixed, remove the entry from "
                "registers/deviations/"
            )
    unregistered = sorted({m["id"] for m in matched} - {d["id"] for d in register})
    if unregistered:
        problems.append(
            "results name deviation(s) missing from the deviation register: " + ", ".join(unregistered)
        )
    return {"register": register, "matched": matched}


def self_checks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Tests that need no target (model checks, reference against itself): they vouch for
    kipcheck's own oracle, not for any cluster."""
    counts = Counter(r["verdict"] for r in rows)
    reqs = sorted({rid for r in rows for rid in r["requirements"]})
    return {
        "tests": {v: counts.get(v, 0) for v in TEST_VERDICTS},
        "tests_total": len(rows),
        "requirements": reqs,
        "rows": [{"nodeid": r["nodeid"], "verdict": r["verdict"], "reason": r["reason"] or None,
                  "requirements": r["requirements"]} for r in sorted(rows, key=lambda r: r["nodeid"])],
    }


def tests_without_requirements(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """report.json tests_without_requirements: rows that claim no catalog requirement."""
    return [
        {"nodeid": r["nodeid"], "target": r["target"], "verdict": r["verdict"], "reason": r["reason"]}
        for r in sorted(rows, key=lambda r: (r["target"], r["nodeid"]))
    ]
