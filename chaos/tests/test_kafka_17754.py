"""The KAFKA-17754 scenario on the reference: with transaction version 2 the held
EndTxn(commit) of transaction 1 is fenced by the abort's epoch bump (KIP-890); with a TV1
client it commits transaction 2, which the client then tries to abort — the bug class
the scenario exists to show (KIP-98.TXN.003: an aborted transaction's data must stay
invisible to read_committed)."""

from __future__ import annotations

import argparse

import pytest

from chaos.scenarios import kafka_17754
from targets.factory import create_target
from chaos import chaos_cmd


@pytest.fixture(scope="module")
def reference():
    t = create_target("reference")
    t.start()
    yield t
    t.stop()


def test_tv2_fences_the_held_end_txn(reference):
    out = kafka_17754.run(reference, "reference", transaction_version=2)
    assert out.verdict == "fenced", out
    assert out.txn2[1] > out.txn1[1] and out.late_end_txn_error == "producer_fenced" and out.visible == []


def test_tv1_lets_the_held_end_txn_commit_the_next_transaction(reference):
    out = kafka_17754.run(reference, "reference", transaction_version=1)
    assert out.wrong and out.visible == ["t2"], out
    assert out.txn2 == out.txn1  # TV1: no epoch bump between transactions


def test_judge_names_each_outcome():
    o = kafka_17754.Outcome("x", 2, late_end_txn_error="producer_fenced")
    assert kafka_17754.judge(o).verdict == "fenced"
    o = kafka_17754.Outcome("x", 1, late_end_txn_error="none", visible=["t1"])
    assert kafka_17754.judge(o).wrong


def test_unknown_scenario_is_one_line_exit_2(capsys):
    p = argparse.ArgumentParser()
    chaos_cmd.add_arguments(p)
    assert chaos_cmd.run(p.parse_args(["--scenario", "nope"])) == chaos_cmd.EXIT_COULD_NOT_RUN
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kipcheck chaos: error: unknown scenario")
