"""Readings that do not mislead (issue 24, item 4): a passing banner names the KIPs the
target does not support, and a narrowed run's "no test" count holds only requirements in
scope."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports import certification as cert
from reports.html_report import render_html
from reports.tests import synthetic as syn

T = syn.TARGET
pytestmark = pytest.mark.deadline(60)


def build(results: Path, catalog: Path) -> dict:
    return cert.build_report_from_dir(results, catalog_path=catalog, register_path=results / "none.yaml",
                                      deviations_path=results / "none")


def kip(report: dict, name: str) -> dict:
    return next(k for k in report["kips"] if k["kip"] == name)


def _with_932_unsupported() -> list[dict]:
    return [dict(r, verdict="not_supported", reason="share groups: not supported by target")
            if r["requirements"] == ["KIP-932.SHARE.001"] else r for r in syn.PASSING_ROWS]


def test_pass_banner_names_a_kip_the_target_does_not_support(tmp_path):
    catalog = syn.write_catalog(tmp_path)
    rep = build(syn.write_results(tmp_path / "out", _with_932_unsupported(), syn.run_json()), catalog)
    assert rep["summary"]["result"] == "pass" and cert.exit_code(rep) == 0
    assert kip(rep, "KIP-932")["per_target"][T]["verdict"] == "not supported"
    assert rep["summary"]["banner"] == "PASS — 1 KIP passed; KIP-932 not supported by this target"


def test_pass_banner_of_a_wholly_supported_run_is_unchanged(tmp_path):
    catalog = syn.write_catalog(tmp_path)
    rep = build(syn.passing(tmp_path / "out"), catalog)
    assert rep["summary"]["banner"] == "PASS — every selected test passed on every target"


def test_narrowed_run_counts_no_test_only_in_scope(tmp_path):
    catalog = syn.write_catalog(tmp_path)
    scope = {"narrowed": True, "suite_exprs": ["kip98"], "keyword": None, "explicit_tests": [],
             "collected": 5, "selected": 3, "deselected": 2}
    rows = syn.PASSING_ROWS[:3]
    rep = build(syn.write_results(tmp_path / "out", rows, syn.run_json(expected=3, finished=3, scope=scope)), catalog)
    k932 = kip(rep, "KIP-932")
    assert k932["untested"] == [] and k932["out_of_scope"] == ["KIP-932.SHARE.001"]
    html = render_html(rep)
    assert "in scope that no test in this run covers on any target: 0." in html
    assert "A further 1 lie outside this narrowed run" in html
