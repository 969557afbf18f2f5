"""`kipcheck catalog`: the requirement catalog with its test coverage, either claimed by the
collected suites (`@pytest.mark.requirement`) or read from the results of a run."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

from cli.common import (EXIT_OK, PLUGIN_MODULE, SUITES_PACKAGE, UsageError, load_catalog_or_fail, not_utf8,
                        plugin_registered)
from registers.catalog import CatalogError, load_catalog
from reports.certification import build_report, normalize_kip, read_results


class _MarkerCollector:
    """A pytest plugin object that records the requirement ids each collected test claims."""

    def __init__(self) -> None:
        self.by_test: dict[str, list[str]] = {}

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        for item in items:
            ids: list[str] = []
            for m in item.iter_markers("requirement"):
                ids.extend(str(a) for a in m.args)
            self.by_test[item.nodeid] = ids


def collect_requirement_claims() -> dict[str, list[str]] | None:
    """Collect the suites in-process; test nodeid -> requirement ids. None if not possible."""
    try:
        if importlib.util.find_spec(SUITES_PACKAGE) is None:
            return None
        import pytest  # third-party, slow to import: only collecting the suites needs it
    except Exception:
        return None
    collector = _MarkerCollector()
    args = ["--collect-only", "-qq", "-p", "no:cacheprovider", "--pyargs", SUITES_PACKAGE]
    if not plugin_registered():
        args[4:4] = ["-p", PLUGIN_MODULE]
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            rc = pytest.main(args, plugins=[collector])
    except Exception:
        return None
    if rc not in (0, 5):
        return None
    return collector.by_test


def cmd_catalog(args: argparse.Namespace) -> int:
    docs = load_catalog_or_fail(args.catalog)
    wanted = {normalize_kip(k).upper() for k in args.kip or []}
    if wanted:
        known = {d["kip"].upper() for d in docs}
        missing = sorted(wanted - known)
        if missing:
            raise UsageError(f"unknown KIP {', '.join(missing)}; the catalog has {', '.join(d['kip'] for d in docs)}")
        docs = [d for d in docs if d["kip"].upper() in wanted]

    rows: list[dict[str, Any]] = []
    specs: list[str] = []
    if args.results:
        rdir = Path(args.results)
        if not rdir.is_dir():
            raise UsageError(f"results directory {args.results} does not exist")
        try:
            report = build_report(read_results(rdir), docs)
        except UnicodeDecodeError:
            raise UsageError(not_utf8(rdir)) from None
        specs = [t["spec"] for t in report["targets"]]
        for r in report["requirements"]:
            if not r["in_catalog"]:
                continue
            rows.append(
                {
                    "id": r["id"],
                    "kip": r["kip"],
                    "level": r["level"],
                    "behaviour": r["behaviour"],
                    "tests": [t["nodeid"] for t in r["tests"]],
                    "verdicts": {s: r["per_target"][s]["verdict"] for s in specs},
                }
            )
        source = f"results in {rdir}"
    else:
        claims = None if args.no_collect else collect_requirement_claims()
        by_req: dict[str, list[str]] = {}
        for nodeid, ids in (claims or {}).items():
            for rid in ids:
                by_req.setdefault(rid, []).append(nodeid)
        for d in docs:
            for r in d["requirements"]:
                rows.append(
                    {
                        "id": r["id"],
                        "kip": d["kip"],
                        "level": r["level"],
                        "behaviour": r["behaviour"],
                        "tests": sorted(by_req.get(r["id"], [])) if claims is not None else None,
                    }
                )
        if claims is None:
            if args.untested and not args.no_collect:
                raise UsageError("cannot tell which requirements are untested: collecting the conformance suites failed "
                                 "(try `kipcheck catalog --results OUT/results`)")
            source = "catalog only (suites not collected)"
        else:
            source = f"collected {len(claims)} tests from {SUITES_PACKAGE}"
    reasons = _untested_reasons(args.catalog)
    for row in rows:
        row["untested_reason"] = reasons.get(row["id"])
    if args.untested:
        if args.no_collect and not args.results:
            raise UsageError("--untested needs test coverage: drop --no-collect or pass --results")
        rows = [r for r in rows if not r["tests"]]

    if args.json:
        print(json.dumps({"source": source, "targets": specs, "requirements": rows}, indent=2))
        return EXIT_OK
    _print_catalog(rows, specs, docs, source)
    return EXIT_OK


def _untested_reasons(path: str | None) -> dict[str, str]:
    """Requirement id -> its catalogued `untested_reason` ({} for an invalid catalog)."""
    try:
        catalog = load_catalog(path) if path is not None else load_catalog()
    except CatalogError:
        return {}
    return {r.id: r.untested_reason for r in catalog if r.untested_reason}


def _print_catalog(rows: list[dict[str, Any]], specs: list[str], docs: list[dict[str, Any]], source: str) -> None:
    width = shutil.get_terminal_size((120, 24)).columns
    titles = {d["kip"]: d.get("title") or "" for d in docs}
    idw = max([len(r["id"]) for r in rows] + [2])
    by_kip: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_kip.setdefault(r["kip"], []).append(r)
    def coverage_text(r: dict[str, Any]) -> str:
        if specs:
            return "  ".join(f"{s}={r['verdicts'][s]}" for s in specs)
        if r["tests"] is None:
            return ""
        if r["tests"]:
            return f"{len(r['tests'])} test(s)"
        return "explained" if r.get("untested_reason") else "NO TEST"

    covw = max([len(coverage_text(r)) for r in rows] + [0])
    for d in docs:
        kip = d["kip"]
        items = by_kip.get(kip, [])
        total = len(d["requirements"])
        untested = [r for r in items if r["tests"] is not None and not r["tests"]] if not specs else None
        head = f"{kip}  {titles.get(kip, '')}  ({len(items)} of {total} requirements"
        if untested is not None and rows and items and items[0]["tests"] is not None:
            explained = sum(1 for r in untested if r.get("untested_reason"))
            head += f", {len(untested)} without a test, {explained} of them explained"
        print(head + ")")
        # unexplained gaps first; ids with a written reason apart, after them
        items = sorted(items, key=lambda r: bool(not r["tests"] and r.get("untested_reason")))
        for r in items:
            cov = coverage_text(r).ljust(covw)
            level = (r["level"] or "").upper()
            prefix = f"  {r['id'].ljust(idw)}  {level:<6}  {cov}  " if cov else f"  {r['id'].ljust(idw)}  {level:<6}  "
            room = max(width - len(prefix), 30)
            behaviour = r["behaviour"] or ""
            if len(behaviour) > room:
                behaviour = behaviour[: room - 1] + "…"
            print(prefix + behaviour)
            if not r["tests"] and r.get("untested_reason"):
                print(textwrap.fill("explained: " + r["untested_reason"], width=max(width, 60),
                                    initial_indent=" " * 4, subsequent_indent=" " * 15))
        print()
    print(f"({source})")
