"""The certification report model (reports/certification.py) and its HTML rendering."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from registers.deviations import Deviation
from reports import certification as cert
from reports.html_report import render_html, write_html

KIP98 = """\
kip: KIP-98
title: Exactly Once Delivery and Transactional Messaging
seed: null
status: adopted
requirements:
  - id: KIP-98.IDEMP.001
    section: "Idempotent producer"
    level: must
    behaviour: Duplicate batches are not appended twice.
    oracle: Send the same batch twice; one copy in the log.
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
  - id: KIP-98.TXN.001
    section: "Transactions"
    level: must
    behaviour: Aborted records are invisible to read_committed consumers.
    oracle: Abort, then fetch read_committed.
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
  - id: KIP-98.TXN.002
    section: "Transactions"
    level: should
    behaviour: "Uses <script>alert('x')</script> & friends"
    oracle: Nothing.
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
"""

KIP932 = """\
kip: KIP-932
title: Queues for Kafka
seed: null
status: adopted
requirements:
  - id: KIP-932.SHARE.001
    section: "Share groups"
    level: must
    behaviour: A share group delivers each record to one member at a time.
    oracle: Two members, count deliveries.
    implemented_in: {apache-kafka: ">=4.1", reference: true}
  - id: KIP-932.SHARE.002
    section: "Share groups"
    level: must
    behaviour: Acquisition locks time out.
    oracle: Wait for the lock duration.
    implemented_in: {apache-kafka: ">=4.1", reference: true}
"""

PROTO = """\
kip: PROTO
title: Protocol foundations
seed: null
status: protocol
requirements:
  - id: PROTO.APIVER.001
    section: "ApiVersions"
    level: must
    behaviour: ApiVersions answers with NONE.
    oracle: Send it.
    implemented_in: {apache-kafka: ">=0.10.0", reference: true}
"""

REGISTER = """\
divergences:
  - id: DIV-001
    requirement: KIP-98.TXN.001
    kip_text: "The KIP says <b>X</b>"
    apache_kafka: {versions: ">=3.0", behaviour: "Kafka does Y"}
    reference: kafka
    evidence: {test: "test_abort_visibility", observation: "Y seen on 3.9"}
"""


def row(nodeid, target, reqs, verdict, reason="", divergences=(), duration=0.5, kind=None):
    return {
        "nodeid": nodeid,
        "test": nodeid.rsplit("::", 1)[-1],
        "suite": nodeid.split("::", 1)[0],
        "target": target,
        "target_kind": kind or target.split(":", 1)[0],
        "target_version": None,
        "requirements": list(reqs),
        "verdict": verdict,
        "reason": reason,
        "duration_s": duration,
        "divergences": list(divergences),
    }


REF = "reference"
KN = "kafka-native:4.1.0"


def sample_rows():
    return [
        # KIP-98.IDEMP.001: passes on both.
        row("s/test_kip98.py::test_dedup", REF, ["KIP-98.IDEMP.001"], "pass"),
        row("s/test_kip98.py::test_dedup", KN, ["KIP-98.IDEMP.001"], "pass",
            divergences=[{"requirement": "KIP-98.IDEMP.001", "what": "error code on duplicate",
                          "target": "DUPLICATE_SEQUENCE_NUMBER", "reference": "NONE"}]),
        # KIP-98.TXN.001: one test passes, another fails on kafka-native -> fail there.
        row("s/test_kip98.py::test_abort", REF, ["KIP-98.TXN.001"], "pass"),
        row("s/test_kip98.py::test_abort", KN, ["KIP-98.TXN.001"], "pass"),
        row("s/test_kip98.py::test_abort_read", REF, ["KIP-98.TXN.001"], "pass"),
        row("s/test_kip98.py::test_abort_read", KN, ["KIP-98.TXN.001"], "fail", reason="saw aborted record <x>"),
        # KIP-98.TXN.002: no test at all -> untested.
        # KIP-932: not supported on kafka-native; SHARE.002 incomplete on reference (pass + skipped).
        row("s/test_share.py::test_one_member", REF, ["KIP-932.SHARE.001"], "pass"),
        row("s/test_share.py::test_one_member", KN, ["KIP-932.SHARE.001"], "not_supported",
            reason="share.version not enabled"),
        row("s/test_share.py::test_lock", REF, ["KIP-932.SHARE.002"], "pass"),
        row("s/test_share.py::test_lock_slow", REF, ["KIP-932.SHARE.002"], "skipped", reason="slow"),
        row("s/test_share.py::test_lock", KN, ["KIP-932.SHARE.002"], "not_supported", reason="no share groups"),
        # PROTO: error on kafka-native.
        row("s/test_proto.py::test_apiversions", REF, ["PROTO.APIVER.001"], "pass"),
        row("s/test_proto.py::test_apiversions", KN, ["PROTO.APIVER.001"], "error", reason="connection refused"),
    ]


@pytest.fixture()
def catalog_dir(tmp_path: Path) -> Path:
    d = tmp_path / "catalog"
    d.mkdir()
    (d / "kip-98.yaml").write_text(KIP98)
    (d / "kip-932.yaml").write_text(KIP932)
    (d / "protocol.yaml").write_text(PROTO)
    return d


@pytest.fixture()
def register_file(tmp_path: Path) -> Path:
    p = tmp_path / "divergences.yaml"
    p.write_text(REGISTER)
    return p


def write_results(d: Path, rows, targets=None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    half = len(rows) // 2
    for worker, chunk in (("gw0", rows[:half]), ("gw1", rows[half:])):
        with open(d / f"results-{worker}.jsonl", "w") as fh:
            for r in chunk:
                fh.write(json.dumps(r) + "\n")
    for worker, info in (targets or {}).items():
        (d / f"targets-{worker}.json").write_text(json.dumps(info))
    return d


TARGETS = {
    "gw0": {
        REF: {
            "describe": {"spec": REF, "kind": "reference", "version": "reference", "nodes": 1,
                         "bootstrap": "127.0.0.1:40001", "startup_seconds": 0.2},
            "capabilities": {"api_versions": {"18": [0, 4]}, "finalized_features": {"transaction.version": 2},
                             "supported_features": {}},
        }
    },
    "gw1": {
        REF: {
            "describe": {"spec": REF, "kind": "reference", "version": "reference", "nodes": 1,
                         "bootstrap": "127.0.0.1:40002", "startup_seconds": 0.4},
            "capabilities": {"finalized_features": {"transaction.version": 2, "share.version": 1}},
        },
        KN: {
            "describe": {"spec": KN, "kind": "kafka-native", "version": "4.1.0", "nodes": 3,
                         "bootstrap": "127.0.0.1:9092", "startup_seconds": 12.5},
            "capabilities": {"finalized_features": {"transaction.version": 2, "metadata.version": 27}},
        },
    },
}


DEVIATIONS = """\
deviations:
  - id: DEV-001
    target: librdkafka-mock
    test: test_apiversions
    requirement: PROTO.APIVER.001
    observed: Answers with a body that is not <v0>.
    evidence: Raw ApiVersions v3 returned 17 bytes & a v0 decode failed.
  - id: DEV-002
    target: librdkafka-mock
    versions: ">=2.0"
    test: s/test_kip98.py::test_dedup
    requirement: KIP-98.IDEMP.001
    observed: Appends the duplicate batch.
    evidence: test_dedup[librdkafka-mock] saw two copies.
  - id: DEV-003
    target: kafka-native
    test: test_lock
    requirement: KIP-932.SHARE.002
    observed: Never times the lock out.
    evidence: Waited twice the lock duration.
"""


@pytest.fixture()
def deviations_file(tmp_path: Path) -> Path:
    p = tmp_path / "deviations.yaml"
    p.write_text(DEVIATIONS)
    return p


@pytest.fixture()
def report(tmp_path: Path, catalog_dir: Path, register_file: Path, deviations_file: Path) -> dict:
    results = write_results(tmp_path / "out" / "results", sample_rows(), TARGETS)
    return cert.build_report_from_dir(results, catalog_dir, register_file, deviations_path=deviations_file)


def req(report, rid):
    return next(r for r in report["requirements"] if r["id"] == rid)


def kip(report, name):
    return next(k for k in report["kips"] if k["kip"] == name)


# ---------------------------------------------------------------------------------
# aggregation


def test_requirement_verdicts_per_target(report):
    assert req(report, "KIP-98.IDEMP.001")["per_target"][REF]["verdict"] == "pass"
    assert req(report, "KIP-98.IDEMP.001")["per_target"][KN]["verdict"] == "pass"
    # one failing covering test makes the requirement fail, with the failing reason
    txn = req(report, "KIP-98.TXN.001")["per_target"][KN]
    assert txn["verdict"] == "fail"
    assert "saw aborted record" in txn["reason"]
    assert req(report, "KIP-98.TXN.001")["per_target"][REF]["verdict"] == "pass"
    # no test -> untested everywhere
    for spec in (REF, KN):
        assert req(report, "KIP-98.TXN.002")["per_target"][spec]["verdict"] == "untested"
    # not supported is never a pass
    assert req(report, "KIP-932.SHARE.001")["per_target"][KN]["verdict"] == "not_supported"
    assert "share.version" in req(report, "KIP-932.SHARE.001")["per_target"][KN]["reason"]
    # a pass plus a skipped covering test is not a pass
    assert req(report, "KIP-932.SHARE.002")["per_target"][REF]["verdict"] == "incomplete"
    # errors count as failures
    assert req(report, "PROTO.APIVER.001")["per_target"][KN]["verdict"] == "fail"


def test_requirement_verdict_rules():
    t = lambda v: {"verdict": v, "test": "t", "reason": ""}  # noqa: E731
    assert cert.requirement_verdict([])[0] == "untested"
    assert cert.requirement_verdict([t("pass"), t("pass")])[0] == "pass"
    assert cert.requirement_verdict([t("pass"), t("error")])[0] == "fail"
    assert cert.requirement_verdict([t("not_supported"), t("fail")])[0] == "fail"
    assert cert.requirement_verdict([t("not_supported"), t("not_supported")])[0] == "not_supported"
    assert cert.requirement_verdict([t("not_supported"), t("skipped")])[0] == "not_supported"
    assert cert.requirement_verdict([t("pass"), t("not_supported")])[0] == "incomplete"
    assert cert.requirement_verdict([t("skipped")])[0] == "untested"


def test_kip_matrix_counts_and_words(report):
    k98 = kip(report, "KIP-98")
    assert k98["per_target"][REF] == {
        "pass": 2, "fail": 0, "not_supported": 0, "incomplete": 0, "untested": 1, "out_of_scope": 0, "verdict": "compliant"
    }
    assert k98["per_target"][KN]["verdict"] == "non-compliant"
    assert k98["per_target"][KN]["fail"] == 1
    assert k98["untested"] == ["KIP-98.TXN.002"]
    k932 = kip(report, "KIP-932")
    assert k932["per_target"][KN]["verdict"] == "not supported"
    assert k932["per_target"][KN]["not_supported"] == 2
    assert k932["per_target"][REF]["verdict"] == "partial"  # pass + incomplete
    assert kip(report, "PROTO")["per_target"][KN]["verdict"] == "non-compliant"


def test_kip_verdict_words():
    z = dict.fromkeys(cert.REQ_VERDICTS, 0)
    assert cert.kip_verdict({**z, "untested": 3}) == "untested"
    assert cert.kip_verdict({**z, "pass": 2, "untested": 1}) == "compliant"
    assert cert.kip_verdict({**z, "pass": 2, "fail": 1}) == "non-compliant"
    assert cert.kip_verdict({**z, "pass": 2, "not_supported": 1}) == "partial"
    assert cert.kip_verdict({**z, "not_supported": 2, "untested": 1}) == "not supported"
    assert cert.kip_verdict({**z, "incomplete": 1}) == "partial"


def test_matrix_row_order(report):
    assert [k["kip"] for k in report["kips"]] == ["KIP-98", "KIP-932", "PROTO"]
    order = ["PROTO", "KIP-1289", "KIP-932", "KIP-DRAFT-TXN", "KIP-447", "KIP-98"]
    assert sorted(order, key=cert.kip_sort_key) == ["KIP-98", "KIP-447", "KIP-DRAFT-TXN", "KIP-932", "KIP-1289", "PROTO"]


def test_targets_merged_over_workers(report):
    specs = [t["spec"] for t in report["targets"]]
    assert specs == [REF, KN]
    ref = report["targets"][0]
    assert ref["finalized_features"] == {"transaction.version": 2, "share.version": 1}
    assert ref["startup_seconds"] == 0.4  # slowest worker start
    assert ref["api_versions"] == {"18": [0, 4]}
    kn = report["targets"][1]
    assert (kn["kind"], kn["version"], kn["nodes"]) == ("kafka-native", "4.1.0", 3)
    assert kn["tests"]["fail"] == 1 and kn["tests"]["error"] == 1 and kn["tests"]["not_supported"] == 2


def test_divergences_dynamic_and_static(report):
    observed = report["divergences"]["observed"]
    assert len(observed) == 1
    o = observed[0]
    assert (o["target"], o["verdict"], o["observed"], o["reference"]) == (KN, "pass", "DUPLICATE_SEQUENCE_NUMBER", "NONE")
    reg = report["divergences"]["register"]
    assert reg[0]["id"] == "DIV-001"
    assert reg[0]["apache_kafka"]["versions"] == ">=3.0"
    assert reg[0]["evidence"]["test"] == "test_abort_visibility"


def test_summary_and_exit_code(report):
    s = report["summary"]
    assert s["result"] == "fail"
    assert s["tests"]["pass"] == 8 and s["tests"]["fail"] == 1 and s["tests"]["error"] == 1
    assert s["requirements_total"] == 6 and s["requirements_untested"] == 1
    assert cert.exit_code(report) == 1


def test_all_passing_run_exits_zero(tmp_path, catalog_dir):
    rows = [r for r in sample_rows() if r["target"] == REF and r["verdict"] in ("pass", "skipped")]
    rows.append(row("s/test_share.py::test_one_member", KN, ["KIP-932.SHARE.001"], "not_supported", "nope"))
    rep = cert.build_report_from_dir(write_results(tmp_path / "r", rows), catalog_dir, tmp_path / "none.yaml")
    assert rep["summary"]["result"] == "pass"
    assert cert.exit_code(rep) == 0
    # not supported does not turn into a pass
    assert kip(rep, "KIP-932")["per_target"][KN]["verdict"] == "not supported"


def test_empty_results_are_no_results(tmp_path, catalog_dir):
    (tmp_path / "r").mkdir()
    rep = cert.build_report_from_dir(tmp_path / "r", catalog_dir, None, target_order=[REF])
    assert rep["summary"]["result"] == "no-results"
    assert cert.exit_code(rep) == 2
    assert kip(rep, "KIP-98")["per_target"][REF]["verdict"] == "untested"
    assert any("no test results" in p for p in rep["problems"])


def test_uncatalogued_ids_and_tests_without_requirements(tmp_path, catalog_dir):
    rows = [
        row("s/t.py::test_a", REF, ["KIP-98.NOPE.009"], "pass"),
        row("s/t.py::test_b", REF, [], "fail", reason="boom"),
    ]
    rep = cert.build_report_from_dir(write_results(tmp_path / "r", rows), catalog_dir, None)
    assert rep["uncatalogued_requirements"] == ["KIP-98.NOPE.009"]
    assert rep["kips"][-1]["kip"] == cert.UNCATALOGUED
    assert rep["tests_without_requirements"][0]["nodeid"] == "s/t.py::test_b"
    assert rep["summary"]["result"] == "fail"  # a failing test counts even without a requirement
    assert rep["summary"]["requirements_total"] == 6  # uncatalogued ids are not counted as catalog


def test_malformed_rows_are_reported_not_fatal(tmp_path, catalog_dir):
    d = write_results(tmp_path / "r", sample_rows()[:2])
    with open(d / "results-gw9.jsonl", "w") as fh:
        fh.write("{not json\n")
        fh.write(json.dumps(row("s/t.py::test_x", REF, ["PROTO.APIVER.001"], "weird")) + "\n")
    rep = cert.build_report_from_dir(d, catalog_dir, None)
    assert any("unreadable result row" in p for p in rep["problems"])
    # an unknown verdict is never a pass
    assert req(rep, "PROTO.APIVER.001")["per_target"][REF]["verdict"] == "fail"


def test_duplicate_rows_last_wins(tmp_path, catalog_dir):
    rows = [row("s/t.py::test_a", REF, ["PROTO.APIVER.001"], "fail"), row("s/t.py::test_a", REF, ["PROTO.APIVER.001"], "pass")]
    rep = cert.build_report_from_dir(write_results(tmp_path / "r", rows), catalog_dir, None)
    assert rep["summary"]["tests_total"] == 1
    assert req(rep, "PROTO.APIVER.001")["per_target"][REF]["verdict"] == "pass"


def test_run_metadata_is_read(tmp_path, catalog_dir):
    d = write_results(tmp_path / "out" / "results", sample_rows())
    (tmp_path / "out" / "run.json").write_text(json.dumps({"wall_time_s": 12.5, "targets": [KN, REF]}))
    rep = cert.build_report_from_dir(d, catalog_dir, None)
    assert rep["run"]["wall_time_s"] == 12.5
    assert [t["spec"] for t in rep["targets"]] == [KN, REF]  # requested order


def test_invalid_catalog_falls_back_with_a_problem(tmp_path, catalog_dir):
    (catalog_dir / "broken.yaml").write_text("kip: KIP-1\ntitle: x\nseed: null\nstatus: bogus\nrequirements: []\n")
    rep = cert.build_report_from_dir(write_results(tmp_path / "r", sample_rows()), catalog_dir, None)
    assert any("invalid requirement catalog" in p for p in rep["problems"])
    assert kip(rep, "KIP-98")["per_target"][REF]["pass"] == 2


def test_packaged_catalog_loads():
    # Validation is conformance/tests' business; here: the report can read what ships.
    docs = cert.load_catalog_docs(strict=False)
    assert docs, "registers/catalog/*.yaml should not be empty"
    assert all(d["requirements"] for d in docs)


# ---------------------------------------------------------------------------------
# known target deviations (conformance/deviations.yaml)

MOCK = "librdkafka-mock"


def xfail_reason(dev_id, req, observed):
    """The reason the conformance plugin writes for a registered deviation's strict xfail."""
    return f"expected failure (xfail): registered deviation {dev_id} ({req}): {observed}"


def mock_rows():
    return [
        # PROTO.APIVER.001: the only covering test fails as registered (DEV-001).
        row("s/test_proto.py::test_apiversions", MOCK, ["PROTO.APIVER.001"], "fail",
            reason=xfail_reason("DEV-001", "PROTO.APIVER.001", "Answers with a body that is not <v0>.")),
        # KIP-98.IDEMP.001: the deviation did not occur (strict xpass).
        row("s/test_kip98.py::test_dedup", MOCK, ["KIP-98.IDEMP.001"], "fail",
            reason="[XPASS(strict)] registered deviation DEV-002 (KIP-98.IDEMP.001): Appends the duplicate batch."),
        # KIP-98.TXN.001: one covering test is a known deviation, another fails unexplained.
        row("s/test_kip98.py::test_abort", MOCK, ["KIP-98.TXN.001"], "fail",
            reason=xfail_reason("DEV-009", "KIP-98.TXN.001", "not in the register")),
        row("s/test_kip98.py::test_abort_read", MOCK, ["KIP-98.TXN.001"], "fail", reason="saw aborted record"),
        # KIP-932.SHARE.001 passes; a failure that merely mentions a DEV id is not a known deviation.
        row("s/test_share.py::test_one_member", MOCK, ["KIP-932.SHARE.001"], "pass"),
        row("s/test_share.py::test_lock", MOCK, ["KIP-932.SHARE.002"], "fail",
            reason="AssertionError: unlike registered deviation DEV-003, the lock never expired"),
    ]


@pytest.fixture()
def mock_report(tmp_path, catalog_dir, register_file, deviations_file) -> dict:
    results = write_results(tmp_path / "mock" / "results", mock_rows())
    return cert.build_report_from_dir(results, catalog_dir, register_file, target_order=[MOCK],
                                      deviations_path=deviations_file)


def test_deviation_of_reads_the_plugin_reasons():
    dev = Deviation("DEV-004", MOCK, "test_corrupt_batch_rejected", "PROTO.BAD.001", "appends it", "seen")
    # exactly how conformance/collection.py words the strict xfail and pytest the strict xpass
    assert cert.deviation_of("fail", f"expected failure (xfail): {dev.reason}") == {
        "id": "DEV-004", "status": cert.EXPECTED_FAILURE}
    assert cert.deviation_of("fail", "[XPASS(strict)] " + dev.reason) == {
        "id": "DEV-004", "status": cert.UNEXPECTED_PASS}
    assert cert.deviation_of("pass", f"expected failure (xfail): {dev.reason}") is None
    assert cert.deviation_of("error", f"expected failure (xfail): {dev.reason}") is None
    assert cert.deviation_of("fail", f"AssertionError: {dev.reason}") is None
    assert cert.deviation_of("fail", "expected failure (xfail): flaky") is None
    assert cert.deviation_of("fail", "") is None and cert.deviation_of("fail", None) is None


def test_known_deviation_keeps_the_fail_verdict(mock_report):
    rep = mock_report
    apiver = req(rep, "PROTO.APIVER.001")["per_target"][MOCK]
    assert apiver["verdict"] == "fail"  # a known deviation is still non-compliance
    assert apiver["known_deviations"] == ["DEV-001"]
    assert apiver["tests"][0]["deviation"] == {"id": "DEV-001", "status": cert.EXPECTED_FAILURE}
    assert "registered deviation DEV-001" in apiver["reason"]
    assert kip(rep, "PROTO")["per_target"][MOCK]["verdict"] == "non-compliant"
    assert rep["summary"]["result"] == "fail" and cert.exit_code(rep) == 1
    assert rep["summary"]["per_target"][MOCK]["verdict"] == "non-compliant"
    # mixed: the unexplained failure is still there next to the known one
    txn = req(rep, "KIP-98.TXN.001")["per_target"][MOCK]
    assert txn["verdict"] == "fail" and txn["known_deviations"] == ["DEV-009"]
    assert [t["deviation"] for t in txn["tests"]] == [{"id": "DEV-009", "status": cert.EXPECTED_FAILURE}, None]
    # a strict xpass names the entry but is not a known deviation
    dedup = req(rep, "KIP-98.IDEMP.001")["per_target"][MOCK]
    assert dedup["verdict"] == "fail" and dedup["known_deviations"] == []
    assert dedup["tests"][0]["deviation"] == {"id": "DEV-002", "status": cert.UNEXPECTED_PASS}
    # a reason that merely mentions a DEV id is not matched
    lock = req(rep, "KIP-932.SHARE.002")["per_target"][MOCK]
    assert lock["known_deviations"] == [] and lock["tests"][0]["deviation"] is None
    # passing requirements carry no deviation
    assert req(rep, "KIP-932.SHARE.001")["per_target"][MOCK]["known_deviations"] == []


def test_deviation_register_and_matches_in_json(mock_report):
    d = mock_report["deviations"]
    assert [g["id"] for g in d["register"]] == ["DEV-001", "DEV-002", "DEV-003"]
    assert d["register"][0] == {
        "id": "DEV-001", "target": MOCK, "versions": None, "test": "test_apiversions",
        "requirement": "PROTO.APIVER.001", "observed": "Answers with a body that is not <v0>.",
        "evidence": "Raw ApiVersions v3 returned 17 bytes & a v0 decode failed.", "flaky": None, "signature": None,
    }
    assert d["register"][1]["versions"] == ">=2.0"
    assert [(m["id"], m["status"], m["test"]) for m in d["matched"]] == [
        ("DEV-009", cert.EXPECTED_FAILURE, "test_abort"),
        ("DEV-002", cert.UNEXPECTED_PASS, "test_dedup"),
        ("DEV-001", cert.EXPECTED_FAILURE, "test_apiversions"),
    ]
    m = d["matched"][-1]
    assert (m["target"], m["target_kind"], m["requirements"], m["verdict"]) == (MOCK, MOCK, ["PROTO.APIVER.001"], "fail")
    problems = "\n".join(mock_report["problems"])
    assert "registered deviation DEV-002 did not occur on librdkafka-mock" in problems
    assert "missing from the deviation register: DEV-009" in problems


def test_deviation_register_missing_or_invalid(tmp_path, catalog_dir):
    results = write_results(tmp_path / "r", mock_rows())
    rep = cert.build_report_from_dir(results, catalog_dir, None, deviations_path=tmp_path / "none.yaml")
    assert rep["deviations"]["register"] == []
    assert len(rep["deviations"]["matched"]) == 3  # rows still name their deviations
    assert "The deviation register is empty or missing." not in render_html(rep)  # unregistered ids are listed
    bad = tmp_path / "bad.yaml"
    bad.write_text("deviations:\n  - id: DEV-1\n    target: x\n")
    rep = cert.build_report_from_dir(results, catalog_dir, None, deviations_path=bad)
    assert rep["deviations"]["register"] == []
    assert any(p.startswith("deviation register unreadable: ") and "id must look like DEV-001" in p
               for p in rep["problems"])
    empty = cert.build_report_from_dir(write_results(tmp_path / "e", sample_rows()[:2]), catalog_dir, None,
                                       deviations_path=tmp_path / "none.yaml")
    assert "The deviation register is empty or missing." in render_html(empty)


def test_packaged_deviation_register_loads():
    devs = cert.load_deviation_register()
    assert devs and all(d["id"].startswith("DEV-") and d["target"] and d["test"] for d in devs)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def _cell(html: str, rid: str) -> str:
    """The requirement row of `rid` in the Requirements table."""
    table = html[html.index('id="reqs"'):]
    start = table.index(f"<td><code>{rid}</code></td>")
    return table[start:table.index("</tr>", start)]


def test_html_known_deviations_section(mock_report):
    html = render_html(mock_report)
    assert 'href="#deviations">Known target deviations</a>' in html  # table of contents
    section = html[html.index('<h2 id="deviations">'):html.index('<h2 id="divergences">')]
    assert "Known target deviations" in section
    for head in ("id", "target", "requirement", "test", "observed", "evidence"):
        assert f"<th>{head}</th>" in section
    assert '<code id="dev-DEV-001">DEV-001</code>' in section
    assert "<code>test_apiversions</code>" in section and "<code>PROTO.APIVER.001</code>" in section
    assert "Answers with a body that is not &lt;v0&gt;." in section  # escaped
    assert "17 bytes &amp; a v0 decode failed" in section
    assert "&gt;=2.0" in section  # version constraint shown
    text = _text(section)
    assert "failed as registered on librdkafka-mock" in text
    assert "did not occur (the test passed; strict XPASS) on librdkafka-mock" in text
    assert "no target of this kind in this run" in text  # DEV-003 is for kafka-native
    assert '<code id="dev-DEV-009">DEV-009</code>' in section and "not in the deviation register" in section
    assert "failing test result(s) are" in html and "registered known target deviations" in html


def test_html_failing_cell_names_the_known_deviation(mock_report):
    html = render_html(mock_report)
    cell = _cell(html, "PROTO.APIVER.001")
    assert "fail (known deviation DEV-001)" in _text(cell)
    assert '<a href="#dev-DEV-001">DEV-001</a>' in cell
    assert '<span class="badge v-fail"' in cell  # the verdict badge stays "fail"
    assert 'data-status="fail"' in html[html.rindex("<tr", 0, html.index(cell)):html.index(cell)]
    mixed = _text(_cell(html, "KIP-98.TXN.001"))
    assert "fail (known deviation DEV-009; + 1 other failing test(s))" in mixed
    assert "fail (DEV-002 did not occur (strict XPASS))" in _text(_cell(html, "KIP-98.IDEMP.001"))
    lock = _text(_cell(html, "KIP-932.SHARE.002"))
    assert "known deviation" not in lock and "fail" in lock
    # every link to a deviation has a target on the page
    for ref in set(re.findall(r'href="#(dev-[^"]+)"', html)):
        assert f'id="{ref}"' in html


def test_html_without_deviations_is_unchanged_in_cells(report):
    html = render_html(report)
    assert "known deviation DEV-" not in html  # no row of the sample run names a deviation
    assert "Known target deviations" in html


# ---------------------------------------------------------------------------------
# JSON schema


def test_json_schema_is_stable(report, tmp_path):
    path = cert.write_json(report, tmp_path / "report.json")
    data = json.loads(path.read_text())
    assert tuple(data) == cert.REPORT_KEYS
    assert data["schema"] == "kipcheck-certification-report"
    assert data["schema_version"] == 6
    assert set(data["summary"]) == {
        "result", "banner", "completeness", "tests", "tests_total", "timed_out", "requirements_total",
        "requirements_tested", "requirements_untested", "per_target",
    }
    assert set(data["kips"][0]) == {"kip", "title", "status", "seed", "requirements", "untested", "out_of_scope",
                                    "per_target", "must", "must_total"}
    assert set(data["kips"][0]["per_target"][REF]) == {*cert.REQ_VERDICTS, cert.OUT_OF_SCOPE, "verdict"}
    assert set(data["requirements"][0]) == {
        "id", "kip", "section", "level", "behaviour", "oracle", "implemented_in", "in_catalog", "tested",
        "tests", "per_target",
    }
    assert set(data["requirements"][0]["per_target"][REF]) == {"verdict", "reason", "known_deviations", "tests"}
    assert set(data["requirements"][0]["per_target"][REF]["tests"][0]) == {
        "nodeid", "verdict", "reason", "duration_s", "deviation", "timed_out"
    }
    assert set(data["targets"][0]) == {
        "spec", "kind", "version", "nodes", "bootstrap", "cluster_id", "security_protocol", "startup_seconds",
        "finalized_features",
        "supported_features", "api_versions", "described", "start_error", "skip_reason", "errors",
        "tests", "tests_total", "test_duration_s",
    }
    assert set(data["divergences"]) == {"observed", "register"}
    assert set(data["divergences"]["observed"][0]) == {
        "target", "nodeid", "test", "verdict", "requirement", "what", "observed", "reference"
    }
    assert set(data["deviations"]) == {"register", "matched"}
    assert set(data["deviations"]["register"][0]) == {
        "id", "target", "versions", "test", "requirement", "observed", "evidence", "flaky", "signature"
    }
    assert set(data["host"]) == {"hostname", "platform", "python"}


def test_json_schema_of_matched_deviations(tmp_path, catalog_dir, deviations_file):
    rep = cert.build_report_from_dir(write_results(tmp_path / "r", mock_rows()), catalog_dir, None,
                                     deviations_path=deviations_file)
    data = json.loads(cert.write_json(rep, tmp_path / "report.json").read_text())
    assert set(data["deviations"]["matched"][0]) == {
        "id", "status", "target", "target_kind", "nodeid", "test", "requirements", "verdict"
    }


# ---------------------------------------------------------------------------------
# HTML


def test_html_contains_matrix_and_verdicts(report):
    html = render_html(report)
    assert html.startswith("<!DOCTYPE html>")
    assert 'id="matrix"' in html and 'class="matrix"' in html
    for word in ("compliant", "non-compliant", "not supported", "partial"):
        assert f'<span class="word">{word}</span>' in html
    assert "KIP-98" in html and "KIP-932" in html and "PROTO" in html
    assert "kafka-native:4.1.0" in html
    assert "passes, but differs from the reference here" in html
    assert "DUPLICATE_SEQUENCE_NUMBER" in html
    assert "DIV-001" in html
    assert "KIP-98.TXN.002" in html  # listed as untested
    assert "transaction.version" in html and "share.version" in html


def test_html_escapes_content(report):
    html = render_html(report)
    assert "<script>alert('x')</script>" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "The KIP says &lt;b&gt;X&lt;/b&gt;" in html
    assert "saw aborted record &lt;x&gt;" in html
    # only our own inline script block
    assert html.count("<script>") == 1


def test_html_is_self_contained(report, tmp_path):
    path = write_html(report, tmp_path / "report.html")
    html = path.read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    assert "<link" not in html
    assert "@import" not in html
    assert "<style>" in html and "--pass" in html  # CSS inlined


def test_html_with_no_targets_and_no_results(tmp_path, catalog_dir):
    (tmp_path / "r").mkdir()
    rep = cert.build_report_from_dir(tmp_path / "r", catalog_dir, None)
    html = render_html(rep)
    assert "NO RESULTS" in html


def test_plugin_target_file_format_and_session(tmp_path, catalog_dir):
    """The plugin writes {"worker", "targets": {spec: {spec, kind, describe, capabilities,
    start_error, skip_reason}}} and results/session.json."""
    d = write_results(tmp_path / "out" / "results", [
        row("s/t.py::test_a[kafka-native:9.9]", "kafka-native:9.9", ["PROTO.APIVER.001"], "error",
            reason="setup: TargetError: target kafka-native:9.9 failed to start: no such version"),
    ])
    (d / "targets-main.json").write_text(json.dumps({"worker": "main", "targets": {
        "kafka-native:9.9": {"spec": "kafka-native:9.9", "kind": "kafka-native",
                             "start_error": "TargetError: no such version", "skip_reason": None},
        REF: {"spec": REF, "kind": "reference",  # started only as differential oracle
              "describe": {"spec": REF, "kind": "reference", "nodes": 1, "startup_seconds": 0.1},
              "capabilities": {"error": "ConnectionError: boom"}, "start_error": None, "skip_reason": None},
    }}))
    (d / "session.json").write_text(json.dumps({
        "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:00:07.5+00:00",
        "exitstatus": 1, "targets": ["kafka-native:9.9"], "args": ["--target", "kafka-native:9.9"],
    }))
    rep = cert.build_report_from_dir(d, catalog_dir, None)
    assert [t["spec"] for t in rep["targets"]] == ["kafka-native:9.9"]  # no oracle column
    t = rep["targets"][0]
    assert t["kind"] == "kafka-native" and t["start_error"] == "TargetError: no such version"
    assert rep["run"]["wall_time_s"] == 7.5 and rep["run"]["pytest_exit_code"] == 1
    assert any("failed to start" in p for p in rep["problems"])
    assert cert.exit_code(rep) == 2  # infrastructure, not a verdict
    html = render_html(rep)
    assert "failed to start: TargetError: no such version" in html
    # a (reference-only) bare target file still merges, and a probe error is kept
    into = {}
    cert.merge_target_descriptions(into, {"worker": "w", "targets": {REF: {"capabilities": {"error": "x"}}}})
    assert into[REF]["errors"] == ["capabilities: x"]


def test_summary_lines(report):
    text = "\n".join(cert.summary_lines(report))
    assert "KIP-98" in text and "non-compliant" in text and KN in text
    assert textwrap.dedent(text)


def test_packaged_flaky_entries_show_their_rate_and_signature(mock_report):
    """The register's flaky entries reach the report with the rate and the one failure
    they excuse, so a reader sees why a red row of that test would still count."""
    signed = [d for d in cert.load_deviation_register() if d["signature"] and d["flaky"]]
    assert signed  # strict entries may carry a signature too (it narrows what they excuse)
    html = render_html({**mock_report, "deviations": {"register": signed, "matched": []}})
    section = html[html.index('<h2 id="deviations">'):html.index('<h2 id="divergences">')]
    assert "flaky: " in section and "only a failure matching <code>" in section
