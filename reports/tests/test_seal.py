"""The evidence seal (reports/seal.py): a sealed results folder reads as before; deleting,
adding, editing or trimming rows, dropping or adding a worker file, editing run.json's counts
or the seal itself is refused with one line naming the file and the row; a signed seal checks
against the vendor's key only. Also: the matrix columns of a rebuilt `external:` run are the
requested targets, never the reference the plugin started as differential oracle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reports import seal
from reports.certification import build_report, build_report_from_dir
from reports.results import read_results
from reports.tests import synthetic as syn
from reports.verdicts import NO_TARGET

FAILING = syn.row("kip98/test_txn.py::test_fenced_again[kafka-native:4.1]", ["KIP-98.TXN.002"], "fail",
                  reason="AssertionError: EndTxn answered NONE", worker="gw1")


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A sealed failing run: four rows in results-gw0.jsonl, two in results-gw1.jsonl."""
    d = syn.write_results(tmp_path / "out", [*syn.PASSING_ROWS, FAILING], syn.run_json(expected=6, finished=6))
    seal.write(d)
    return d


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _edit(path: Path, change: Callable[[list[str]], list[str]]) -> None:
    path.write_text("".join(change(_lines(path))), encoding="utf-8")


def _flip(line: str) -> str:
    row = json.loads(line)
    row["verdict"] = "pass"
    return json.dumps(row) + "\n"


def _run_json(d: Path, **changes) -> None:
    run = json.loads((d / "run.json").read_text())
    run.update(changes)
    (d / "run.json").write_text(json.dumps(run))


TAMPERING = {
    "delete a row": (lambda d: _edit(d / "results-gw1.jsonl", lambda ls: ls[:0] + ls[1:]),
                     "row 1 of results-gw1.jsonl (test kip932/test_share.py::test_one_member[kafka-native:4.1] "
                     "on kafka-native:4.1) was deleted"),
    "delete the failing row": (lambda d: _edit(d / "results-gw1.jsonl", lambda ls: ls[:1]),
                               "results-gw1.jsonl was trimmed: 1 of 2 sealed rows; row 2 "
                               "(test kip98/test_txn.py::test_fenced_again[kafka-native:4.1] on kafka-native:4.1)"),
    "add a row": (lambda d: _edit(d / "results-gw0.jsonl", lambda ls: ls[:1] + ls[:1] + ls[1:]),
                  "row 2 of results-gw0.jsonl (test kip98/test_txn.py::test_abort_invisible[kafka-native:4.1] "
                  "on kafka-native:4.1) was added"),
    "append a row": (lambda d: _edit(d / "results-gw0.jsonl", lambda ls: ls + ls[:1]),
                     "results-gw0.jsonl has 1 row(s) more than sealed: row 5"),
    "edit a verdict": (lambda d: _edit(d / "results-gw1.jsonl", lambda ls: ls[:1] + [_flip(ls[1])]),
                       "row 2 of results-gw1.jsonl (test kip98/test_txn.py::test_fenced_again[kafka-native:4.1] "
                       "on kafka-native:4.1) was changed"),
    "trim a worker file": (lambda d: _edit(d / "results-gw0.jsonl", lambda ls: ls[:1]),
                           "results-gw0.jsonl was trimmed: 1 of 4 sealed rows; row 2"),
    "drop a worker file": (lambda d: (d / "results-gw1.jsonl").unlink(), "results-gw1.jsonl is missing (sealed with 2 rows)"),
    "add a worker file": (lambda d: (d / "results-gw7.jsonl").write_text(json.dumps(syn.PASSING_ROWS[0]) + "\n"),
                          "results-gw7.jsonl is not in the seal: 1 rows were added"),
    "edit run.json's counts": (lambda d: _run_json(d, finished_tests=5, expected_tests=5),
                               "run.json's counts were edited: expected_tests 5 (sealed 6), finished_tests 5 (sealed 6)"),
    "edit run.json's reasons": (lambda d: _run_json(d, reasons=["nothing happened"]),
                                "run.json changed after the run was sealed"),
    "delete run.json": (lambda d: (d / "run.json").unlink(), "run.json is missing (it was sealed)"),
    "add a target file": (lambda d: (d / "targets-gw9.json").write_text("{}"), "targets-gw9.json is not in the seal"),
    "edit the seal's counts": (lambda d: (d / seal.SEAL_FILE).write_text(
        (d / seal.SEAL_FILE).read_text().replace('"rows": 6', '"rows": 5', 1)), "seal.json was edited"),
}


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_tampering_is_refused_with_one_line_naming_it(results, how):
    tamper, expected = TAMPERING[how]
    tamper(results)
    with pytest.raises(seal.SealError) as caught:
        read_results(results)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_rewritten_index_cannot_misname_the_row(results):
    data = json.loads((results / seal.SEAL_FILE).read_text())
    data["index"]["results-gw1.jsonl"][1][1] = "somewhere::else"
    data["index"]["results-gw1.jsonl"][1][0] = "0" * 64
    (results / seal.SEAL_FILE).write_text(json.dumps(data))
    _edit(results / "results-gw1.jsonl", lambda ls: ls[:1] + [_flip(ls[1])])
    with pytest.raises(seal.SealError, match="row index of results-gw1.jsonl was edited"):
        read_results(results)


def test_a_genuine_folder_reads_and_its_statement_names_the_seal(results):
    sealed = seal.load(results)
    read = read_results(results)
    assert read.seal == sealed and len(read.rows) == 6 and not read.problems
    report = build_report(read, [])
    ev = report["statement"]["evidence"]
    assert ev["sealed"] and ev["root"] == sealed["root"] and ev["rows"] == 6
    assert ev["workers"] == {"results-gw0.jsonl": 4, "results-gw1.jsonl": 2}
    assert ev["targets"] == {NO_TARGET: 1, "kafka-native:4.1": 5}
    assert ev["signature"] is None
    # whitespace and key order are not evidence: a row re-serialized the same way still matches
    _edit(results / "results-gw0.jsonl", lambda ls: [json.dumps(json.loads(x), indent=None, sort_keys=True) + "\n"
                                                     for x in ls])
    assert read_results(results).seal == sealed


def test_an_unsealed_folder_says_so(tmp_path):
    d = syn.passing(tmp_path / "out")
    read = read_results(d)
    assert read.seal is None and any("not sealed" in p for p in read.problems)
    assert build_report(read, [])["statement"]["evidence"]["sealed"] is False


def test_a_certify_folder_whose_seal_was_removed_is_refused(tmp_path):
    """Deleting seal.json along with the failing rows must not turn a FAIL into a PASS:
    run.json records the targets certify was asked for, and certify seals every such folder."""
    d = syn.write_results(tmp_path / "out", syn.PASSING_ROWS,
                          syn.run_json(expected=5, finished=5, requested_targets=[syn.TARGET]))
    with pytest.raises(seal.SealError, match="seal.json is missing, but certify wrote this folder"):
        read_results(d)


def _pem(key: Ed25519PrivateKey, public: bool = False) -> bytes:
    if public:
        return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def test_a_signed_seal_checks_against_the_vendor_key_only(results):
    vendor, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    sealed = seal.write(results, _pem(vendor))
    assert seal.check_signature(sealed, _pem(vendor, public=True)) == seal.statement(sealed)["signature"]["key_fingerprint"]
    with pytest.raises(seal.SealError, match="does not match the given key"):
        seal.check_signature(sealed, _pem(other, public=True))
    # a forger who re-seals edited rows without the vendor's key cannot keep the signature
    _edit(results / "results-gw1.jsonl", lambda ls: ls[:1])
    resealed = seal.write(results, _pem(other))
    with pytest.raises(seal.SealError, match="does not match the given key"):
        seal.check_signature(resealed, _pem(vendor, public=True))
    unsigned = seal.write(results)
    with pytest.raises(seal.SealError, match="is not signed"):
        seal.check_signature(unsigned, _pem(vendor, public=True))


def test_a_key_that_is_not_ed25519_is_refused():
    with pytest.raises(seal.SealError, match="not an unencrypted PEM private key"):
        seal.load_private_key(b"not a key")


def test_rebuilt_external_run_has_only_the_requested_column(tmp_path):
    """The plugin starts the reference as differential oracle: it is described (targets-*.json,
    run.json's targets) but was not asked for, so it is no column of the original or the rebuild."""
    ext = "external:127.0.0.1:9092"
    rows = [syn.row("kip98/test_txn.py::test_abort_invisible[external]", ["KIP-98.TXN.001"], target=ext)]
    run = syn.run_json(expected=1, finished=1, targets={ext: {"cluster_id": "x"}, "reference": {"cluster_id": "r"}})
    d = syn.write_results(tmp_path / "out", rows, run)
    (d / "session.json").write_text(json.dumps({"targets": [ext], "exitstatus": 0}))
    (d / "targets-gw0.json").write_text(json.dumps({"worker": "gw0", "targets": {
        ext: {"spec": ext, "kind": "external", "describe": {"bootstrap": "127.0.0.1:9092"}},
        "reference": {"spec": "reference", "kind": "reference", "describe": {"bootstrap": "127.0.0.1:9093"}}}}))
    seal.write(d)
    rebuilt = build_report_from_dir(d)
    assert [t["spec"] for t in rebuilt["targets"]] == [ext]
    assert set(rebuilt["kips"][0]["per_target"]) == {ext}
    original = build_report_from_dir(d, target_order=[ext])
    assert [t["spec"] for t in original["targets"]] == [ext]
