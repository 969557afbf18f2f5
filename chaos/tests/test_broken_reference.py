"""Chaos finds what a calm run cannot: a reference broker broken on purpose
(``TransactionConfig.broken_abort_markers_on_down_replica``: while a replica of a
participant partition is down, a committing transaction gets ABORT markers there, so
the commit lands on only some partitions) passes a calm queue run and fails the same
run under node kills, with the anomaly named (lost-write, KIP-98.TXN.001)."""

from __future__ import annotations

from chaos.runner import RunConfig, run

SEED, TIME_LIMIT_S = 3, 20
OPTIONS = {"replication_factor": 2, "max_ops": 2000}


def _break(target) -> None:
    target.cluster.cluster.state.transactions.txn_config.broken_abort_markers_on_down_replica = True


def _run(faults: str, out) -> dict:
    cfg = RunConfig(target="reference:nodes=3", workload="queue", faults=faults, seed=SEED,
                    time_limit_s=TIME_LIMIT_S, out=out, workload_options=dict(OPTIONS), target_hook=_break)
    return run(cfg, log=lambda _m: None).check


def test_calm_run_of_the_broken_reference_is_valid(tmp_path):
    check = _run("none", tmp_path)
    assert check["valid"] is True, check["anomalies"]


def test_chaos_run_of_the_broken_reference_finds_a_lost_write(tmp_path):
    check = _run("kill", tmp_path)
    assert check["valid"] is False
    lost = [a for a in check["anomalies"] if a["type"] == "lost-write"]
    assert lost and "KIP-98.TXN.001" in lost[0]["requirements"], check["anomalies"]
