"""KIP-447 under the consumer group protocol (KIP-848, issue 28), the parts only a KIP-848
group has: member-epoch fencing of OffsetCommit v9+, the older-epoch rule of Kafka 4.4,
reconciliation (a partition is revoked before it is reassigned) with a transaction in
flight on the revoked partition, and pending transactional offsets of a member.

Group G on a 2-partition topic; members join with raw ConsumerGroupHeartbeat
(clients.groups). The tests of test_group_fencing.py and test_fencing_parity.py run under
both protocols; these run only where the target speaks KIP-848 (`consumer_protocol`).
"""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from clients import groups, wire
from conformance.suites.kip447 import (
    CONSUMER,
    ILLEGAL_GENERATION,
    STALE_MEMBER_EPOCH,
    UNSTABLE_OFFSET_COMMIT,
    RawTxn,
    aged_member_txn,
    group_under_test,
    offset_fetch,
    require_stable_fetch,
    require_txn_offset_commit_v3,
)

UNSUPPORTED_VERSION = ErrorCode.unsupported_version
REFUSED_STALE = (ILLEGAL_GENERATION, STALE_MEMBER_EPOCH)


def _stable(coord, group: str, topic: str, partitions: list[int], timeout_s: float = 15.0) -> dict[str, list[int]]:
    """Stable OffsetFetch until no partition answers UNSTABLE_OFFSET_COMMIT."""
    deadline = time.monotonic() + timeout_s
    while True:
        _, ans = offset_fetch(coord, group, topic, partitions, require_stable=True)
        if all(e != UNSTABLE_OFFSET_COMMIT for _, e in ans.values()) or time.monotonic() > deadline:
            return {str(p): [o, e] for p, (o, e) in sorted(ans.items())}
        time.sleep(0.05)


def epoch_scenario(target, ids):
    """A owns p0, p1 at e1; a rival takes p1 and A reaches e2 owning p0. Commits with (e1, p1),
    (e1, p0) and (e2, p0), transactional and plain (OffsetCommit v9 and v8)."""
    with wire.cluster_client(target) as cc:
        start = aged_member_txn(target, cc, ids, CONSUMER)
        g, a, e1, revoked, txn = start.g, start.member, start.first_epoch, start.revoked, start.txn
        coord = a.coordinator
        _, txn_stale = txn.txn_offset_commit(g.group, g.topic, {revoked: 11}, generation=e1, member_id=a.member_id)
        _, txn_older = txn.txn_offset_commit(g.group, g.topic, {0: 12}, generation=e1, member_id=a.member_id)
        _, txn_current = txn.txn_offset_commit(g.group, g.topic, {0: 13}, generation=a.epoch, member_id=a.member_id)
        end = txn.end(commit=True)
        after_txn = _stable(coord, g.group, g.topic, [0, revoked])

        def plain(partition: int, epoch: int, offset: int, version: int) -> int:
            return wire.offset_commit(coord, g.group, g.topic, partition, offset, generation=epoch,
                                      member_id=a.member_id, highest=version, lowest=version)

        oc = {"v9_stale": plain(revoked, e1, 21, 9), "v9_older": plain(0, e1, 22, 9),
              "v9_current": plain(0, a.epoch, 23, 9), "v8_current": plain(0, a.epoch, 24, 8)}
        after_plain = _stable(coord, g.group, g.topic, [0, revoked])
    return {"setup": a.errors, "aged": a.epoch > e1 and a.partitions() == [0], "revoked": revoked,
            "txn": {"stale": txn_stale[revoked], "older": txn_older[0], "current": txn_current[0]}, "end": end,
            "after_txn": after_txn, "offset_commit": oc, "after_plain": after_plain}


@pytest.mark.requirement("KIP-848.FENCE.002")
def test_offset_commit_v9_refuses_a_stale_member_epoch(target, differential, consumer_protocol):
    """KIP-848.FENCE.002: OffsetCommit v9 with an epoch the member no longer holds for the partition answers
    STALE_MEMBER_EPOCH and stores nothing; OffsetCommit below v9 from a KIP-848 member answers
    UNSUPPORTED_VERSION (Kafka's ConsumerGroup.validateOffsetCommit)."""
    obs = differential.run(epoch_scenario).target
    assert obs["setup"] == [] and obs["aged"], obs
    oc, revoked = obs["offset_commit"], str(obs["revoked"])
    assert oc["v9_stale"] == STALE_MEMBER_EPOCH, f"OffsetCommit v9 with a stale member epoch: {oc}"
    assert obs["after_plain"][revoked] == [-1, 0], f"a refused OffsetCommit stored its offset: {obs}"
    assert oc["v9_current"] == 0, oc
    assert oc["v8_current"] == UNSUPPORTED_VERSION, f"OffsetCommit v8 from a consumer-protocol member: {oc}"


@pytest.mark.requirement("KIP-848.FENCE.005", "KIP-848.FENCE.001")
def test_older_member_epoch_on_a_kept_partition(target, differential, consumer_protocol, record_property):
    """KIP-848.FENCE.005: a commit with the member's previous epoch for a partition it kept is
    accepted by Kafka 4.4.0 (the partition's assignment epoch) and refused by the KIP's strict
    reading; either is conforming and recorded (DIV-84803). The same commit for the partition
    it gave up is refused either way (KIP-848.FENCE.001), and only accepted offsets count."""
    obs = differential.run(epoch_scenario, requirement="KIP-848.FENCE.005").target
    assert obs["setup"] == [] and obs["aged"], obs
    txn, oc = obs["txn"], obs["offset_commit"]
    assert txn["stale"] in REFUSED_STALE and txn["current"] == 0 and obs["end"] == 0, obs
    assert txn["older"] in (0, *REFUSED_STALE) and oc["v9_older"] in (0, *REFUSED_STALE), obs
    record_property("follows:older_epoch_owned_partition", "kafka" if txn["older"] == 0 else "kip")
    assert obs["after_txn"] == {"0": [13, 0], str(obs["revoked"]): [-1, 0]}, obs
    assert obs["after_plain"]["0"] == [23, 0], obs


def revocation_scenario(target, ids):
    """A owns p0, p1 (rebalance timeout 20 s); B joins; A hears p1 is revoked but keeps
    owning it for ~1.5 s while it commits p1=30 in a transaction with its current epoch; B's
    heartbeats meanwhile; then A acknowledges and B gets p1."""
    with wire.cluster_client(target) as cc:
        g = group_under_test(target, cc, ids, CONSUMER)
        a = groups.join_consumer(cc, g.group, [g.topic], rebalance_ms=20_000, want=2)
        b = groups.join_consumer(cc, g.group, [g.topic], rebalance_ms=20_000)
        kept = a.learn_revocation()
        b_while_a_owns: set[int] = set()
        txn = RawTxn(cc, ids.transactional_id())
        txn.init()
        add = txn.add_offsets(g.group)
        _, staged = txn.txn_offset_commit(g.group, g.topic, {1: 30}, generation=a.epoch, member_id=a.member_id)
        end = txn.end(commit=True)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            b.beat()
            b_while_a_owns |= set(b.partitions())
            a.beat(ack=False)
            time.sleep(0.2)
        acked = a.beat()  # acknowledge: A now owns only what it kept
        deadline = time.monotonic() + 15
        while 1 not in b.partitions() and time.monotonic() < deadline:
            acked = acked or a.beat()  # A stays alive: the release completes on its next heartbeats
            b.beat()
            time.sleep(0.2)
        after = _stable(b.coordinator, g.group, g.topic, [1])
    return {"setup": a.errors + b.errors, "kept": kept,
            "b_while_a_owns": sorted(b_while_a_owns), "add": add, "staged": staged[1], "end": end, "acked": acked,
            "a_after_ack": a.partitions(), "b_after_ack": b.partitions(), "after": after["1"]}


@pytest.mark.requirement("KIP-848.RECONCILE.001", "KIP-848.TXN.001")
def test_revoked_partition_is_not_reassigned_before_its_transaction_ends(target, differential, consumer_protocol):
    """No partition has two owners: B is not given p1 while A still owns it; A finishes its
    in-flight transaction on p1 with its current epoch, acknowledges, and B starts at A's
    committed offset."""
    require_txn_offset_commit_v3(target)
    obs = differential.run(revocation_scenario, requirement="KIP-848.RECONCILE.001").target
    assert obs["setup"] == [] and obs["kept"] == [0], obs
    assert 1 not in obs["b_while_a_owns"], f"KIP-848.RECONCILE.001: p1 was assigned to B while A owned it: {obs}"
    assert obs["add"] == 0 and obs["staged"] == 0 and obs["end"] == 0, (
        f"KIP-848.TXN.001: the owner's in-flight transaction on a partition being revoked was refused: {obs}")
    assert obs["acked"] == 0 and obs["a_after_ack"] == [0] and obs["b_after_ack"] == [1], obs
    assert obs["after"] == [30, 0], f"KIP-848.TXN.001: B does not start at A's committed offset: {obs}"


def pending_scenario(target, ids):
    """Member A (epoch e) stages p0=100 with TxnOffsetCommit(e, A); OffsetFetch v9 naming A
    with RequireStable while pending and after the commit."""
    with wire.cluster_client(target) as cc:
        g = group_under_test(target, cc, ids, CONSUMER)
        a = g.join()
        coord = a.coordinator
        txn = RawTxn(cc, ids.transactional_id())
        txn.init()
        add = txn.add_offsets(g.group)
        _, staged = txn.txn_offset_commit(g.group, g.topic, {0: 100}, generation=a.epoch, member_id=a.member_id)
        version, pending = offset_fetch(coord, g.group, g.topic, [0, 1], require_stable=True, member=a)
        _, unstable = offset_fetch(coord, g.group, g.topic, [0, 1], require_stable=False, member=a)
        end = txn.end(commit=True)
        after = _stable(coord, g.group, g.topic, [0, 1])
    return {"setup": a.errors, "add": add, "staged": staged[0], "version": version,
            "pending": {str(p): list(v) for p, v in sorted(pending.items())},
            "unstable": {str(p): list(v) for p, v in sorted(unstable.items())}, "end": end, "after": after}


@pytest.mark.requirement("KIP-848.TXN.002")
def test_member_pending_txn_offsets_and_require_stable(target, differential, consumer_protocol):
    """KIP-848.TXN.002: KIP-447's pending offsets under the consumer protocol: the member's staged offset makes a
    stable OffsetFetch (v9, naming the member) answer UNSTABLE_OFFSET_COMMIT for that partition
    only; without RequireStable nothing is committed yet; the commit resolves it to 100."""
    require_stable_fetch(target)
    obs = differential.run(pending_scenario).target
    assert obs["setup"] == [] and obs["add"] == 0 and obs["staged"] == 0, obs
    assert obs["pending"] == {"0": [-1, UNSTABLE_OFFSET_COMMIT], "1": [-1, 0]}, obs
    assert obs["unstable"] == {"0": [-1, 0], "1": [-1, 0]}, obs
    assert obs["end"] == 0 and obs["after"] == {"0": [100, 0], "1": [-1, 0]}, obs
