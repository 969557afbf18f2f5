"""The KAFKA-19632 scenario on real Kafka: 4.1.2 (affected) hands the acknowledged offsets
15-18 out again after its share-partition is reloaded, 4.2.1 (fixed by apache/kafka#20395)
delivers only the gap 10-14 and offset 19 (KIP-932.ACK.004: an acknowledged record is
never delivered again), as does the reference. Each case starts its own single-node cluster and restarts it once
(~35 s each on an idle 2-core machine, 2026-12-05)."""

from __future__ import annotations

import os

import pytest

from chaos.scenarios import kafka_19632
from chaos.scenarios.kafka_19632 import Outcome, ScenarioNotSetUp, check_set_up, judge
from clients.share import ACKNOWLEDGED
from targets.factory import create_target

KAFKA_NATIVE = [
    pytest.mark.xdist_group("kafka_native"),
    pytest.mark.skipif(os.environ.get("KIPCHECK_SKIP_KAFKA_NATIVE", "") == "1", reason="KIPCHECK_SKIP_KAFKA_NATIVE=1"),
    pytest.mark.deadline(900),  # its own cluster: a start, a SIGKILL and a restart under CI load
]


@pytest.mark.parametrize("spec,verdict", [
    pytest.param("kafka-native:4.1", "wrong: redelivered acknowledged records", marks=KAFKA_NATIVE, id="4.1-affected"),
    pytest.param("kafka-native:4.2", "correct", marks=KAFKA_NATIVE, id="4.2-fixed"),
])
def test_scenario_on_an_affected_and_a_fixed_release(spec, verdict, tmp_path):
    out = kafka_19632.run_spec(spec, tmp_path)
    assert (out.persisted_start, out.persisted_batches) == (10, [[15, 18, ACKNOWLEDGED, 1]]), out
    assert out.verdict == verdict, out
    if out.wrong:
        assert out.redelivered == [15, 16, 17, 18], out
    else:
        assert sorted(o for f, l, _ in out.acquired_by_b for o in range(f, l + 1)) == [10, 11, 12, 13, 14, 19], out
    assert (tmp_path / "scenario.json").is_file()


def test_reference_delivers_only_the_gap():
    with create_target("reference") as ref:
        out = kafka_19632.run(ref, "reference")
    assert out.verdict == "correct" and out.persisted_batches == [[15, 18, ACKNOWLEDGED, 1]], out


def test_judge_names_each_outcome():
    assert judge(Outcome("x", acquired_by_b=[[10, 19, 1]])).redelivered == [15, 16, 17, 18]
    assert judge(Outcome("x", acquired_by_b=[[10, 14, 1], [19, 19, 1]])).verdict == "correct"
    unknown = judge(Outcome("x", acquired_by_b=[[10, 11, 1]]))
    assert not unknown.wrong and unknown.verdict.startswith("unknown") and unknown.missing == [12, 13, 14, 19]


def test_a_state_without_the_gap_is_not_judged():
    check_set_up(10, [(15, 18, ACKNOWLEDGED, 1)])
    # acquired records persisted as Available at the crash: no gap, the bug cannot be reached
    with pytest.raises(ScenarioNotSetUp):
        check_set_up(10, [(10, 14, 0, 1), (15, 18, ACKNOWLEDGED, 1), (19, 19, 0, 1)])
    with pytest.raises(ScenarioNotSetUp):
        check_set_up(0, [(15, 18, ACKNOWLEDGED, 1)])
