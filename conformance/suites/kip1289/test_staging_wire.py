"""KIP-1289 on the wire: staging share acknowledgements with TxnShareAcknowledge (api key 93)
and resolving them with the transaction's markers.

Each scenario: one share group member acquires records with ShareFetch, a TV2 transactional
producer (InitProducerId v5 / EndTxn v5) stages ACCEPT/REJECT for them, and the outcome is
read back the way a client sees it: what the member may still acknowledge, what another
member is delivered, the persisted share state (ReadShareGroupState) and DescribeTransactions.
"""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode as E

from clients.share import ACCEPT, ack_codes, delivery_counts
from conformance.suites.kip1289 import (
    GAP, REJECT, RELEASE, RENEW, SHARE_STATE_TOPIC, member_epoch, partition_codes, scenario, stage, staged_ok,
    txn_pending_count, wait_for,
)

ACKNOWLEDGED, ARCHIVED = 2, 4  # persisted delivery states (WriteShareGroupState)

@pytest.mark.requirement("KIP-1289.RPC.001", "KIP-1289.RPC.002", "KIP-1289.STATE.001", "KIP-1289.STATE.003",
                         "KIP-1289.REG.001", "KIP-1289.MARKER.003")
def test_commit_acknowledges_accept_and_archives_reject(kip):
    """Stage ACCEPT for base+1..base+4 (one type for the range) and [1,3,1] for base+5..base+7,
    leaving base with the member so the SPSO cannot move and hide the per-record outcome;
    register __share_group_state-N; commit. The persisted state (ReadShareGroupState) then
    holds base+1..base+5 and base+7 Acknowledged and base+6 Archived (STATE.003: REJECT is
    archived, not acknowledged; DIV-128917); none of base+1..base+7 can be acknowledged by
    the member any more, while base and base+8..9 are still its own."""
    sp, m, epoch, base, txn = scenario(kip)
    resp = stage(m.node, txn, sp.group, m.member, epoch,
                 {sp.key(): [(base + 1, base + 4, [ACCEPT]), (base + 5, base + 7, [ACCEPT, REJECT, ACCEPT])]})
    assert staged_ok(resp), resp
    assert txn_pending_count(kip.target) in (None, 7)
    described = txn.describe()
    assert described.transaction_state == "Ongoing"
    assert any(t.topic == SHARE_STATE_TOPIC and len(t.partitions) == 1 for t in described.topics), described
    assert txn.end(committed=True).error_code == E.none
    wait_for(lambda: txn.describe().transaction_state == "CompleteCommit", "the commit to complete")
    spso, batches = wait_for(lambda: outcome((st := sp.state())[1], base + 6) is not None and st,
                             "the committed outcome persisted")
    assert spso == base, (spso, batches)
    assert {o: outcome(batches, o) for o in range(base + 1, base + 8)} == \
        {**{o: ACKNOWLEDGED for o in range(base + 1, base + 8)}, base + 6: ARCHIVED}, batches
    for o in range(base + 1, base + 8):
        assert ack_codes(m.ack({sp.key(): [(o, o, [ACCEPT])]})) == {0: E.invalid_record_state}, o
    assert ack_codes(m.ack({sp.key(): [(base, base, [ACCEPT]), (base + 8, base + 9, [ACCEPT])]})) == {0: 0}
    wait_for(lambda: sp.state()[0] == base + 10, "SPSO past every record")
    assert txn_pending_count(kip.target) in (None, 0)


def outcome(batches, offset: int) -> int | None:
    """The persisted delivery state of `offset` (None: not in any state batch)."""
    return next((b[2] for b in batches if b[0] <= offset <= b[1]), None)


@pytest.mark.requirement("KIP-1289.STATE.004", "KIP-1289.API.005")
def test_abort_returns_records_to_the_member_and_a_staged_record_refuses_plain_acks(kip):
    """While staged, the member's own ShareAcknowledge of them is INVALID_RECORD_STATE;
    after abort the same ACCEPT succeeds (records back to Acquired by the member) and the
    delivery count was not changed by the abort."""
    sp, m, epoch, base, txn = scenario(kip)
    assert staged_ok(stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base, base + 9, [ACCEPT])]}))
    assert ack_codes(m.ack({sp.key(): [(base, base, [ACCEPT])]})) == {0: E.invalid_record_state}
    assert txn.end(committed=False).error_code == E.none
    # EndTxn returns once PrepareAbort is durable; the marker follows (poll, as a client would).
    wait_for(lambda: ack_codes(m.ack({sp.key(): [(base, base + 4, [ACCEPT])]})) == {0: 0}, "the abort marker")
    assert txn_pending_count(kip.target) in (None, 0)
    assert ack_codes(m.ack({sp.key(): [(base + 5, base + 9, [2])]})) == {0: 0}  # RELEASE
    other = sp.member()
    assert other.fetch_until([sp.key()], 5) == {o: 2 for o in range(base + 5, base + 10)}


@pytest.mark.requirement("KIP-1289.STATE.002", "KIP-1289.STATE.001")
def test_pending_records_are_not_delivered_and_do_not_move_the_spso(kip):
    """Staged records held in an open transaction: another member is not given them even
    after the first member's session closes, and the persisted SPSO stays at base
    (STATE.001: TX_PENDING belongs to the transaction, not to the member's session)."""
    sp, m, epoch, base, txn = scenario(kip)
    assert staged_ok(stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base, base + 9, [ACCEPT])]}))
    m.close()
    other = sp.member()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        resp = other.fetch([sp.key()], max_wait_ms=300)
        assert delivery_counts(resp) == {}, "a TX_PENDING record was delivered to another member"
    assert sp.state()[0] <= base
    assert txn.end(committed=True).error_code == E.none
    wait_for(lambda: sp.state()[0] == base + 10, "SPSO past the committed records")


@pytest.mark.requirement("KIP-1289.ACKTYPE.001", "KIP-1289.CASE.010")
@pytest.mark.parametrize("bad", [GAP, RELEASE, RENEW])
def test_only_accept_and_reject_can_be_staged(kip, bad):
    """A request with ACCEPT on base..base+2 and `bad` on base+3: INVALID_RECORD_STATE, nothing
    staged (the member can ACCEPT base..base+3 normally right after)."""
    sp, m, epoch, base, txn = scenario(kip, 4)
    resp = stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base, base + 2, [ACCEPT]), (base + 3, base + 3, [bad])]})
    assert resp.error_code == E.none and partition_codes(resp) == {sp.key(): E.invalid_record_state}, resp
    assert txn_pending_count(kip.target) in (None, 0)
    assert ack_codes(m.ack({sp.key(): [(base, base + 3, [ACCEPT])]})) == {0: 0}


@pytest.mark.requirement("KIP-1289.FENCE.004")
def test_records_acquired_by_another_member_cannot_be_staged(kip):
    sp, m, epoch, base, txn = scenario(kip)
    other = sp.member()
    other_epoch = member_epoch(kip.cc, sp.group, other.member, sp.member_epochs[other.member])
    resp = stage(m.node, txn, sp.group, other.member, other_epoch, {sp.key(): [(base, base + 2, [ACCEPT])]})
    assert partition_codes(resp) == {sp.key(): E.invalid_record_state}, resp
    assert ack_codes(m.ack({sp.key(): [(base, base + 2, [ACCEPT])]})) == {0: 0}


@pytest.mark.requirement("KIP-1289.FENCE.003", "KIP-1289.CASE.008", "KIP-1289.RPC.003")
def test_unknown_member_and_stale_member_epoch_are_top_level_errors(kip):
    """A random member id: UNKNOWN_MEMBER_ID; the member's epoch minus one: STALE_MEMBER_EPOCH;
    nothing staged either time (the member ACCEPTs normally afterwards)."""
    sp, m, epoch, base, txn = scenario(kip)
    acks = {sp.key(): [(base, base + 9, [ACCEPT])]}
    assert stage(m.node, txn, sp.group, "no-such-member", epoch, acks).error_code == E.unknown_member_id
    resp = stage(m.node, txn, sp.group, m.member, epoch - 1, acks)
    assert resp.error_code == E.stale_member_epoch and not resp.responses, resp
    assert txn_pending_count(kip.target) in (None, 0)
    assert ack_codes(m.ack(acks)) == {0: 0}


@pytest.mark.requirement("KIP-1289.FENCE.001", "KIP-1289.CASE.003", "KIP-1289.CASE.014", "KIP-1289.RPC.003")
def test_zombie_and_stale_epoch_staging_is_fenced(kip):
    """Producer A at epoch e; a new instance re-initialises the transactional id (epoch moves
    on): A's staging is PRODUCER_FENCED and stages nothing. Then the new instance finishes one
    transaction (TV2 bumps the epoch) and a delayed staging at its previous epoch is fenced too."""
    sp, m, epoch, base, zombie = scenario(kip)
    fresh = type(zombie)(kip.cc, zombie.tid).init()
    assert fresh.epoch > zombie.epoch
    acks = {sp.key(): [(base, base + 4, [ACCEPT])]}
    assert stage(m.node, zombie, sp.group, m.member, epoch, acks).error_code in (E.producer_fenced, E.invalid_producer_epoch)
    assert txn_pending_count(kip.target) in (None, 0)
    old_epoch = fresh.epoch
    assert staged_ok(stage(m.node, fresh, sp.group, m.member, epoch, {sp.key(): [(base + 5, base + 5, [ACCEPT])]}))
    assert fresh.end(committed=True).error_code == E.none and fresh.epoch > old_epoch
    wait_for(lambda: fresh.describe().transaction_state == "CompleteCommit", "the commit to complete")
    late = stage(m.node, fresh, sp.group, m.member, epoch, acks, producer_epoch=old_epoch)
    assert late.error_code in (E.producer_fenced, E.invalid_producer_epoch), late
    assert ack_codes(m.ack(acks)) == {0: 0}


@pytest.mark.requirement("KIP-1289.RPC.006", "KIP-1289.RPC.003")
def test_null_transactional_id_and_unknown_producer_are_refused(kip):
    sp, m, epoch, base, txn = scenario(kip, 2)
    acks = {sp.key(): [(base, base + 1, [ACCEPT])]}
    assert stage(m.node, txn, sp.group, m.member, epoch, acks, transactional_id=None).error_code == E.invalid_request
    assert stage(m.node, txn, sp.group, m.member, epoch, acks, producer_id=txn.pid + 1000).error_code == \
        E.invalid_producer_id_mapping
    assert ack_codes(m.ack(acks)) == {0: 0}


@pytest.mark.requirement("KIP-1289.CASE.011", "KIP-1289.RPC.004")
def test_multi_partition_staging_is_all_or_nothing(kip):
    """One request to partition 0's leader: partition 0 valid, partition 1 not acquired (or led
    elsewhere: NOT_LEADER_OR_FOLLOWER with CurrentLeader and its NodeEndpoint): partition 0 is
    not staged either (the member ACCEPTs it normally); committing acknowledges nothing."""
    sp = kip.share_partition(partitions=2)
    m = sp.primed_member(0)
    base = sp.produce([b"a%d" % i for i in range(5)], 0)
    assert len(m.fetch_until([sp.key(0)], 5)) == 5
    epoch = member_epoch(kip.cc, sp.group, m.member, sp.member_epochs[m.member])
    txn = kip.txn()
    resp = stage(m.node, txn, sp.group, m.member, epoch, {sp.key(0): [(base, base + 4, [ACCEPT])], sp.key(1): [(0, 0, [ACCEPT])]})
    codes = partition_codes(resp)
    assert codes[sp.key(0)] == E.none and codes[sp.key(1)] in (E.invalid_record_state, E.not_leader_or_follower), resp
    if codes[sp.key(1)] == E.not_leader_or_follower:
        part = next(p for t in resp.responses for p in t.partitions if int(p.partition_index) == 1)
        leader = int(part.current_leader.leader_id)
        assert leader >= 0 and leader in {int(n.node_id) for n in resp.node_endpoints}, resp
    assert txn_pending_count(kip.target) in (None, 0)
    # Registered only when the checks passed (same leader): a commit of an empty TV2
    # transaction is INVALID_TXN_STATE.
    expected = E.none if codes[sp.key(1)] == E.invalid_record_state else E.invalid_txn_state
    assert txn.end(committed=True).error_code == expected
    assert ack_codes(m.ack({sp.key(0): [(base, base + 4, [ACCEPT])]})) == {0: 0}


@pytest.mark.requirement("KIP-1289.FENCE.001", "KIP-1289.CASE.003", "KIP-1289.MARKER.001")
def test_zombie_staging_into_the_new_instances_open_transaction_is_fenced(kip):
    """Issue 25, FENCE.001 / CASE.003 / MARKER.001: the new instance's transaction is open and
    has already registered the
    share-state partition (its own staging of base..base+4 succeeded) when the zombie (same
    transactional id and producer id, older epoch) stages base+5..base+9. The zombie is fenced
    (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH) and stages nothing: a broker that matches the
    producer id but not the epoch on this path would let the new instance's commit resolve
    the zombie's records too. After the commit only base..base+4 are acknowledged (SPSO at
    base+5) and base+5..base+9 are still the member's to ACCEPT."""
    sp, m, epoch, base, zombie = scenario(kip)
    fresh = type(zombie)(kip.cc, zombie.tid).init()
    kip.txns.append(fresh)
    assert fresh.pid == zombie.pid and fresh.epoch > zombie.epoch, (fresh.pid, fresh.epoch, zombie.epoch)
    assert staged_ok(stage(m.node, fresh, sp.group, m.member, epoch, {sp.key(): [(base, base + 4, [ACCEPT])]}))
    assert any(t.topic == SHARE_STATE_TOPIC for t in fresh.describe().topics)
    late = stage(m.node, zombie, sp.group, m.member, epoch, {sp.key(): [(base + 5, base + 9, [ACCEPT])]})
    assert late.error_code in (E.producer_fenced, E.invalid_producer_epoch), late
    assert txn_pending_count(kip.target) in (None, 5)
    assert fresh.end(committed=True).error_code == E.none
    wait_for(lambda: fresh.describe().transaction_state == "CompleteCommit", "the commit to complete")
    assert wait_for(lambda: (s := sp.state())[0] >= base + 5 and s, "SPSO past the new instance's range")[0] == base + 5
    assert ack_codes(m.ack({sp.key(): [(base + 5, base + 9, [ACCEPT])]})) == {0: 0}, \
        "the zombie's staging was resolved by the new instance's commit"
    wait_for(lambda: sp.state()[0] == base + 10, "SPSO past the member's own ACCEPT")
