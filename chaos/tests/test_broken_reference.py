"""Chaos finds what a calm run cannot: the reference started with the seeded bug
``txn-commit-aborted-on-down-replica`` (``reference:nodes=3:bug=...``, seeded_bugs.py:
while a replica of a participant partition is down, a committing transaction gets ABORT
markers there, so the commit lands on only some partitions) passes a calm queue run and
fails the same run under node kills, with the anomaly named (lost-write, KIP-98.TXN.001)."""

from __future__ import annotations

from chaos.runner import RunConfig, run
from reference_impl.model import seeded_bugs as bugs
from conformance.power import select_bugs

SEED, TIME_LIMIT_S = 3, 20
OPTIONS = {"replication_factor": 2, "max_ops": 2000}
TARGET = f"reference:nodes=3:bug={bugs.TXN_COMMIT_ABORTED_ON_DOWN_REPLICA}"


def _run(faults: str, out) -> dict:
    cfg = RunConfig(target=TARGET, workload="queue", faults=faults, seed=SEED,
                    time_limit_s=TIME_LIMIT_S, out=out, workload_options=dict(OPTIONS))
    return run(cfg, log=lambda _m: None).check


def test_calm_run_of_the_broken_reference_is_valid(tmp_path):
    check = _run("none", tmp_path)
    assert check["valid"] is True, check["anomalies"]


def test_chaos_run_of_the_broken_reference_finds_a_lost_write(tmp_path):
    check = _run("kill", tmp_path)
    assert check["valid"] is False
    lost = [a for a in check["anomalies"] if a["type"] == "lost-write"]
    assert lost and "KIP-98.TXN.001" in lost[0]["requirements"], check["anomalies"]


def test_the_chaos_only_bugs_are_left_out_of_the_calm_power_matrix():
    assert {bugs.TXN_COMMIT_ABORTED_ON_DOWN_REPLICA, bugs.SHARE_LEADER_MOVE_FORGETS_STATE} <= bugs.CHAOS_ONLY
    assert not {b.name for b in select_bugs(None)} & bugs.CHAOS_ONLY
    assert [b.name for b in select_bugs(bugs.SHARE_LEADER_MOVE_FORGETS_STATE)] == [bugs.SHARE_LEADER_MOVE_FORGETS_STATE]
