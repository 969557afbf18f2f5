"""The suite-power section reads kipcheck power's table."""

from __future__ import annotations

import json

from reports.power import load_power, markdown, power_section, short_test

TABLE = {
    "runtime_s": 12.5,
    "bugs": [
        {"name": "a-bug", "kip": "KIP-932", "requirement_ids": ["KIP-932.STATE.005"], "caught": True,
         "tests_run": 3, "tests_failed": 2,
         "catching_tests": ["conformance/suites/kip932/test_x.py::test_one[reference:bug=a-bug]",
                            "conformance/suites/kip932/test_x.py::test_two[reference:bug=a-bug]"]},
        {"name": "b-bug", "kip": "KIP-98", "requirement_ids": ["KIP-98.LSO.001"], "caught": False,
         "tests_run": 1, "tests_failed": 0, "catching_tests": []},
    ],
}


def test_section_counts_and_names_catching_tests(tmp_path):
    (tmp_path / "power.json").write_text(json.dumps(TABLE))
    section = power_section(load_power(tmp_path))
    assert (section["seeded"], section["caught"], section["missed"]) == (2, 1, ["b-bug"])
    assert section["bugs"][0]["catching_tests"] == ["test_x.py::test_one", "test_x.py::test_two"]


def test_markdown_marks_a_missed_bug():
    text = markdown(power_section(TABLE))
    assert text.startswith("1 of 2 seeded bugs caught in 12.5 s.")
    assert "| `b-bug` | KIP-98 | **no** | 0 / 1 |" in text


def test_short_test_drops_the_parameter():
    assert short_test("conformance/suites/p/test_a.py::test_b[reference:bug=x-y]") == "test_a.py::test_b"
