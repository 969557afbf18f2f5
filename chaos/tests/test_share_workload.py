"""The share-group workload (``--workload share``) on ``reference:nodes=3``: a broken
reference (seeded bug ``share-leader-move-forgets-state``: the next leader of a
share-partition ignores its persisted state and starts again from the earliest offset)
passes a calm run and is flagged by the same run with node kills (redelivery after an
acknowledgement, KIP-932 STATE.005/STATE.008)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from clients.outcomes import FAIL, INFO, classify
from chaos.runner import RunConfig, run
from chaos.workloads import make_workload
from chaos.workloads.share import ShareWorkload
from reference_impl.model import seeded_bugs as bugs

SEED, TIME_LIMIT_S = 5, 12


def _run(faults: str, out) -> dict:
    cfg = RunConfig(target=f"reference:nodes=3:bug={bugs.SHARE_LEADER_MOVE_FORGETS_STATE}", workload="share",
                    faults=faults, seed=SEED, time_limit_s=TIME_LIMIT_S, out=out)
    return run(cfg, log=lambda _m: None).check


def test_share_outcomes_refused_ack_is_fail_timeout_is_info():
    assert classify("share_ack", ErrorCode.invalid_record_state).type == FAIL
    assert classify("share_ack", TimeoutError()).type == INFO
    assert classify("share_fetch", ConnectionError()).type == INFO  # it may have acquired


def test_workload_is_seeded():
    a, b = make_workload("share", 7), ShareWorkload(7)
    assert [a._decide() for _ in range(20)] == [b._decide() for _ in range(20)]


def test_calm_run_of_the_broken_reference_is_valid(tmp_path):
    check = _run("none", tmp_path)
    assert check["valid"] is True, check["anomalies"]
    assert check["checkers"]["results"]["share-group"]["stats"]["acknowledged"] > 0


def test_kill_run_of_the_broken_reference_is_flagged(tmp_path):
    check = _run("kill", tmp_path)
    assert check["valid"] is False, check
    types = {a["type"] for a in check["anomalies"]}
    assert types & {"redelivery-after-ack", "concurrent-acquisition", "lost-record"}, check["anomalies"]
