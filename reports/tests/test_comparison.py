"""The comparison table (reports/comparison.py) and the report's client-suite section, from
small synthetic results folders."""

import json

from reports import comparison
from reports.certification import build_report_from_dir
from reports.client_suites import unexpected
from reports.tests.synthetic import row, run_json, write_catalog, write_results

REF = "reference:nodes=3"
KN = "kafka-native:4.1"


def client_row(test: str, target: str, verdict: str = "pass", reason: str = "") -> dict:
    return {"nodeid": f"franz-go/{test}", "test": test, "client_suite": "franz-go", "client_version": "1.22.3",
            "target": target, "target_kind": target.split(":")[0], "target_version": None, "requirements": [],
            "verdict": verdict, "reason": reason, "duration_s": 1.5, "timed_out": False, "output_tail": ""}


def folder(tmp_path):
    rows = [
        row(f"kip98/test_txn.py::test_abort[{KN}]", ["KIP-98.TXN.001"]),
        row(f"kip98/test_txn.py::test_fenced[{KN}]", ["KIP-98.TXN.002"], "fail", reason="NONE"),
        row(f"kip98/test_txn.py::test_abort[{REF}]", ["KIP-98.TXN.001"], target=REF),
        row(f"kip98/test_txn.py::test_fenced[{REF}]", ["KIP-98.TXN.002"], target=REF),
    ]
    results = write_results(tmp_path, rows, run_json(command=["kipcheck", "certify", "--target", KN, "--target", REF,
                                                              "--clients", "franz-go"]))
    with open(results / "clients-franz-go.jsonl", "w", encoding="utf-8") as fh:
        for r in (client_row("TestPing", KN), client_row("TestTxnEtl", KN),
                  client_row("TestPing", REF), client_row("TestTxnEtl/range/848", REF, "skipped", "skipped by franz-go: x"),
                  client_row("TestTxnEtl", REF, "fail",
                             "expected failure (xfail): registered deviation DEV-700 (CLIENT.FRANZ-GO): y")):
            fh.write(json.dumps(r) + "\n")
    return results, write_catalog(tmp_path)


def test_client_rows_stay_out_of_the_kip_matrix_and_get_their_section(tmp_path):
    results, catalog = folder(tmp_path)
    report = build_report_from_dir(results, catalog)
    assert report["summary"]["tests_total"] == 4  # the conformance rows only
    by_target = {s["target"]: s["counts"] for s in report["clients"]["suites"]}
    assert by_target[KN] == {"pass": 2, "fail": 0, "registered": 0, "unexpected_pass": 0, "skipped": 0, "error": 0,
                             "not_run": 0}
    assert by_target[REF]["registered"] == 1 and by_target[REF]["skipped"] == 1
    assert [m["id"] for m in report["deviations"]["matched"]] == ["DEV-700"]
    assert unexpected(report["clients"]) == 0


def test_table_has_a_row_per_implementation_and_names_its_commands(tmp_path, capsys):
    results, catalog = folder(tmp_path)
    assert comparison.main([str(results), "--catalog", str(catalog)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| implementation | KIP-98 | KIP-932 |") and lines[0].endswith("| franz-go 1.22.3 |")
    kn = next(ln for ln in lines if ln.startswith(f"| `{KN}`"))
    ref = next(ln for ln in lines if ln.startswith(f"| `{REF}`"))
    assert "non-compliant (1/1/0/1)" in kn and kn.endswith("| 2/0/0 |")
    assert "partial" not in ref and ref.endswith("| 1/0/1 +1 registered |")
    assert lines[-1].startswith(f"Made by `kipcheck certify --target {KN} --target {REF} --clients franz-go`")
    assert f"table: `python -m reports.comparison {results} --catalog {catalog}`" in lines[-1]


def test_missing_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert comparison.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
