"""Calibration (chaos/calibrate.py): the fast slice of the false-alarm measurement that the
nightly runs at >= 100 runs per implementation. Four short seeded runs on reference:nodes=3
(queue and copier under kill and partition) must all be judged and none may report a
safety anomaly: on a correct broker an anomaly is a false alarm (docs/chaos.md)."""

from __future__ import annotations

import json

import pytest

from chaos import calibrate as calibrate_module
from chaos.calibrate import NEMESES, Cell, calibrate, cells, classify, summary, table_text


@pytest.mark.deadline(420)
def test_fast_slice_reference_has_no_false_alarm(tmp_path):
    result = calibrate(["reference:nodes=3"], runs=4, time_limit_s=12, seed=101, out=tmp_path,
                       workloads=("queue", "copier"), nemeses=("kill", "partition"), log=lambda _m: None)
    total = result["totals"]["reference:nodes=3"]
    detail = json.dumps(result, indent=1)
    assert total["anomalies"] == 0, detail
    assert total["judged"] == 4 and total["could_not_run"] == 0, detail
    assert [(c["workload"], c["nemesis"], c["runs"]) for c in result["cells"]] == [
        ("queue", "kill", 1), ("copier", "kill", 1), ("queue", "partition", 1), ("copier", "partition", 1)]
    assert len(list(tmp_path.glob("reference_nodes-3/*/check.json"))) == 4


def test_outcomes_and_rate():
    assert [classify(rc, "") for rc in (0, 1, 3, 2, None)] == ["valid", "anomalies", "unknown",
                                                               "could_not_run", "could_not_run"]
    assert classify(2, "kipcheck chaos: error: the run could not happen: not supported by target: pause") == "not_supported"
    a, b = Cell("t", "queue", "kill"), Cell("t", "copier", "kill")
    for outcome in ("valid", "valid", "unknown", "not_supported"):
        a.counts[outcome] += 1
    b.counts["anomalies"] += 1
    b.anomaly_types["lost-write"] = 3
    result = summary([a, b], {})
    assert result["totals"]["t"] == {"valid": 2, "anomalies": 1, "unknown": 1, "could_not_run": 0,
                                     "not_supported": 1, "judged": 4, "false_alarm_rate": 0.25}
    assert "lost-write" in table_text(result)


def test_every_workload_meets_every_kind_it_can_take():
    table = cells("t", ("queue", "copier", "share"), NEMESES)
    assert {(c.workload, c.nemesis) for c in table if c.nemesis == "hijack"} == {("copier", "hijack")}
    assert ("share", "hold-endtxn") not in {(c.workload, c.nemesis) for c in table}
    assert len(table) == 3 * len(NEMESES) - 3


def test_runs_take_the_cells_in_turn_and_an_unsupported_kind_is_tried_once(tmp_path, monkeypatch):
    calls = []

    def one_run(cell, seed, _time_limit_s, _out):
        calls.append((cell.workload, cell.nemesis, seed))
        return (2, "the run could not happen: not supported by target: pause") if cell.nemesis == "pause" else (0, "")

    monkeypatch.setattr(calibrate_module, "_one_run", one_run)
    result = calibrate(["t"], 7, 1, 10, tmp_path, ("queue", "copier"), ("pause", "kill", "hijack"),
                       log=lambda _m: None)
    assert calls == [("queue", "pause", 10), ("queue", "kill", 11), ("copier", "kill", 12), ("copier", "hijack", 13),
                     ("queue", "kill", 14), ("copier", "kill", 15), ("copier", "hijack", 16)]
    assert result["totals"]["t"]["not_supported"] == 1 and result["totals"]["t"]["valid"] == 6
