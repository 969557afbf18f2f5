"""Outcome rules, certification statement, evidence and the report hash (no broker)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from reports import certification as cert
from reports import evidence, outcome
from reports.html_report import render_html, write_html
from reports.statement import catalog_files, catalog_sha256
from reports.tests import synthetic as syn

T = syn.TARGET


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    return syn.write_catalog(tmp_path)


def build(results: Path, catalog: Path) -> dict:
    return cert.build_report_from_dir(results, catalog_path=catalog, register_path=results / "none.yaml",
                                      deviations_path=results / "none")


def kip(report: dict, name: str) -> dict:
    return next(k for k in report["kips"] if k["kip"] == name)


def test_complete_passing_run_is_pass(tmp_path, catalog):
    rep = build(syn.passing(tmp_path / "out"), catalog)
    assert rep["summary"]["result"] == "pass" and cert.exit_code(rep) == 0
    assert rep["summary"]["banner"].startswith("PASS")
    assert kip(rep, "KIP-98")["per_target"][T]["verdict"] == "compliant"
    assert kip(rep, "KIP-98")["must"][T] | {} == {**kip(rep, "KIP-98")["must"][T], "pass": 2, "fail": 0}
    assert kip(rep, "KIP-98")["must_total"] == 2
    assert rep["summary"]["completeness"]["text"] == "complete: 5 of 5 selected tests finished"


def test_self_checks_are_no_target_column(tmp_path, catalog):
    rep = build(syn.passing(tmp_path / "out"), catalog)
    assert [t["spec"] for t in rep["targets"]] == [T]
    assert cert.NO_TARGET not in kip(rep, "KIP-98")["per_target"]
    assert rep["self_checks"]["tests_total"] == 1 and rep["self_checks"]["requirements"] == ["KIP-98.TXN.001"]
    html = render_html(rep)
    top = html[html.index('id="statement"'):html.index('id="evidence"')]  # statement, matrix, chart
    assert cert.NO_TARGET not in top and "self-check" not in top


def test_interrupted_run_is_incomplete_never_fail(tmp_path, catalog):
    rep = build(syn.interrupted(tmp_path / "out"), catalog)
    s = rep["summary"]
    assert s["result"] == "incomplete" and cert.exit_code(rep) == 2
    assert s["banner"].startswith("INCOMPLETE: interrupted by SIGINT after 2 of 5 tests")
    assert {c["verdict"] for k in rep["kips"] for c in k["per_target"].values()} == {"incomplete"}
    # the failure seen so far is listed with its evidence
    [item] = [i for i in rep["non_passing"] if i["verdict"] == "fail"]
    assert item["evidence"]["exchanges"][0]["api"] == "EndTxn"
    assert item["requirements"][0]["oracle"].startswith("Bump the epoch")


def test_fewer_finished_than_expected_is_incomplete(tmp_path, catalog):
    rows = syn.PASSING_ROWS[:2]
    rep = build(syn.write_results(tmp_path / "out", rows, syn.run_json(expected=5, finished=2)), catalog)
    assert rep["summary"]["result"] == "incomplete" and cert.exit_code(rep) == 2


@pytest.mark.parametrize("status", ["internal_error", "interrupted"])
def test_interrupted_or_internal_error_with_all_rows_is_still_incomplete(tmp_path, catalog, status):
    rep = build(syn.write_results(tmp_path / "out", syn.PASSING_ROWS, syn.run_json(status)), catalog)
    assert rep["summary"]["result"] == "incomplete"


def test_unreachable_target_is_not_run(tmp_path, catalog):
    rep = build(syn.unreachable(tmp_path / "out"), catalog)
    assert rep["summary"]["result"] == "not-run" and cert.exit_code(rep) == 2
    assert rep["summary"]["banner"] == f"NOT RUN: target unreachable — {T}: connection refused at 127.0.0.1:9092"
    assert {c["verdict"] for k in rep["kips"] for c in k["per_target"].values()} == {"not run"}


def test_narrowed_run_without_failure_is_partial_scope(tmp_path, catalog):
    scope = {"narrowed": True, "suite_exprs": ["kip98"], "keyword": None, "explicit_tests": [],
             "collected": 5, "selected": 3, "deselected": 2}
    rows = syn.PASSING_ROWS[:3]
    rep = build(syn.write_results(tmp_path / "out", rows, syn.run_json(expected=3, finished=3, scope=scope)), catalog)
    assert rep["summary"]["result"] == "partial-scope" and cert.exit_code(rep) == 0
    assert rep["summary"]["banner"].startswith("PARTIAL SCOPE: --suite kip98 (3 of 5 tests selected)")
    k932 = kip(rep, "KIP-932")
    assert k932["per_target"][T]["verdict"] == "out of scope"
    req = next(r for r in rep["requirements"] if r["id"] == "KIP-932.SHARE.001")
    assert req["per_target"][T]["verdict"] == cert.OUT_OF_SCOPE
    assert not any(c["verdict"] == "untested" for k in rep["kips"] for c in k["per_target"].values())
    assert rep["statement"]["kips_in_scope"] == ["KIP-98"]


def test_narrowed_run_with_failure_fails(tmp_path, catalog):
    scope = {"narrowed": True, "keyword": "fenced", "collected": 5, "selected": 1, "deselected": 4}
    rows = [syn.row("kip98/test_txn.py::test_fenced[kafka-native:4.1]", ["KIP-98.TXN.002"], "fail", reason="boom")]
    rep = build(syn.write_results(tmp_path / "out", rows, syn.run_json(expected=1, finished=1, scope=scope)), catalog)
    assert rep["summary"]["result"] == "fail" and cert.exit_code(rep) == 1


def test_timed_out_test_is_a_labelled_failure(tmp_path, catalog):
    rows = [syn.row("kip98/test_txn.py::test_timeout[kafka-native:4.1]", ["KIP-98.TXN.003"], "fail",
                    reason="did not finish within 60 s", timed_out=True, deadline_s=60.0)]
    rep = build(syn.write_results(tmp_path / "out", rows, syn.run_json(expected=1, finished=1)), catalog)
    assert rep["summary"]["result"] == "fail" and rep["summary"]["timed_out"] == 1
    assert "1 of them timed out" in rep["summary"]["banner"]
    assert "timed out after 60.0 s" in render_html(rep)


def test_legacy_results_without_run_json(tmp_path, catalog):
    rep = build(syn.write_results(tmp_path / "out", syn.PASSING_ROWS, None), catalog)
    assert rep["summary"]["result"] == "pass"
    assert rep["summary"]["completeness"]["text"].startswith("completeness not recorded")
    assert "completeness not recorded" in "\n".join(cert.summary_lines(rep))


def test_legacy_keyword_run_is_partial_scope(tmp_path, catalog):
    results = syn.write_results(tmp_path / "out", syn.PASSING_ROWS, None)
    (results.parent / "run.json").write_text(json.dumps({"pytest_command": ["pytest", "-k", "kip98"]}))
    rep = build(results, catalog)
    assert rep["summary"]["result"] == "partial-scope"
    assert '-k "kip98"' in rep["summary"]["banner"]


def test_statement_names_cluster_catalog_and_build(tmp_path, catalog):
    rep = build(syn.passing(tmp_path / "out"), catalog)
    st = rep["statement"]
    assert st["targets"][0]["cluster_id"] == "MkU3OEVBNTcwNTJENDM2Qg"
    assert st["targets"][0]["finalized_features"] == {"transaction.version": 2, "share.version": 1}
    assert st["kipcheck"]["commit"].startswith("0123456789ab")
    assert st["clients"] == {"confluent_kafka": "2.16.1", "librdkafka": "2.16.0", "kio": "0.6.5"}
    concatenated = b"".join((catalog / n).read_bytes() for n in sorted(syn.CATALOG))
    assert st["catalog"]["sha256"] == hashlib.sha256(concatenated).hexdigest()
    assert st["catalog"]["files"] == ["kip-932.yaml", "kip-98.yaml"]  # byte order of the names
    assert [f.name for f in catalog_files(catalog)] == st["catalog"]["files"]
    assert catalog_sha256([]) is None


def test_evidence_never_repeats_the_reason(tmp_path, catalog):
    rep = build(syn.interrupted(tmp_path / "out"), catalog)
    [item] = [i for i in rep["non_passing"] if i["verdict"] == "fail"]
    assert item["reason"] is None  # the assertion holds it
    html = render_html(rep)
    assert html.count("answered NONE, expected INVALID_PRODUCER_EPOCH") == 1
    assert "reference answered INVALID_PRODUCER_EPOCH (47)" in html
    assert "completed EndTxn" in html and "/tmp/kafka-native-1/server.log" in html


def test_allure_link_by_uuid_and_by_name(tmp_path, catalog):
    out = tmp_path / "out"
    results = syn.interrupted(out)
    allure = out / "allure-results"
    allure.mkdir()
    (allure / "u-fenced-result.json").write_text(json.dumps(
        {"uuid": "u-fenced", "fullName": "kip98.test_txn#test_fenced", "name": "test_fenced[kafka-native:4.1]",
         "start": 1, "stop": 2}))
    (allure / "u-abort-result.json").write_text(json.dumps(
        {"uuid": "u-abort", "fullName": "kip98.test_txn#test_abort_invisible",
         "name": "test_abort_invisible[kafka-native:4.1]", "start": 5, "stop": 9}))
    rep = build(results, catalog)
    [item] = [i for i in rep["non_passing"] if i["verdict"] == "fail"]
    assert item["allure"] == "allure-results/u-fenced-result.json"
    assert evidence.allure_key("kip98/test_txn.py::test_abort_invisible[kafka-native:4.1]") == (
        "kip98.test_txn#test_abort_invisible", "test_abort_invisible[kafka-native:4.1]")
    rows = [{"nodeid": "kip98/test_txn.py::test_abort_invisible[kafka-native:4.1]"}]
    evidence.link_allure(rows, evidence.read_allure(allure))
    assert rows[0]["allure"]["file"] == "allure-results/u-abort-result.json"


def test_timeline_uses_row_times_and_lanes(tmp_path, catalog):
    rep = build(syn.passing(tmp_path / "out"), catalog)
    tl = rep["timeline"]
    assert tl["source"] == "rows" and tl["untimed"] == 1  # the self-check row has no times
    assert tl["lanes"] == ["gw0", "gw1"]
    first = min(tl["bars"], key=lambda b: b["start"])
    assert first["start"] == 0.0 and first["test"] == "test_abort_invisible"
    legacy = build(syn.write_results(tmp_path / "o2", [dict(r, start=None, stop=None) for r in syn.PASSING_ROWS],
                                     None), catalog)
    assert legacy["timeline"]["source"] == "sequential"
    gw0 = [b for b in legacy["timeline"]["bars"] if b["lane"] == "gw0"]
    assert [b["start"] for b in gw0] == sorted(b["start"] for b in gw0)


def test_html_prints_the_hash_of_the_json_written_with_it(tmp_path, catalog):
    rep = build(syn.passing(tmp_path / "out"), catalog)
    out = tmp_path / "report"
    cert.write_json(rep, out / "report.json")
    write_html(rep, out / "report.html")
    digest = hashlib.sha256((out / "report.json").read_bytes()).hexdigest()
    html = (out / "report.html").read_text()
    assert digest in html and "sha256sum report.json" in html
    # html without its json: no hash is claimed
    lone = tmp_path / "lone"
    write_html(rep, lone / "report.html")
    assert "was not written with this page" in (lone / "report.html").read_text()


def test_summary_lines_start_with_the_banner(tmp_path, catalog):
    rep = build(syn.interrupted(tmp_path / "out"), catalog)
    lines = cert.summary_lines(rep)
    assert lines[0].startswith("INCOMPLETE:")
    assert any("MUST" in ln for ln in lines)


def test_charts_are_inline_svg(tmp_path, catalog):
    html = render_html(build(syn.passing(tmp_path / "out"), catalog))
    assert len(re.findall(r"<svg class=\"chart\"", html)) == 2
    assert "<script src" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_exit_codes_table():
    assert outcome.EXIT_CODES == {"pass": 0, "partial-scope": 0, "fail": 1, "incomplete": 2, "not-run": 2,
                                  "no-results": 2}
