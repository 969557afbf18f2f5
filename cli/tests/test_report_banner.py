"""`kipcheck report` on the synthetic runs of reports/tests: the exit code and the first line
follow the outcome rules (reports/outcome.py), and the page names the hash of its report.json."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from cli import main
from reports.tests import synthetic as syn


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    return syn.write_catalog(tmp_path)


@pytest.mark.parametrize("make, code, first", [
    (syn.passing, 0, "PASS"), (syn.interrupted, 2, "INCOMPLETE:"), (syn.unreachable, 2, "NOT RUN:"),
])
def test_kipcheck_report_exit_code_and_banner(tmp_path, catalog, capsys, make, code, first):
    results = make(tmp_path / "out")
    rc = main.main(["report", str(results), "--catalog", str(catalog), "--divergences", str(tmp_path / "none.yaml")])
    assert rc == code
    assert capsys.readouterr().out.splitlines()[0].startswith(first)
    html = (tmp_path / "out" / "report.html").read_text()
    digest = hashlib.sha256((tmp_path / "out" / "report.json").read_bytes()).hexdigest()
    assert digest in html  # the CLI writes report.json first, then the page naming its hash
