"""The conformance matrix: which result rows cover which requirement on which target,
each requirement's verdict per target, and each KIP row's cell per target column.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from reports.register_views import UNCATALOGUED, kip_sort_key
from reports.verdicts import EXPECTED_FAILURE, OUT_OF_SCOPE, cell, requirement_verdict


def with_expected_kips(
    catalog: Iterable[dict[str, Any]], expected_kips: Iterable[str], problems: list[str]
) -> list[dict[str, Any]]:
    """The catalog's KIP documents, plus an empty "untested" row (and a problem) for each
    expected KIP the catalog lacks: a matrix row never silently disappears."""
    catalog = list(catalog)
    have = {d["kip"] for d in catalog}
    missing = [k for k in expected_kips if k not in have]
    if missing:
        problems.append(f"no requirements in the catalog for {', '.join(missing)} (shown as untested)")
        catalog += [
            {"kip": k, "title": "no requirements catalogued yet", "seed": None, "status": None, "source": "",
             "requirements": []}
            for k in missing
        ]
        catalog.sort(key=lambda d: kip_sort_key(d["kip"], d.get("status")))
    return catalog


@dataclass
class Coverage:
    """The result rows laid over the catalog."""

    kips: list[dict[str, Any]]  # the catalog's KIP documents, then the uncatalogued row if any
    req_index: dict[str, dict[str, Any]]  # requirement id -> its catalog entry, with "kip"
    cover: Mapping[str, Mapping[str, list[dict[str, Any]]]]  # requirement id -> target -> rows
    without_requirements: list[dict[str, Any]]  # rows that claim no requirement
    uncatalogued: set[str]  # requirement ids rows claim that the catalog lacks


def coverage(catalog: Iterable[dict[str, Any]], rows: list[dict[str, Any]], problems: list[str]) -> Coverage:
    """Index the rows by the requirements they claim; ids the catalog lacks get a row of
    their own in the matrix (and a problem)."""
    kips = [dict(d) for d in catalog]
    req_index: dict[str, dict[str, Any]] = {}
    for d in kips:
        for r in d["requirements"]:
            req_index.setdefault(r["id"], {**r, "kip": d["kip"]})
    cover: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    without_reqs: list[dict[str, Any]] = []
    uncatalogued: set[str] = set()
    for row in rows:
        if not row["requirements"]:
            without_reqs.append(row)
        for rid in row["requirements"]:
            cover[rid][row["target"]].append(row)
            if rid not in req_index:
                uncatalogued.add(rid)
    if uncatalogued:
        problems.append(
            f"{len(uncatalogued)} requirement id(s) used by tests are not in the catalog: "
            + ", ".join(sorted(uncatalogued))
        )
        kips.append(_uncatalogued_doc(uncatalogued))
        for r in kips[-1]["requirements"]:
            req_index[r["id"]] = {**r, "kip": UNCATALOGUED}
    return Coverage(kips, req_index, cover, without_reqs, uncatalogued)


def _uncatalogued_doc(ids: set[str]) -> dict[str, Any]:
    return {
        "kip": UNCATALOGUED,
        "title": "requirement ids used by tests but missing from the catalog",
        "seed": None,
        "status": None,
        "source": "",
        "requirements": [
            {"id": rid, "section": None, "level": None, "behaviour": "", "oracle": None, "implemented_in": {}}
            for rid in sorted(ids)
        ],
    }


def requirement_rows(cov: Coverage, specs: list[str], narrowed: bool) -> list[dict[str, Any]]:
    """report.json requirements[]: every requirement in matrix order with its verdict on
    each target column."""
    return [
        _requirement_row(d["kip"], r, cov.cover.get(r["id"], {}), specs, narrowed)
        for d in cov.kips
        for r in d["requirements"]
    ]


def _requirement_row(
    kip: str, r: Mapping[str, Any], by_target: Mapping[str, list[dict[str, Any]]], specs: list[str], narrowed: bool
) -> dict[str, Any]:
    all_tests: dict[str, str] = {}
    for tgt_rows in by_target.values():
        for t in tgt_rows:
            all_tests.setdefault(t["nodeid"], t["test"])
    return {
        "id": r["id"],
        "kip": kip,
        "section": r.get("section"),
        "level": r.get("level"),
        "behaviour": r.get("behaviour") or "",
        "oracle": r.get("oracle"),
        "implemented_in": r.get("implemented_in") or {},
        "in_catalog": kip != UNCATALOGUED,
        "tested": bool(all_tests),
        "tests": [{"nodeid": n, "test": t} for n, t in sorted(all_tests.items())],
        "per_target": {
            spec: _on_target(sorted(by_target.get(spec, []), key=lambda t: t["nodeid"]), narrowed) for spec in specs
        },
    }


def _on_target(tests: list[dict[str, Any]], narrowed: bool) -> dict[str, Any]:
    """One requirement on one target: its verdict from the covering tests, and the
    registered deviations that failed as expected there."""
    verdict, reason = requirement_verdict(tests)
    if verdict == "untested" and narrowed and not tests:
        verdict, reason = OUT_OF_SCOPE, "no test covering this requirement was selected in this run"
    known: list[str] = []
    for t in tests:
        dv = t["deviation"]
        if dv and dv["status"] == EXPECTED_FAILURE and dv["id"] not in known:
            known.append(dv["id"])
    return {
        "verdict": verdict,
        "reason": reason,
        "known_deviations": known,
        "tests": [
            {"nodeid": t["nodeid"], "verdict": t["verdict"], "reason": t["reason"],
             "duration_s": t["duration_s"], "deviation": t["deviation"], "timed_out": t["timed_out"]}
            for t in tests
        ],
    }


def _out_of_scope(req: Mapping[str, Any]) -> bool:
    """Outside a narrowed run's selection on every target: neither tested nor "no test"."""
    cells = req["per_target"].values()
    return bool(cells) and all(c["verdict"] == OUT_OF_SCOPE for c in cells)


def kip_rows(
    kips: list[dict[str, Any]], requirements: list[dict[str, Any]], specs: list[str], result: str, narrowed: bool
) -> list[dict[str, Any]]:
    """report.json kips[]: one matrix row per KIP, a cell per target for all its
    requirements and one for its MUST-level ones."""
    by_id = {r["id"]: r for r in requirements}
    out = []
    for d in kips:
        ids = [r["id"] for r in d["requirements"]]
        must_ids = [i for i in ids if str(by_id[i].get("level") or "").lower() == "must"]
        per_target = {}
        must = {}
        for spec in specs:
            per_target[spec] = cell(Counter(by_id[i]["per_target"][spec]["verdict"] for i in ids), result, narrowed)
            must[spec] = cell(Counter(by_id[i]["per_target"][spec]["verdict"] for i in must_ids), result, narrowed)
        out.append(
            {
                "kip": d["kip"],
                "title": d.get("title") or "",
                "status": d.get("status"),
                "seed": d.get("seed"),
                "requirements": ids,
                "untested": [i for i in ids if not by_id[i]["tested"] and not _out_of_scope(by_id[i])],
                "out_of_scope": [i for i in ids if _out_of_scope(by_id[i])],
                "must_total": len(must_ids),
                "per_target": per_target,
                "must": must,
            }
        )
    return out
