"""Build the vendor certification report model from conformance results.

Inputs:
  * results rows: JSON lines written by the conformance pytest plugin, one file per
    xdist worker in ``<out>/results/*.jsonl``;
  * target descriptions: ``<out>/results/targets-<worker>.json`` (merged over workers);
  * the requirement catalog (``registers/catalog/*.yaml``);
  * the divergence register (``registers/divergences.yaml``);
  * the deviation register (``registers/deviations/``): known failures of named
    targets; a result row whose reason names a DEV id is linked to its entry, and its
    verdict stays "fail" (a known deviation is still non-compliance);
  * optional run metadata written by ``kipcheck certify`` (``<out>/run.json``).

Output: a plain, JSON-serialisable dict (see docs/report.md for the schema). Honesty
rules: a requirement passes on a target only when every covering test that ran there
passed; "not supported by target" and skipped tests are never counted as passes.

This module puts the report together; each part is built by its own module: reading
results (results.py), the registers (register_views.py), the verdict rules
(verdicts.py), the matrix (matrix.py), the other sections (sections.py), evidence and
timeline (evidence.py), the certification statement (statement.py) and the outcome
(outcome.py).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
import socket
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from reports import outcome as _outcome
from reports.client_suites import client_rows, client_section, summary_lines as client_summary_lines
from reports.evidence import link_allure, non_passing, read_allure, timeline
from reports.matrix import coverage, kip_rows, requirement_rows, with_expected_kips
from reports.register_views import (
    UNCATALOGUED, CatalogProblem, docs_from_catalog, kip_sort_key, load_catalog_docs, load_catalog_yaml,
    load_deviation_register, load_divergence_register, normalize_kip,
)
from reports.results import Results, merge_target_descriptions, read_results, unique_rows
from reports.seal import statement as seal_statement
from reports.sections import (
    deviation_section, observed_divergences, self_checks, summary, target_columns, target_rows,
    tests_without_requirements,
)
from reports.statement import build_statement
from reports.verdicts import (
    EXPECTED_FAILURE, KIP_VERDICTS, NO_TARGET, OUT_OF_SCOPE, REQ_VERDICTS, TEST_VERDICTS, UNEXPECTED_PASS,
    deviation_of, kip_verdict, requirement_verdict,
)

# The report model's interface (the cli, conformance.run_status and the tests use it);
# several names are defined by the modules above and re-exported here.
__all__ = [
    "SCHEMA", "SCHEMA_VERSION", "REPORT_KEYS", "EXPECTED_KIPS",
    "TEST_VERDICTS", "REQ_VERDICTS", "OUT_OF_SCOPE", "KIP_VERDICTS", "UNCATALOGUED", "EXPECTED_FAILURE",
    "UNEXPECTED_PASS", "NO_TARGET",
    "CatalogProblem", "Results",
    "build_report", "build_report_from_dir", "deviation_of", "docs_from_catalog", "exit_code", "kip_sort_key",
    "kip_verdict", "kipcheck_version", "load_catalog_docs", "load_catalog_yaml", "load_deviation_register",
    "load_divergence_register", "merge_target_descriptions", "normalize_kip", "read_results", "report_bytes",
    "report_sha256", "requirement_verdict", "summary_lines", "write_json",
]

SCHEMA = "kipcheck-certification-report"
SCHEMA_VERSION = 6  # 6: clients (client libraries' own suites, reports/client_suites.py); 5: statement.evidence (the seal, reports/seal.py), kips[].out_of_scope, rows' target_down; 4: deviations.register[].flaky and .signature; 3: statement, self_checks, non_passing, timeline; outcome rules (reports/outcome.py)

# Top-level keys of report.json; tests pin this set so schema changes are deliberate.
REPORT_KEYS = (
    "schema",
    "schema_version",
    "generated_at",
    "kipcheck_version",
    "host",
    "run",
    "statement",
    "targets",
    "summary",
    "kips",
    "requirements",
    "non_passing",
    "self_checks",
    "timeline",
    "divergences",
    "deviations",
    "clients",
    "tests_without_requirements",
    "uncatalogued_requirements",
    "problems",
)

# Matrix rows the certification report always shows; one missing from the catalog gets
# an empty "untested" row (and a problem) instead of silently disappearing.
EXPECTED_KIPS = ("KIP-98", "KIP-447", "KIP-848", "KIP-TXNRT", "KIP-932", "KIP-1289", "PROTO")


def kipcheck_version() -> str:
    try:
        return version("kipcheck")
    except Exception:  # running from a source tree that is not installed
        return "unknown"


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def build_report(
    results: Results,
    catalog: list[dict[str, Any]],
    register: list[dict[str, Any]] | None = None,
    target_order: list[str] | None = None,
    expected_kips: Iterable[str] = (),
    deviations: list[dict[str, Any]] | None = None,
    allure: Mapping[str, Mapping[str, Any]] | None = None,
    catalog_path: str | Path | None = None,
) -> dict[str, Any]:
    """The report model (a plain dict; see docs/report.md)."""
    problems = list(results.problems)
    catalog = with_expected_kips(catalog, expected_kips, problems)
    all_rows = unique_rows(results.rows)
    link_allure(all_rows, allure or {})
    # Self-checks (tests that use no target: model and reference-vs-reference checks) are
    # reported apart; they are no cluster and never a matrix column.
    self_rows = [r for r in all_rows if r["target"] == NO_TARGET]
    rows = [r for r in all_rows if r["target"] != NO_TARGET]
    decided = _outcome.decide(results.run, all_rows)
    result, narrowed = decided["result"], decided["completeness"]["narrowed"]
    specs = target_columns(results, target_order or results.requested, rows)
    cov = coverage(catalog, rows, problems)
    requirements_out = requirement_rows(cov, specs, narrowed)
    kips_out = kip_rows(cov.kips, requirements_out, specs, result, narrowed)
    decided = _outcome.name_kips(decided, kips_out, specs)
    targets_out = target_rows(results, specs, rows, problems)
    clients = client_rows(results.client_rows)
    deviations_out = deviation_section(rows + clients, deviations, problems)
    run = dict(results.run)
    run.setdefault("wall_time_s", None)
    generated_at = _now_iso()
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "generated_at": generated_at,
        "kipcheck_version": kipcheck_version(),
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(), "python": sys.version.split()[0]},
        "run": run,
        "statement": build_statement(run, targets_out, kips_out, decided, catalog_path, generated_at,
                                     kipcheck_version(), seal_statement(results.seal)),
        "targets": targets_out,
        "summary": summary(decided, rows, all_rows, requirements_out, specs),
        "kips": kips_out,
        "requirements": requirements_out,
        "non_passing": non_passing(all_rows, cov.req_index),
        "self_checks": self_checks(self_rows),
        "timeline": timeline(all_rows),
        "divergences": {"observed": observed_divergences(rows), "register": list(register or [])},
        "deviations": deviations_out,
        "clients": client_section(clients),
        "tests_without_requirements": tests_without_requirements(cov.without_requirements),
        "uncatalogued_requirements": sorted(cov.uncatalogued),
        "problems": problems,
    }


def exit_code(report: Mapping[str, Any]) -> int:
    """0 pass or partial scope; 1 a failure on a finished run; 2 incomplete, not run, no
    results, or a target failed to start (infrastructure, not a verdict). See reports/outcome.py."""
    return _outcome.exit_code(report)


def build_report_from_dir(
    results_dir: str | Path,
    catalog_path: str | Path | None = None,
    register_path: str | Path | None = None,
    target_order: list[str] | None = None,
    deviations_path: str | Path | None = None,
) -> dict[str, Any]:
    """The report of a results directory, judged against the registers (default: the
    packaged ones); an unreadable register is a problem, not a crash."""
    results = read_results(results_dir)
    catalog = _read_catalog(catalog_path, results.problems)
    register = _read_register(load_divergence_register, register_path, "divergence register", results.problems)
    deviations = _read_register(load_deviation_register, deviations_path, "deviation register", results.problems)
    if not catalog:
        results.problems.append("the requirement catalog is empty or missing")
    expected = EXPECTED_KIPS if catalog_path is None else ()
    allure = read_allure(Path(results_dir).parent / "allure-results")
    return build_report(results, catalog, register, target_order, expected, deviations, allure, catalog_path)


def _read_catalog(path: str | Path | None, problems: list[str]) -> list[dict[str, Any]]:
    """The catalog's KIP documents; an invalid catalog is read without validation and
    its first problems are reported."""
    try:
        return load_catalog_docs(path)
    except CatalogProblem as exc:
        lines = [ln.strip() for ln in str(exc).splitlines()[1:] if ln.strip()]
        first = "; ".join(lines[:3]) + (f"; ... and {len(lines) - 3} more" if len(lines) > 3 else "")
        problems.append(f"invalid requirement catalog ({len(lines)} problem(s): {first}); read without validation")
        return load_catalog_docs(path, strict=False)


def _read_register(
    load: Callable[[str | Path | None], list[dict[str, Any]]], path: str | Path | None, what: str,
    problems: list[str],
) -> list[dict[str, Any]]:
    """One register's entries, or [] and a problem naming each reason it is invalid."""
    try:
        return load(path)
    except Exception as exc:  # RegisterError / DeviationError list every problem
        detail = "; ".join(getattr(exc, "problems", None) or [" ".join(str(exc).split())])
        problems.append(f"{what} unreadable: {detail}")
        return []


def write_json(report: Mapping[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_bytes(report_bytes(report))
    tmp.replace(p)
    return p


def report_bytes(report: Mapping[str, Any]) -> bytes:
    """The exact bytes of report.json (what its published SHA-256 is computed over)."""
    return (json.dumps(report, indent=2, sort_keys=False, default=str) + "\n").encode("utf-8")


def report_sha256(report: Mapping[str, Any]) -> str:
    return hashlib.sha256(report_bytes(report)).hexdigest()


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """Console summary: the outcome banner, then KIP rows x target columns with verdict
    words, requirement counts and the MUST-level counts."""
    summary = report["summary"]
    out = [summary.get("banner") or summary["result"].upper()]
    comp = summary.get("completeness") or {}
    if comp.get("text"):
        out.append(f"completeness: {comp['text']}")
    specs = [t["spec"] for t in report["targets"]]
    header = ["KIP"] + specs
    table = [header]
    for k in report["kips"]:
        line = [k["kip"]]
        for s in specs:
            c = k["per_target"][s]
            m = (k.get("must") or {}).get(s)
            line.append(
                f"{c['verdict']} ({c['pass']}/{c['fail']}/{c['not_supported']}"
                + (f"/{c['incomplete']}i" if c["incomplete"] else "")
                + f"/{c['untested'] + c.get(OUT_OF_SCOPE, 0)})"
                + (f" MUST {m['pass']}/{m['fail']}/{m['not_supported']}/{m['untested'] + m.get(OUT_OF_SCOPE, 0)}"
                   if m and k.get("must_total") else "")
            )
        table.append(line)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    rows = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in table]
    rows.insert(1, "  ".join("-" * w for w in widths))
    out += rows
    untested = "out of scope" if comp.get("narrowed") else "untested"
    out.append(f"(pass/fail/not supported[/incomplete]/{untested} requirements per target; MUST: the same for "
               "MUST-level requirements)")
    t = summary["tests"]
    timed = f", {summary['timed_out']} timed out" if summary.get("timed_out") else ""
    out.append(
        f"tests: {summary['tests_total']} "
        f"(pass {t['pass']}, fail {t['fail']}{timed}, error {t['error']}, "
        f"not supported {t['not_supported']}, skipped {t['skipped']}); "
        f"requirements: {summary['requirements_tested']} tested, "
        f"{summary['requirements_untested']} {untested} of {summary['requirements_total']}"
    )
    sc = report.get("self_checks") or {}
    if sc.get("tests_total"):
        st = sc["tests"]
        out.append(f"self-checks (no target, not a certification): {sc['tests_total']} "
                   f"(pass {st['pass']}, fail {st['fail'] + st['error']})")
    return out + client_summary_lines(report.get("clients") or {"suites": [], "rows": []})
