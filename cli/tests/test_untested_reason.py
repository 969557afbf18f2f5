"""`untested_reason`: a catalog id no test can observe is explained, not silently missing.

Issue 14 item 2: every id of an implemented KIP has a conformance test or a written
reason why the wire cannot show it (JMX metrics, broker-internal state, a target-level
setting). The catalog keeps the reason; `kipcheck catalog --untested` lists such ids
apart and counts them in its header.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cli import catalog, main
from registers.catalog import CatalogError, load_catalog

CATALOG = """\
kip: KIP-98
title: Exactly Once
seed: null
status: adopted
requirements:
  - id: KIP-98.IDEMP.001
    section: s
    level: must
    behaviour: tested behaviour
    oracle: o
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
  - id: KIP-98.METRIC.001
    section: s
    level: should
    behaviour: broker metrics
    oracle: o
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
    untested_reason: >-
      The metrics are exposed over JMX only,
      which no wire client can read.
  - id: KIP-98.TXN.001
    section: s
    level: must
    behaviour: a plain gap
    oracle: o
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
"""


def _catalog_dir(tmp_path: Path, text: str = CATALOG) -> Path:
    d = tmp_path / "cat"
    d.mkdir()
    (d / "kip-98.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
    return d


def test_reason_is_loaded_normalised_and_not_left_in_extra(tmp_path):
    r = load_catalog(_catalog_dir(tmp_path)).get("KIP-98.METRIC.001")
    assert r.untested_reason == "The metrics are exposed over JMX only, which no wire client can read."
    assert "untested_reason" not in r.extra
    assert r.to_dict()["untested_reason"] == r.untested_reason


@pytest.mark.parametrize("bad", ["'n/a'", "''", "[JMX]", "42"])
def test_a_reason_that_says_nothing_is_refused(tmp_path, bad):
    text = CATALOG.replace(
        "untested_reason: >-\n      The metrics are exposed over JMX only,\n      which no wire client can read.",
        f"untested_reason: {bad}",
    )
    with pytest.raises(CatalogError) as info:
        load_catalog(_catalog_dir(tmp_path, text))
    assert any("KIP-98.METRIC.001: untested_reason must say why" in p for p in info.value.problems)


def test_coverage_splits_explained_from_unexplained(tmp_path):
    cov = load_catalog(_catalog_dir(tmp_path)).coverage(["KIP-98.IDEMP.001"])["KIP-98"]
    assert cov.without_tests == ["KIP-98.METRIC.001", "KIP-98.TXN.001"]
    assert list(cov.explained) == ["KIP-98.METRIC.001"]
    assert cov.unexplained == ["KIP-98.TXN.001"]
    # a test claiming the id makes its reason moot
    assert load_catalog(tmp_path / "cat").coverage(["KIP-98.METRIC.001"])["KIP-98"].explained == {}


@pytest.fixture
def claims(monkeypatch):
    """Collected suites claiming only KIP-98.IDEMP.001 (the suites are not collected here)."""
    monkeypatch.setattr(catalog, "collect_requirement_claims", lambda: {"t.py::test_a": ["KIP-98.IDEMP.001"]})
    monkeypatch.setenv("COLUMNS", "200")  # one line per reason whatever the terminal


def test_untested_listing_shows_explained_ids_apart_with_counts(tmp_path, capsys, claims):
    assert main.main(["catalog", "--untested", "--catalog", str(_catalog_dir(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "(2 of 3 requirements, 2 without a test, 1 of them explained)" in out
    lines = out.splitlines()
    gap = next(i for i, line in enumerate(lines) if "KIP-98.TXN.001" in line)
    explained = next(i for i, line in enumerate(lines) if "KIP-98.METRIC.001" in line)
    assert "NO TEST" in lines[gap] and "explained" in lines[explained]
    assert gap < explained, "unexplained gaps are listed before the explained ids"
    assert lines[explained + 1].strip() == "explained: The metrics are exposed over JMX only, which no wire client can read."
    assert "IDEMP.001" not in out


def test_untested_json_carries_the_reason(tmp_path, capsys, claims):
    assert main.main(["catalog", "--untested", "--json", "--catalog", str(_catalog_dir(tmp_path))]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["requirements"]}
    assert set(rows) == {"KIP-98.METRIC.001", "KIP-98.TXN.001"}
    assert rows["KIP-98.METRIC.001"]["untested_reason"].startswith("The metrics are exposed over JMX")
    assert rows["KIP-98.TXN.001"]["untested_reason"] is None
