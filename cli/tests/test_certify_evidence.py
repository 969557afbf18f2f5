"""End to end, with real certify runs of a narrow selection on the reference (about 15 s each):
the folder certify writes verifies; the report rebuilt from its results is the original
(JSON and page, but for the build time), also on an `external:` run, whose rebuild once
gained a `reference` column; a tampered copy is refused; a re-run into the same --out
deletes what the first run wrote and nothing of the user's."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from cli import main
from cli.tests.reference_broker import served_reference

SUITE = "kip98 and idempotence"
BUILD_KEYS = ("generated_at", "host")


def _certify(out: Path, target: str, capsys) -> int:
    rc = main.main(["certify", "--target", target, "--suite", SUITE, "--out", str(out), "-n", "0", "-q"])
    capsys.readouterr()
    return rc


def _same_report(original: Path, rebuilt: Path) -> None:
    a, b = (json.loads((d / "report.json").read_text()) for d in (original, rebuilt))
    assert {k: v for k, v in a.items() if k not in BUILD_KEYS} == {k: v for k, v in b.items() if k not in BUILD_KEYS}
    pages = []
    for d, report in ((original, a), (rebuilt, b)):
        page = (d / "report.html").read_text()
        assert f"generated {report['generated_at']}" in page
        # the build time, and the hash of report.json (which holds the build time)
        page = page.replace(f"generated {report['generated_at']}", "generated <built>")
        pages.append(re.sub(r"\b[0-9a-f]{64}\b", lambda m: m.group() if m.group() in json.dumps(report) else "<sha>",
                            page))
    assert pages[0] == pages[1]


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with served_reference() as bootstrap:
        yield bootstrap


@pytest.mark.deadline(240)
def test_certify_seals_and_a_rerun_keeps_the_users_files(tmp_path, capsys):
    out = tmp_path / "cert"
    user = {out / "NOTES": "mine", out / "results" / "notes.txt": "mine",
            out / "allure-results" / "mine.txt": "mine"}
    for path, text in user.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert _certify(out, "reference", capsys) == 0
    first_rows = sorted(p.name for p in (out / "results").glob("results-*.jsonl"))
    first_allure = {p.name for p in (out / "allure-results").glob("*-result.json")}
    assert first_rows and first_allure
    assert main.main(["verify", str(out)]) == 0
    assert "verified: the folder matches its seal" in capsys.readouterr().out

    rebuilt = tmp_path / "rebuilt"
    assert main.main(["report", str(out / "results"), "--out", str(rebuilt)]) == 0
    capsys.readouterr()
    _same_report(out, rebuilt)

    tampered = tmp_path / "tampered"
    shutil.copytree(out, tampered)
    rows = next((tampered / "results").glob("results-*.jsonl"))
    lines = rows.read_text().splitlines(keepends=True)
    rows.write_text("".join(lines[:-1]))
    assert main.main(["verify", str(tampered)]) == 2
    assert f"{rows.name} was trimmed" in capsys.readouterr().err

    assert _certify(out, "reference", capsys) == 0  # the same --out again
    for path, text in user.items():
        assert path.read_text() == text
    assert not first_allure & {p.name for p in (out / "allure-results").glob("*-result.json")}  # new uuids only
    assert main.main(["verify", str(out)]) == 0


@pytest.mark.deadline(240)
def test_a_rebuilt_external_report_is_the_original(broker, tmp_path, capsys):
    out = tmp_path / "cert"
    target = f"external:{broker}"
    assert _certify(out, target, capsys) == 0
    original = json.loads((out / "report.json").read_text())
    assert [t["spec"] for t in original["targets"]] == [target]
    rebuilt = tmp_path / "rebuilt"
    assert main.main(["report", str(out / "results"), "--out", str(rebuilt)]) == 0
    capsys.readouterr()
    _same_report(out, rebuilt)
    assert main.main(["verify", str(out)]) == 0
