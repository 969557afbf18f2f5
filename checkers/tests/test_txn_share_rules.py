"""The KIP-1289 anomalies of checkers.txn_share_rules: each one found in a history that
has it, and not in the same history without it."""

from __future__ import annotations

import pytest

from checkers.txn_share_rules import REQUIREMENTS, TxnShareOp, allowed_error_types, check
from registers.catalog import load_catalog

R = ("sp-0", 5)


def stage(t, txn="t#1", ack="accept", acquired_at=None):
    return TxnShareOp("stage", t, t + 1, (R,), txn=txn, member="m1", ack=ack, acquired_at=acquired_at)


def end(t, committed, txn="t#1"):
    return TxnShareOp("end", t, t + 1, txn=txn, committed=committed)


def acquire(t, member="m2"):
    return TxnShareOp("acquire", t, t + 1, (R,), member=member)


def observe(t, state):
    return TxnShareOp("observe", t, t + 1, (R,), state=state)


def failover(t):
    return TxnShareOp("failover", t, t + 1)


def found(ops, **kw) -> set[str]:
    return set(check(ops, **kw).counts)


def test_clean_commit_and_clean_abort():
    assert check([stage(0), end(10, True), observe(20, "acknowledged")]).valid is True
    # Abort then the original member's lock expires: delivered again, nothing applied.
    assert check([stage(0, acquired_at=0), end(10, False), acquire(50), observe(60, "available")],
                 lock_duration_ms=30).valid is True


def test_aborted_ack_applied():
    assert found([stage(0), end(10, False), observe(20, "acknowledged")]) == {"aborted-ack-applied"}
    # Settled by the member's own ordinary ACCEPT after the abort: allowed (STATE.004).
    ops = [stage(0), end(10, False), TxnShareOp("ack", 12, 13, (R,), ack="accept"), observe(20, "acknowledged")]
    assert check(ops).valid is True


def test_pending_record_acquired_before_resolution():
    assert found([stage(0), acquire(5), end(10, True)]) == {"pending-acquired"}
    assert found([stage(0), acquire(5, member="m1"), end(10, False)]) == {"pending-acquired"}
    # Overlapping the EndTxn (it may already be resolved): no alarm; after lock expiry: none.
    assert check([stage(0), acquire(10), end(10, True)]).valid is True
    assert check([stage(0, acquired_at=0), acquire(50), end(60, True)], lock_duration_ms=30).counts.get(
        "pending-acquired") is None


def test_pending_acquired_across_a_failover_is_allowed_only_with_failovers():
    ops = [stage(0), failover(3), acquire(5), end(10, True)]
    assert found(ops) >= {"pending-acquired-after-failover"}
    assert check(ops, allowed_error_types(failover=True)).counts.keys() <= allowed_error_types(failover=True)
    assert check(ops, allowed_error_types(failover=True)).valid is True


def test_committed_ack_lost():
    assert found([stage(0), end(10, True), acquire(20)]) == {"committed-ack-lost"}
    # Observed settled, then a fail-over, then available again: lost after fail-over.
    ops = [stage(0), end(10, True), observe(20, "acknowledged"), failover(30), observe(40, "available")]
    assert found(ops, allowed=allowed_error_types(failover=True)) == {"committed-ack-lost"}
    assert check(ops, allowed_error_types(failover=True)).valid is False


def test_commit_dropped_by_a_failover_before_it_is_allowed_with_failovers():
    ops = [stage(0), failover(3), end(10, True), acquire(20)]
    assert found(ops) == {"committed-ack-dropped-by-failover"}
    assert check(ops, allowed_error_types(failover=True)).valid is True
    assert check(ops).valid is False


def test_no_staging_is_no_evidence():
    assert check([acquire(0)]).valid == "unknown"
    with pytest.raises(ValueError):
        check([], allowed=["no-such-anomaly"])


def test_every_anomaly_names_catalogued_kip1289_ids():
    catalog = load_catalog()
    for kind, ids in REQUIREMENTS.items():
        assert ids and all(i.startswith("KIP-1289.") and i in catalog for i in ids), kind
