"""The draft's "Block Begin Transaction" on the wire: the first AddPartitionsToTxn of the next
transaction, sent while the previous transaction's markers are still being written, is held
until they are written and then answered NONE, instead of CONCURRENT_TRANSACTIONS.

The reference holds its markers back with the model-only TransactionConfig.marker_delay_ms so
the window is seconds long; a broker that answers CONCURRENT_TRANSACTIONS, or answers NONE
before the markers are written, fails these tests."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode as E

from conformance.suites.kip98 import ADD_PARTITIONS_TO_TXN
from conformance.suites.kip1289 import wait_for

DELAY_MS = 2_000
SLACK_S = 0.1  # broker and test share the machine's clock; ms rounding only


def commit_with_delayed_markers(rt, delay_ms: int = DELAY_MS):
    """A TV1 transaction on partition 0 (one record) committed while markers wait `delay_ms`:
    returns (txn, monotonic time the EndTxn was sent)."""
    txn = rt.txn(rt.topic())
    assert txn.add([0])[0] == {0: E.none}
    txn.produce(0, "first")
    sent = time.monotonic()
    assert txn.end(committed=True) == E.none
    return txn, sent


@pytest.mark.requirement("KIP-TXNRT.BLOCK.004")
def test_commit_returns_before_its_markers(rt):
    """EndTxn(commit) answers NONE once the decision is durable: the transaction is still
    PrepareCommit and the record is not yet below the last stable offset."""
    with rt.markers_delayed(DELAY_MS):
        txn, _ = commit_with_delayed_markers(rt)
        assert txn.describe().transaction_state == "PrepareCommit"
        assert txn.lso(0) == 0
    wait_for(lambda: txn.describe().transaction_state == "CompleteCommit", "the markers", 20)
    assert txn.lso(0) == 2  # the record and its COMMIT marker


@pytest.mark.requirement("KIP-TXNRT.BLOCK.001", "KIP-TXNRT.BLOCK.002")
def test_next_add_is_held_until_the_markers_are_written(rt):
    """The next transaction's AddPartitionsToTxn, sent at once, is answered NONE (not 51), no
    earlier than the marker delay after EndTxn was sent; when it is answered the previous
    commit is complete (its record is read_committed-visible) and the new transaction is
    Ongoing with exactly the requested partition."""
    with rt.markers_delayed(DELAY_MS):
        txn, end_sent = commit_with_delayed_markers(rt)
        codes, _ = txn.add([1])
        answered = time.monotonic() - end_sent
        assert codes == {1: E.none}, codes
        assert answered >= DELAY_MS / 1000 - SLACK_S, f"answered {answered:.3f} s after EndTxn, markers wait {DELAY_MS} ms"
        assert txn.lso(0) == 2, "the add was answered before the previous commit's marker"
        state = txn.describe()
        assert state.transaction_state == "Ongoing"
        assert txn.described_partitions() == {(txn.topic, 1)}
    assert txn.end(committed=False) == E.none


@pytest.mark.requirement("KIP-TXNRT.BLOCK.005", "KIP-TXNRT.COMPAT.001")
def test_level_0_keeps_concurrent_transactions_and_level_1_holds(rt):
    """DIV-200201: the capability is the finalized feature level, not an AddPartitionsToTxn
    version. At level 0 the same add is refused at once with CONCURRENT_TRANSACTIONS (today's
    behaviour, unchanged for existing producers); at level 1 it is held and answered NONE. The
    advertised AddPartitionsToTxn range is the same at both levels."""
    ranges = {}
    with rt.markers_delayed(DELAY_MS):
        rt.level(0)
        try:
            ranges[0] = rt.cc.bootstrap.api_versions()[ADD_PARTITIONS_TO_TXN]
            txn, _ = commit_with_delayed_markers(rt)
            codes, took = txn.add([1])
            assert codes == {1: E.concurrent_transactions}, codes
            assert took < DELAY_MS / 1000, f"level 0 held the add {took:.3f} s"
        finally:
            rt.level(1)
        ranges[1] = rt.cc.bootstrap.api_versions()[ADD_PARTITIONS_TO_TXN]
        wait_for(lambda: txn.describe().transaction_state == "CompleteCommit", "the first commit", 20)
        assert txn.add([1])[0] == {1: E.none}
        txn.produce(1, "second")
        end_sent = time.monotonic()
        assert txn.end(committed=True) == E.none
        codes, _ = txn.add([0])
        assert codes == {0: E.none} and time.monotonic() - end_sent >= DELAY_MS / 1000 - SLACK_S
    assert ranges[0] == ranges[1], ranges
    assert txn.end(committed=False) == E.none


@pytest.mark.requirement("KIP-TXNRT.BLOCK.003")
def test_hold_is_bounded_when_markers_never_complete(rt):
    """Markers held back for an hour, hold bound 1.5 s: the add is answered
    CONCURRENT_TRANSACTIONS after about the bound, well before the client's request timeout,
    and the connection stays usable (DIV-200202)."""
    bound_ms = 1_500
    with rt.hold_bound(bound_ms):
        with rt.markers_delayed(3_600_000):
            txn, _ = commit_with_delayed_markers(rt)
            codes, took = txn.add([1])
            assert codes == {1: E.concurrent_transactions}, codes
            assert bound_ms / 1000 - SLACK_S <= took < 10.0, f"answered after {took:.3f} s"
            assert txn.describe().transaction_state == "PrepareCommit"  # same connection, still usable
    wait_for(lambda: txn.describe().transaction_state == "CompleteCommit", "the markers once released", 20)
    assert txn.add([1])[0] == {1: E.none}
    assert txn.end(committed=False) == E.none
