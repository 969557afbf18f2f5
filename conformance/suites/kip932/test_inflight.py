"""KIP-932 in-flight records on the wire: acquisition, delivery counts, exclusivity and the
seed's "In-flight records example".

Observed through ShareFetch / ShareAcknowledge answers (what a member gets, with which
delivery count) on every target, through the share coordinator's persisted state
(ReadShareGroupState: SPSO and the Available / Acknowledged / Archived batches) where the
target offers it, and on the reference also through its share-partition model.
"""

from __future__ import annotations

import time

import pytest

from clients import wire
from clients.share import (
    ACCEPT, ACKNOWLEDGED, ARCHIVED, AVAILABLE, READ_SHARE_GROUP_STATE, REJECT, RELEASE, E,
    SharePartitionUnderTest, ack_codes, acquired, delivery_counts, effective_spso, partition_data, persisted_states,
    require_share_groups, set_group_configs_if_known,
)
from conformance.suites import require_nodes
from targets.target import NotSupportedByTarget
from reference_impl.handlers.share_fetch import share_manager
from reference_impl.protocol import records as r
from reference_impl.protocol.api_keys import ApiKey


@pytest.fixture
def sp(target, unique):
    with wire.cluster_client(target) as cc:
        yield SharePartitionUnderTest(target, cc, unique.topic(), unique.group())


def batch_offsets(resp, tid) -> list[int]:
    """Offsets of the records in the partition's returned batches, in wire order."""
    pd = partition_data(resp, tid)
    return [rec.offset for rec in r.iter_records(pd.records)] if pd is not None and pd.records else []


@pytest.mark.requirement("KIP-932.STATE.003", "KIP-932.STATE.006", "KIP-932.FETCH.001", "KIP-932.ORDER.001")
def test_acquisition_counts_deliveries_from_one(sp):
    """A first delivery has count 1; each release and re-acquisition adds one; the acquired
    offsets are records of the returned batches, in increasing order."""
    sp.open()
    a = sp.primed_member()
    base = sp.produce([b"v%d" % i for i in range(10)])
    mine = range(base, base + 10)
    resp = a.fetch([sp.key()], max_wait_ms=2000)
    assert resp.error_code == E.none, resp
    assert delivery_counts(resp) == {o: 1 for o in mine}
    returned = batch_offsets(resp, sp.tid)
    assert returned == sorted(returned) and len(set(returned)) == len(returned), returned
    assert set(delivery_counts(resp)) <= set(returned), "acquired offsets outside the returned batches"
    for expected_count in (2, 3):
        assert ack_codes(a.ack({sp.key(): [(base + 5, base + 5, [RELEASE])]})) == {0: 0}
        again = a.fetch([sp.key()], max_wait_ms=2000)
        assert delivery_counts(again) == {base + 5: expected_count}
        assert batch_offsets(again, sp.tid) == sorted(batch_offsets(again, sp.tid))
    assert ack_codes(a.ack({sp.key(): [(base, base + 9, [ACCEPT])]})) == {0: 0}


@pytest.mark.requirement("KIP-932.FETCH.002")
def test_acquired_ranges_follow_batches(sp):
    """Three batches of 10 records, no contention: one AcquiredRecords range per batch."""
    sp.open()
    a = sp.primed_member()
    base = sp.produce_batches(3, 10)
    got: list[tuple[int, int, int]] = []
    for _ in range(10):
        got += acquired(a.fetch([sp.key()], max_wait_ms=500))
        if sum(l - f + 1 for f, l, _ in got) >= 30:
            break
    merged_by_batch = [(base + 10 * i, base + 10 * i + 9, 1) for i in range(3)]
    # A range may cover several whole batches; it must never cut one.
    cuts = {f for f, _, _ in got} | {l + 1 for _, l, _ in got}
    assert cuts <= {base + 10 * i for i in range(4)}, f"acquired ranges {got} split a batch of {merged_by_batch}"
    assert sorted(o for f, l, _ in got for o in range(f, l + 1)) == list(range(base, base + 30))


@pytest.mark.requirement("KIP-932.STATE.004", "KIP-932.FETCH.001", "KIP-932.ACK.002", "KIP-932.STATE.006")
def test_acquired_records_belong_to_one_member(sp, record_property):
    """Member A holds 0..9: member B gets none of them and cannot acknowledge them; once A
    releases them B gets them with delivery count 2."""
    sp.open()
    a = sp.primed_member()
    b = sp.member()
    base = sp.produce([b"v%d" % i for i in range(10)])
    held = a.fetch_until([sp.key()], 10)
    assert held == {o: 1 for o in range(base, base + 10)}
    assert delivery_counts(b.fetch([sp.key()], max_wait_ms=300)) == {}
    assert ack_codes(b.ack({sp.key(): [(base, base + 4, [ACCEPT])]})) == {0: E.invalid_record_state}
    assert delivery_counts(b.fetch([sp.key()])) == {}
    assert ack_codes(a.ack({sp.key(): [(base, base + 9, [RELEASE])]})) == {0: 0}
    assert b.fetch_until([sp.key()], 10) == {o: 2 for o in range(base, base + 10)}
    record_property("redelivered_ranges", [(f - base, l - base, c) for f, l, c in b.last_ranges])
    assert ack_codes(b.ack({sp.key(): [(base, base + 9, [ACCEPT])]})) == {0: 0}


def reference_states(target, group, tid, offsets) -> dict[int, tuple[str, int]] | None:
    """offset -> (state name, delivery count) from the reference's share-partition model."""
    if target.kind != "reference":
        return None
    sp = share_manager(target.cluster.cluster.state).get(group, tid, 0)
    return {o: (sp.state_of(o).name, sp.delivery_count_of(o)) for o in offsets}


@pytest.mark.requirement(
    "KIP-932.STATE.001", "KIP-932.STATE.002", "KIP-932.STATE.004", "KIP-932.STATE.005",
    "KIP-932.STATE.006", "KIP-932.STATE.008", "KIP-932.STATE.009",
)
def test_in_flight_records_example(sp, target, record_property):
    """The seed's example, offsets 0..9 shifted to the partition's base: 0-1 Archived
    (acknowledged, SPSO passed them), 2 and 4 Acquired (count 1), 3 Available after two
    deliveries, 5 Acknowledged, 6 Archived (rejected), 7-9 Available, never delivered."""
    sp.open()
    a = sp.primed_member()
    b = sp.member()
    base = sp.produce([b"v%d" % i for i in range(7)])
    o = lambda i: base + i  # noqa: E731 - the example's offset i
    assert a.fetch_until([sp.key()], 7) == {o(i): 1 for i in range(7)}
    assert ack_codes(a.ack({sp.key(): [(o(3), o(3), [RELEASE])]})) == {0: 0}
    assert delivery_counts(a.fetch([sp.key()], max_wait_ms=1000)) == {o(3): 2}
    # One request, per-offset types: 0-1 ACCEPT, 3 RELEASE, 5 ACCEPT, 6 REJECT; 2 and 4 stay held.
    assert ack_codes(a.ack({sp.key(): [(o(0), o(1), [ACCEPT]), (o(3), o(3), [RELEASE]), (o(5), o(6), [ACCEPT, REJECT])]})) == {0: 0}
    assert sp.produce([b"v%d" % i for i in range(7, 10)]) == o(7)

    persisted = None
    if target.capabilities().supports_api(READ_SHARE_GROUP_STATE):
        start, batches = sp.state()
        persisted = persisted_states(batches)
        record_property("persisted_state", {"start_offset": start - base, "batches": [(f - base, l - base, s, c) for f, l, s, c in batches]})
        assert effective_spso(start, batches) == o(2), f"persisted SPSO {start - base} with {batches}; the example has 2"
        assert all(off >= start for off in persisted), f"persisted batches below the start offset: {batches}"
        assert persisted.get(o(3)) == (AVAILABLE, 2), batches
        assert persisted.get(o(5), (None,))[0] == ACKNOWLEDGED, batches
        assert persisted.get(o(6), (None,))[0] == ARCHIVED, batches
        assert all(persisted.get(o(i), (AVAILABLE,))[0] == AVAILABLE for i in (2, 4)), "Acquired is never persisted"
    model = reference_states(target, sp.group, sp.tid, [o(i) for i in range(10)])
    if model is not None:
        record_property("reference_model", {i: model[o(i)] for i in range(10)})
        assert [model[o(i)] for i in range(10)] == [
            ("ARCHIVED", 0) if i < 2 else s for i, s in enumerate([
                None, None, ("ACQUIRED", 1), ("AVAILABLE", 2), ("ACQUIRED", 1), ("ACKNOWLEDGED", 1), ("ARCHIVED", 1),
                ("AVAILABLE", 0), ("AVAILABLE", 0), ("AVAILABLE", 0)])
        ]

    # Observable effects: B gets 3 (third delivery) and 7-9 (first); never 0-1, 2/4 (A's), 5, 6.
    got = b.fetch_until([sp.key()], 4)
    assert got == {o(3): 3, o(7): 1, o(8): 1, o(9): 1}
    assert delivery_counts(b.fetch([sp.key()], max_wait_ms=300)) == {}
    # A's 2 and 4 are still A's to acknowledge; then the SPSO passes everything.
    assert ack_codes(a.ack({sp.key(): [(o(2), o(2), [ACCEPT]), (o(4), o(4), [ACCEPT])]})) == {0: 0}
    assert ack_codes(b.ack({sp.key(): [(o(3), o(3), [ACCEPT]), (o(7), o(9), [ACCEPT])]})) == {0: 0}
    if persisted is not None:
        assert effective_spso(*sp.state()) == o(10)
    # STATE.002: a record produced beyond the window is delivered with count 1, nothing below.
    after = sp.produce([b"late"])
    assert a.fetch_until([sp.key()], 1) == {after: 1}


def wait_new_leader(sp: SharePartitionUnderTest, old: int, wait_s: float = 20.0) -> int:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for t in sp.cc.refresh([sp.topic]).topics:
            if t.name == sp.topic and t.partitions and t.partitions[0].leader_id not in (old, -1):
                return int(t.partitions[0].leader_id)
        time.sleep(0.2)
    raise AssertionError(f"partition 0 of {sp.topic} never left node {old}")


def wait_full_isr(sp: SharePartitionUnderTest, replicas: int = 3, wait_s: float = 30.0) -> None:
    """Until every replica of partition 0 is in sync, so a new leader has the records."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for t in sp.cc.refresh([sp.topic]).topics:
            if t.name == sp.topic and t.partitions and len(t.partitions[0].isr_nodes) >= replicas:
                return
        time.sleep(0.2)
    raise AssertionError(f"partition 0 of {sp.topic} never had {replicas} in-sync replicas")


LEADER_CHANGE_LOCK_S = 60  # Kafka's group.share.max.record.lock.duration.ms default


@pytest.mark.requirement("KIP-932.STATE.012")
def test_acquired_records_come_back_after_a_leader_change(target, unique, record_property):
    """Acquired is not persisted: A holds 0..9 (60 s lock), the leader is killed; on the new
    leader 0..9 are delivered again well before A's lock would have expired (a loaded machine
    can take half a minute to move the leadership: broker session timeout, election).

    A first accepts one record, so the share coordinator holds an SPSO: a share-partition
    that was only ever fetched has none persisted (ReadShareGroupState answers -1, the KIP's
    "initial SPSO ... based on group.share.auto.offset.reset"), and the new leader would
    start at the latest offset, past the acquired records (seen on Kafka 4.4.0, 3 brokers,
    kafka-native and testcontainers alike)."""
    require_share_groups(target)
    require_nodes(target, 3)
    if target.kind == "librdkafka-mock":  # targets/librdkafka_mock.py: kill_node moves no leadership
        raise NotSupportedByTarget("the mock does not move partition leadership away from a down broker")
    with wire.cluster_client(target) as cc:
        sp = SharePartitionUnderTest(target, cc, unique.topic(), unique.group())
        if target.capabilities().supports_api(ApiKey.CREATE_TOPICS):
            assert wire.create_topic(cc, sp.topic, 1, replication=3) == E.none
        else:
            target.provision_topic(sp.topic, 1)  # librdkafka's mock: replicated to min(3, brokers)
        sp.tid = sp.wait_topic_id()
        set_group_configs_if_known(cc, sp.group, {"share.record.lock.duration.ms": str(LEADER_CHANGE_LOCK_S * 1000)})
        a = sp.primed_member()
        wait_full_isr(sp)
        seed = sp.produce([b"seed"])
        assert a.fetch_until([sp.key()], 1, wait_s=30) == {seed: 1}
        # Kafka answers the acknowledgement once WriteShareGroupState is replicated.
        assert ack_codes(a.ack({sp.key(): [(seed, seed, [ACCEPT])]})) == {0: E.none}
        base = sp.produce([b"v%d" % i for i in range(10)])
        wait_full_isr(sp)
        assert a.fetch_until([sp.key()], 10) == {o: 1 for o in range(base, base + 10)}
        lock_expiry = time.monotonic() + LEADER_CHANGE_LOCK_S  # A's lock, at the latest
        old = next(int(t.partitions[0].leader_id) for t in cc.refresh([sp.topic]).topics if t.name == sp.topic)
        survivors = ",".join(f"{h}:{p}" for nid, (h, p) in cc.nodes.items() if nid != old)
        target.kill_node(old)
        t0 = time.monotonic()
        try:
            with target.cluster_client(survivors) as alive:
                sp.cc = alive
                wait_new_leader(sp, old)
                b = sp.member()
                got = b.fetch_until([sp.key()], 10, wait_s=max(1.0, lock_expiry - 5 - time.monotonic()))
                before_expiry = lock_expiry - time.monotonic()
                record_property("redelivery", {"counts": sorted(set(got.values())), "seconds": round(time.monotonic() - t0, 1),
                                               "before_lock_expiry_s": round(before_expiry, 1)})
                leader = alive.leader_for(sp.topic, 0)
                log = {"earliest": int(wire.list_offset(leader, sp.topic, 0, -2).offset),
                       "latest": int(wire.list_offset(leader, sp.topic, 0, -1).offset)}
                record_property("new_leader_log", log)
                assert log["earliest"] <= base, f"the new leader's log starts at {log['earliest']}: the records were lost by the log"
                assert set(got) == set(range(base, base + 10)), f"the accepted {seed} or the acquired {base}..{base + 9}: {got}"
                assert before_expiry > 0, f"redelivered only after A's {LEADER_CHANGE_LOCK_S} s lock"
        finally:
            target.restart_node(old)
