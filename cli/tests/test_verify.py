"""`kipcheck verify` and `kipcheck report` on sealed synthetic folders (no broker): a genuine
folder verifies (exit 0, printing what it checked); a tampered one is refused by both with
one line and exit 2; and what certify's --out manifest deletes (cli/out_manifest.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cli import main, out_manifest
from cli.common import UsageError
from reports import seal
from reports.tests import synthetic as syn


def _one_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def folder(tmp_path: Path, capsys) -> Path:
    """certify's --out folder of a passing run: sealed rows, report.json and report.html."""
    out = tmp_path / "out"
    seal.write(syn.passing(out))
    assert main.main(["report", str(out / "results")]) == 0
    capsys.readouterr()
    return out


def test_a_genuine_folder_verifies(folder, capsys):
    rc = main.main(["verify", str(folder)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "rows: 5 in 2 worker file(s) (results-gw0.jsonl 4, results-gw1.jsonl 1)" in out
    assert f"seal root: {seal.load(folder / 'results')['root']}" in out
    assert "report.json: names this seal and matches the report rebuilt from the rows" in out
    assert "verified: the folder matches its seal" in out


@pytest.mark.parametrize("command", ["verify", "report"])
def test_a_deleted_row_is_refused(folder, tmp_path, capsys, command):
    rows = folder / "results" / "results-gw0.jsonl"
    lines = rows.read_text().splitlines(keepends=True)
    rows.write_text("".join(lines[:1] + lines[2:]))
    target = str(folder) if command == "verify" else str(folder / "results")
    argv = [command, target] + (["--out", str(tmp_path / "rebuilt")] if command == "report" else [])
    assert main.main(argv) == 2
    line = _one_error(capsys.readouterr().err)
    assert line.startswith(f"kipcheck {command}: error:")
    assert "row 2 of results-gw0.jsonl (test kip98/test_txn.py::test_fenced[kafka-native:4.1]" in line
    assert "was deleted" in line
    assert not (tmp_path / "rebuilt").exists()


def test_an_edited_report_json_is_refused(folder, capsys):
    report = json.loads((folder / "report.json").read_text())
    report["summary"]["tests"]["pass"] += 1
    (folder / "report.json").write_text(json.dumps(report))
    assert main.main(["verify", str(folder)]) == 2
    assert "report.json differs from the report its rows rebuild to at summary.tests.pass (5 in report.json, " \
           "4 rebuilt)" in _one_error(capsys.readouterr().err)


def test_a_report_json_of_another_seal_is_refused(folder, capsys):
    report = json.loads((folder / "report.json").read_text())
    report["statement"]["evidence"]["root"] = "0" * 64
    (folder / "report.json").write_text(json.dumps(report))
    assert main.main(["verify", str(folder)]) == 2
    assert f"names seal root {'0' * 64}" in _one_error(capsys.readouterr().err)


def test_a_page_naming_another_report_json_is_refused(folder, capsys):
    html = folder / "report.html"
    digest = hashlib.sha256((folder / "report.json").read_bytes()).hexdigest()
    html.write_text(html.read_text().replace(digest, "f" * 64))
    assert main.main(["verify", str(folder)]) == 2
    assert "report.html does not name report.json's SHA-256" in _one_error(capsys.readouterr().err)


def test_an_unsealed_folder_is_refused_by_verify(tmp_path, capsys):
    syn.passing(tmp_path / "out")
    assert main.main(["verify", str(tmp_path / "out")]) == 2
    assert "no seal.json" in _one_error(capsys.readouterr().err)


def _keys(tmp_path: Path) -> tuple[Path, Path]:
    key = Ed25519PrivateKey.generate()
    private, public = tmp_path / "vendor.key", tmp_path / "vendor.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def test_verify_key_checks_the_signature(tmp_path, capsys):
    private, public = _keys(tmp_path)
    results = syn.passing(tmp_path / "out")
    seal.write(results, private.read_bytes())
    assert main.main(["verify", str(results), "--key", str(public)]) == 0
    assert "made with the given key" in capsys.readouterr().out
    assert main.main(["verify", str(results)]) == 0
    assert "not checked (pass --key" in capsys.readouterr().out
    (tmp_path / "other").mkdir()
    _, other = _keys(tmp_path / "other")
    assert main.main(["verify", str(results), "--key", str(other)]) == 2
    assert "does not match the given key" in _one_error(capsys.readouterr().err)


def test_certify_refuses_a_bad_sign_key_and_an_empty_out(tmp_path, capsys):
    (tmp_path / "bad.key").write_text("not a key")
    assert main.main(["certify", "--sign-key", str(tmp_path / "bad.key"), "--out", str(tmp_path / "o")]) == 2
    assert "--sign-key" in _one_error(capsys.readouterr().err)
    assert main.main(["certify", "--out", ""]) == 2
    assert "empty" in _one_error(capsys.readouterr().err)
    assert main.main(["report", str(tmp_path), "--out", " "]) == 2
    assert "empty" in _one_error(capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------
# the --out manifest


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_manifest_deletes_only_what_kipcheck_wrote(tmp_path):
    out = tmp_path / "out"
    mine = _write(out / "results" / "notes.txt", "the user's")
    allure_mine = _write(out / "allure-results" / "keep.json", "the user's")
    top_mine = _write(out / "README", "the user's")
    kept = out_manifest.clear_previous(out)
    assert kept == {mine, allure_mine}
    rows = _write(out / "results" / "results-gw0.jsonl", "{}\n")
    allure = _write(out / "allure-results" / "u1-result.json", "{}")
    report = _write(out / "report.json", "{}")
    out_manifest.record(out, kept)
    listed = json.loads((out / out_manifest.MANIFEST).read_text())["files"]
    assert set(listed) == {"results/results-gw0.jsonl", "allure-results/u1-result.json", "report.json"}
    report.write_text('{"edited": "by the user"}')  # changed since: not kipcheck's bytes any more
    out_manifest.clear_previous(out)
    assert not rows.exists() and not allure.exists()
    assert report.exists() and mine.exists() and allure_mine.exists() and top_mine.exists()


def test_rows_kipcheck_did_not_write_are_refused_not_deleted(tmp_path):
    out = tmp_path / "out"
    stray = _write(out / "results" / "results-gw0.jsonl", "{}\n")
    with pytest.raises(UsageError, match=r"results-gw0\.jsonl, not written by the last kipcheck run"):
        out_manifest.clear_previous(out)
    assert stray.exists()


def test_a_manifest_cannot_reach_outside_out(tmp_path):
    victim = _write(tmp_path / "victim.txt", "keep")
    out = tmp_path / "out"
    _write(out / out_manifest.MANIFEST, json.dumps(
        {"files": {"../victim.txt": hashlib.sha256(b"keep").hexdigest()}}))
    out_manifest.clear_previous(out)
    assert victim.exists()
