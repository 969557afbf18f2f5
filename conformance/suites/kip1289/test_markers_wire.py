"""KIP-1289 markers and time: which WriteTxnMarkers resolve a staging, duplicates and stale
markers, lock expiry and transaction timeout while records are TX_PENDING (corner cases 3,
5, 6, 7, 13, 14)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as E

from clients.share import ACCEPT, ack_codes
from conformance.suites.kip1289 import Txn, inject_marker, scenario, stage, staged_ok, txn_pending_count, wait_for
from conformance.suites.kip1289.test_faults_wire import leader_id

SHORT_LOCK = {"share.record.lock.duration.ms": "1000"}


def held(m, sp, first: int, last: int) -> bool:
    """Are first..last Acquired by the member? Probed with RENEW-free means: an ACCEPT of a
    TX_PENDING record is INVALID_RECORD_STATE and changes nothing, so only call this where an
    ACCEPT that succeeds is the expected end of the scenario."""
    return ack_codes(m.ack({sp.key(): [(first, last, [ACCEPT])]})) == {0: 0}


def other_node(kip, sp) -> int | None:
    """A broker that does not lead the share-partition (None on one node)."""
    leader = leader_id(kip.cc, sp.topic)
    return next((n for n in kip.target.node_ids if n != leader), None)


@pytest.mark.requirement("KIP-1289.MARKER.001", "KIP-1289.MARKER.003", "KIP-1289.FENCE.002")
def test_markers_resolve_only_their_own_producers_staging(kip):
    """Producers A and B stage disjoint ranges. Markers at the share-partition leader with A's
    staging epoch (not later), an older one or another producer id change nothing; with 2+
    brokers, A's resolving ABORT marker at a broker that does not lead the share-partition
    changes nothing either (MARKER.003: the hook covers the share-partitions "on that
    broker"): had it reached A's staging, the records would be the member's again and its
    ACCEPT below would succeed, on any target.
    Committing A acknowledges A's range only (B's stays TX_PENDING: its ACCEPT is refused).
    Then the control that makes the refusals above evidence: B's resolving ABORT marker,
    injected at the leader exactly like them, gives B's range back to the member
    (DIV-128920); B's own abort afterwards is a no-op."""
    sp, m, epoch, base, a = scenario(kip)
    b = kip.txn()
    assert staged_ok(stage(m.node, a, sp.group, m.member, epoch, {sp.key(): [(base, base + 4, [ACCEPT])]}))
    assert staged_ok(stage(m.node, b, sp.group, m.member, epoch, {sp.key(): [(base + 5, base + 9, [ACCEPT])]}))
    for pid, ep in ((a.pid, a.epoch), (a.pid, a.epoch - 1), (a.pid + b.pid + 1, a.epoch + 1)):
        inject_marker(m.node, pid, ep, True)
    elsewhere = other_node(kip, sp)
    if elsewhere is not None:
        inject_marker(kip.cc.node(elsewhere), a.pid, a.epoch + 1, False)
    assert txn_pending_count(kip.target) in (None, 10)
    assert ack_codes(m.ack({sp.key(): [(base, base, [ACCEPT])]})) == {0: E.invalid_record_state}, \
        "A's staging was resolved by a marker that must not reach it"
    assert a.end(committed=True).error_code == E.none
    wait_for(lambda: sp.state()[0] == base + 5, "A's range acknowledged (SPSO at B's range)")
    assert ack_codes(m.ack({sp.key(): [(base + 5, base + 5, [ACCEPT])]})) == {0: E.invalid_record_state}
    assert txn_pending_count(kip.target) in (None, 5)
    inject_marker(m.node, b.pid, b.epoch + 1, False)
    assert txn_pending_count(kip.target) in (None, 0), "the injected resolving marker reached no staging"
    assert held(m, sp, base + 5, base + 9), "B's range did not come back with the member after its ABORT marker"
    assert b.end(committed=False).error_code == E.none
    wait_for(lambda: sp.state()[0] == base + 10, "SPSO past the member's own ACCEPT")


@pytest.mark.requirement("KIP-1289.MARKER.002", "KIP-1289.CASE.005", "KIP-1289.CASE.014", "KIP-1289.FENCE.002")
def test_duplicate_and_stale_markers_change_nothing(kip):
    """After a committed staging, the same marker again leaves the persisted state as it is.
    The producer's next transaction stages at the bumped epoch; a late copy of the first
    transaction's marker (that same epoch) does not resolve it; its own marker, injected the
    same way, does (so the refusals are evidence, DIV-128920), and its EndTxn then changes
    nothing (FENCE.002: a marker resolves only records staged with its producer id and an
    earlier epoch)."""
    sp, m, epoch, base, txn = scenario(kip)
    assert staged_ok(stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base, base + 4, [ACCEPT])]}))
    assert txn.end(committed=True).error_code == E.none
    marker_epoch = txn.epoch  # TV2: the marker carried the bumped epoch EndTxn returned
    wait_for(lambda: txn.describe().transaction_state == "CompleteCommit", "the commit to complete")
    before = wait_for(lambda: (s := sp.state())[0] == base + 5 and s, "SPSO past the committed range")
    inject_marker(m.node, txn.pid, marker_epoch, True)
    assert sp.state() == before
    assert staged_ok(stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base + 5, base + 9, [ACCEPT])]}))
    inject_marker(m.node, txn.pid, marker_epoch, True)
    assert txn_pending_count(kip.target) in (None, 5)
    assert ack_codes(m.ack({sp.key(): [(base + 5, base + 5, [ACCEPT])]})) == {0: E.invalid_record_state}
    # The control: the second transaction's own marker, injected the same way, resolves it.
    inject_marker(m.node, txn.pid, txn.epoch + 1, True)
    wait_for(lambda: sp.state()[0] == base + 10, "the second transaction's own marker, injected")
    assert txn.end(committed=True).error_code == E.none


@pytest.mark.requirement("KIP-1289.CASE.006")
def test_lock_expiry_while_pending_releases_the_records_and_the_commit_ignores_them(kip):
    """Lock 1 s: stage, let the lock expire: the records go to another member (delivery count
    2); the transaction then commits but does not acknowledge them (the new holder's ACCEPT
    succeeds)."""
    sp, m, epoch, base, txn = scenario(kip, 5, SHORT_LOCK)
    assert staged_ok(stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base, base + 4, [ACCEPT])]}))
    other = sp.member()
    assert other.fetch_until([sp.key()], 5, wait_s=10) == {o: 2 for o in range(base, base + 5)}
    assert txn.end(committed=True).error_code == E.none
    wait_for(lambda: txn.describe().transaction_state == "CompleteCommit", "the commit to complete")
    assert ack_codes(other.ack({sp.key(): [(base, base + 4, [ACCEPT])]})) == {0: 0}


@pytest.mark.requirement("KIP-1289.CASE.013")
def test_abort_marker_arriving_after_lock_expiry_is_a_no_op(kip):
    """The abort's marker is held back (the transaction is left open) until the lock expired
    and another member holds the records; the marker then arrives: nothing changes (the new
    holder still owns them and can ACCEPT)."""
    sp, m, epoch, base, txn = scenario(kip, 5, SHORT_LOCK)
    assert staged_ok(stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base, base + 4, [ACCEPT])]}))
    other = sp.member()
    assert other.fetch_until([sp.key()], 5, wait_s=10) == {o: 2 for o in range(base, base + 5)}
    inject_marker(m.node, txn.pid, txn.epoch + 1, False)
    assert txn.end(committed=False).error_code == E.none
    wait_for(lambda: txn.describe().transaction_state == "CompleteAbort", "the abort to complete")
    assert ack_codes(other.ack({sp.key(): [(base, base + 4, [ACCEPT])]})) == {0: 0}


@pytest.mark.requirement("KIP-1289.CASE.007")
def test_transaction_timeout_aborts_and_returns_the_records(kip):
    """transaction timeout 2 s, the producer stages and goes silent: the coordinator aborts the
    transaction (epoch bump) and its marker returns the records to the member, who can then
    ACCEPT them; nothing was acknowledged by the transaction."""
    sp, m, epoch, base, _ = scenario(kip, 5)
    txn = Txn(kip.cc, kip.unique.transactional_id(), timeout_ms=2000).init()
    assert staged_ok(stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base, base + 4, [ACCEPT])]}))
    wait_for(lambda: txn.describe().transaction_state == "CompleteAbort", "the timeout abort", wait_s=30)
    assert sp.state()[0] <= base
    wait_for(lambda: held(m, sp, base, base + 4), "the records back with the member", wait_s=10)
