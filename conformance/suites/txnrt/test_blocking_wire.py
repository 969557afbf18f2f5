"""The draft's "Block Begin Transaction" on the wire: the first AddPartitionsToTxn of the next
transaction, sent while the previous transaction's markers are still being written, is held
until they are written and then answered NONE, instead of CONCURRENT_TRANSACTIONS.

The markers-pending window is seconds long: on 2+ brokers the leader of the transaction's
partition is held (paused, or isolated on the reference) and resumed by a timer, so a
vendor's multi-broker implementation is judged too; on the single-node reference the
model-only TransactionConfig.marker_delay_ms holds the markers (conftest.MarkerWindow). A
broker that answers CONCURRENT_TRANSACTIONS, or answers NONE before the markers are written,
fails these tests. Only the hold bound (BLOCK.003) needs the reference's own knobs."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode as E

from conformance.suites.kip98 import ADD_PARTITIONS_TO_TXN
from conformance.suites.kip1289 import wait_for

DELAY_MS = 2_000
SLACK_S = 0.1  # broker and test share the machine's clock; ms rounding only


def committed_on_partition_0(rt):
    """A TV1 transaction with one record on partition 0, committed (the caller holds its
    markers back)."""
    txn = rt.txn(rt.topic())
    assert txn.add([0])[0] == {0: E.none}
    txn.produce(0, "first")
    assert txn.end(committed=True) == E.none
    return txn


def end_in_window(txn, h, committed: bool) -> float:
    """One record on the held partition, then EndTxn while its markers are held back for
    DELAY_MS: returns the monotonic time EndTxn was answered."""
    assert txn.add([h.partition])[0] == {h.partition: E.none}
    txn.produce(h.partition, "first")
    h.window.open(DELAY_MS)
    assert txn.end(committed=committed) == E.none
    return time.monotonic()


def assert_held_until_released(codes, answered: float, h) -> None:
    """The next transaction's add of `h.other`: answered NONE, and not while the window was open."""
    assert codes == {h.other: E.none}, f"{codes} (51 = CONCURRENT_TRANSACTIONS: the add was not held)"
    released = h.window.released_at
    assert released is not None and answered >= released - SLACK_S, \
        "the add was answered while the markers were still held back"


@pytest.mark.requirement("KIP-TXNRT.BLOCK.004")
def test_commit_returns_before_its_markers(rt):
    """EndTxn(commit) answers NONE once the decision is durable, while its markers are still
    held back (conftest.MarkerWindow): the transaction is still PrepareCommit, and where the
    partition's leader is reachable during the window (the single-node reference, whose
    window is a marker delay) its record is not yet below the last stable offset. A broker
    that answers only after its markers answers after the window ends."""
    txn, h = rt.held_transaction()
    with h.window:
        answered = end_in_window(txn, h, committed=True)
        assert txn.describe().transaction_state == "PrepareCommit"
        released = h.window.released_at
        assert released is None or answered < released, "EndTxn was answered only after its markers"
        if h.window.node is None:  # nothing paused: the leader answers during the window
            assert txn.lso(h.partition) == 0
    txn.cc = rt.cc  # a new client after a window on a held broker
    wait_for(lambda: txn.describe().transaction_state == "CompleteCommit", "the markers", 20)
    assert txn.lso(h.partition) == 2  # the record and its COMMIT marker


@pytest.mark.requirement("KIP-TXNRT.BLOCK.001", "KIP-TXNRT.BLOCK.002")
@pytest.mark.parametrize("committed", [True, False], ids=["after-commit", "after-abort"])
def test_next_add_is_held_until_the_markers_are_written(rt, committed):
    """The next transaction's AddPartitionsToTxn, sent at once after EndTxn, is answered NONE
    (not 51) and only once the previous transaction's markers could be written, whether it
    committed or aborted (BLOCK.001: "markers pending", not "commit pending"); when it is
    answered the previous outcome is complete (its marker is below the last stable offset:
    the record visible after a commit, skipped after an abort) and the new transaction is
    Ongoing with exactly the requested partition. The window comes from a held partition
    leader on a multi-broker cluster, from the reference's marker delay on one node
    (conftest.MarkerWindow)."""
    txn, h = rt.held_transaction()
    with h.window:
        end_in_window(txn, h, committed)
        codes, _ = txn.add([h.other])
        assert_held_until_released(codes, time.monotonic(), h)
    txn.cc = rt.cc  # a new client after a window on a held broker
    assert txn.lso(h.partition) == 2, "the add was answered before the previous transaction's marker"
    assert txn.describe().transaction_state == "Ongoing"
    assert txn.described_partitions() == {(txn.topic, h.other)}
    assert txn.end(committed=False) == E.none


@pytest.mark.requirement("KIP-TXNRT.BLOCK.005", "KIP-TXNRT.COMPAT.001")
def test_level_0_keeps_concurrent_transactions_and_level_1_holds(rt):
    """DIV-200201: the capability is the finalized feature level, not an AddPartitionsToTxn
    version. At level 0 the add sent while the previous commit's markers are held back is
    refused at once with CONCURRENT_TRANSACTIONS (today's behaviour, unchanged for existing
    producers); at level 1 the same add in the same window is held and answered NONE once
    the window ends. The advertised AddPartitionsToTxn range is the same at both levels.
    Each window comes from conftest.MarkerWindow, opened once per level."""
    txn, h = rt.held_transaction()
    ranges = {}
    rt.level(0)
    try:
        ranges[0] = rt.cc.bootstrap.api_versions()[ADD_PARTITIONS_TO_TXN]
        with h.window:
            end_in_window(txn, h, committed=True)
            codes, took = txn.add([h.other])
            assert codes == {h.other: E.concurrent_transactions}, codes
            assert took < DELAY_MS / 1000, f"level 0 held the add {took:.3f} s"
    finally:
        rt.level(1)
    ranges[1] = rt.cc.bootstrap.api_versions()[ADD_PARTITIONS_TO_TXN]
    txn.cc = rt.cc  # a new client after a window on a held broker
    wait_for(lambda: txn.describe().transaction_state == "CompleteCommit", "the first commit", 20)
    with h.window:
        end_in_window(txn, h, committed=True)
        codes, _ = txn.add([h.other])
        assert_held_until_released(codes, time.monotonic(), h)
    txn.cc = rt.cc
    assert txn.end(committed=False) == E.none
    assert ranges[0] == ranges[1], ranges


@pytest.mark.requirement("KIP-TXNRT.BLOCK.003")
def test_hold_is_bounded_when_markers_never_complete(rt):
    """Markers held back for an hour, hold bound 1.5 s: the add is answered
    CONCURRENT_TRANSACTIONS after about the bound, well before the client's request timeout,
    and the connection stays usable (DIV-200202)."""
    bound_ms = 1_500
    with rt.hold_bound(bound_ms):
        with rt.markers_delayed(3_600_000):
            txn = committed_on_partition_0(rt)
            codes, took = txn.add([1])
            assert codes == {1: E.concurrent_transactions}, codes
            assert bound_ms / 1000 - SLACK_S <= took < 10.0, f"answered after {took:.3f} s"
            assert txn.describe().transaction_state == "PrepareCommit"  # same connection, still usable
    wait_for(lambda: txn.describe().transaction_state == "CompleteCommit", "the markers once released", 20)
    assert txn.add([1])[0] == {1: E.none}
    assert txn.end(committed=False) == E.none
