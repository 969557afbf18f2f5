"""KIP-932 share-partition start offset (SPSO) on the wire: initialisation (latest by
default, earliest, by_duration), new partitions from offset 0, and the seed's worked
"Managing durable share-partition state" example step by step.

The SPSO is read from the share coordinator (ReadShareGroupState). Kafka 4.x persists the
start offset of the state *before* the acknowledgement being written (it moves the
in-memory SPSO once the write completed), so the stored start offset lags one write; the
SPSO the state implies (`effective_spso`: start moved over leading Acknowledged/Archived
batches) is what the tests compare, and the raw stored value is recorded as a property.
"""

from __future__ import annotations

import time

import pytest

from clients import confluent, wire
from clients.share import (
    ACCEPT, RELEASE, E, SharePartitionUnderTest, ShareSession, ack_codes,
    alter_group_configs, delivery_counts, effective_spso, heartbeat, require_share_groups,
)
from targets.target import NotSupportedByTarget
from reference_impl.protocol import records as r
from reference_impl.protocol.api_keys import ApiKey


@pytest.fixture
def sp(target, unique):
    with wire.cluster_client(target) as cc:
        yield SharePartitionUnderTest(target, cc, unique.topic(), unique.group())


@pytest.mark.requirement("KIP-932.SPSO.001", "KIP-932.STATE.002")
def test_spso_starts_at_the_latest_offset_by_default(sp, target, record_property):
    """10 records exist before the group's first fetch: none is delivered; the 5 produced
    afterwards are, with count 1."""
    sp.open()
    sp.produce([b"old%d" % i for i in range(10)])
    a = sp.member()
    first = a.fetch([sp.key()], max_wait_ms=500)
    assert first.error_code == E.none and delivery_counts(first) == {}
    base = sp.produce([b"new%d" % i for i in range(5)])
    assert base == 10
    assert a.fetch_until([sp.key()], 5) == {o: 1 for o in range(10, 15)}
    assert delivery_counts(a.fetch([sp.key()], max_wait_ms=300)) == {}
    assert ack_codes(a.ack({sp.key(): [(10, 14, [ACCEPT])]})) == {0: 0}
    if target.capabilities().supports_api(ApiKey.READ_SHARE_GROUP_STATE):
        start, batches = sp.state()
        record_property("persisted", [start, batches])
        assert effective_spso(start, batches) == 15


@pytest.mark.requirement("KIP-932.SPSO.002")
def test_spso_earliest_delivers_existing_records(sp):
    """share.auto.offset.reset=earliest set before first use: the 10 records produced before
    the group joined are all delivered; a value other than latest/earliest/by_duration is
    refused with INVALID_CONFIG."""
    sp.open({"share.auto.offset.reset": "earliest"})
    code, message = alter_group_configs(sp.cc, sp.group, {"share.auto.offset.reset": "oldest"})
    assert code == E.invalid_config, (code, message)
    sp.produce([b"v%d" % i for i in range(10)])
    a = sp.member()
    assert a.fetch_until([sp.key()], 10) == {o: 1 for o in range(10)}


def produce_at(sp: SharePartitionUnderTest, values: list[bytes], timestamp_ms: int) -> int:
    resp = wire.produce(sp.cc.leader_for(sp.topic, 0), sp.topic, 0, r.build_batch(values, timestamp_ms=timestamp_ms))
    assert resp.error_code == E.none, resp
    return int(resp.base_offset)


@pytest.mark.requirement("KIP-932.SPSO.002")
def test_spso_by_duration_starts_at_the_first_recent_record(sp):
    """share.auto.offset.reset=by_duration:PT1H (Kafka's extension): of records stamped two
    hours ago and records stamped now, only the recent ones are delivered."""
    sp.open({"share.auto.offset.reset": "by_duration:PT1H"})
    now = int(time.time() * 1000)
    produce_at(sp, [b"old%d" % i for i in range(5)], now - 2 * 3600_000)
    recent = produce_at(sp, [b"new%d" % i for i in range(5)], now)
    a = sp.member()
    assert a.fetch_until([sp.key()], 5) == {o: 1 for o in range(recent, recent + 5)}
    assert delivery_counts(a.fetch([sp.key()], max_wait_ms=300)) == {}


def wait_assigned(sp: SharePartitionUnderTest, member: str, epoch: int, partition: int, wait_s: float = 20.0) -> int:
    """Heartbeat until the member's assignment has `partition` of the topic; its epoch."""
    coord = sp.cc.coordinator_for(sp.group, 0)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        resp = heartbeat(coord, sp.group, member, epoch)
        assert resp.error_code == E.none, resp
        epoch = int(resp.member_epoch)
        if resp.assignment is not None and any(
                tp.topic_id == sp.tid and partition in tp.partitions for tp in resp.assignment.topic_partitions):
            return epoch
        time.sleep(0.3)
    raise AssertionError(f"partition {partition} never assigned to {member}")


@pytest.mark.requirement("KIP-932.SPSO.003")
def test_added_partition_starts_at_offset_zero(sp):
    """Group subscribed with the default latest reset; the topic grows from 1 to 2
    partitions and 5 records land in partition 1 before the group first fetches it: all 5
    are delivered."""
    require_share_groups(sp.target)
    if not sp.target.capabilities().supports_api(ApiKey.CREATE_PARTITIONS):
        raise NotSupportedByTarget("CreatePartitions is not advertised")
    sp.open()
    a = sp.primed_member()
    from confluent_kafka.admin import NewPartitions

    admin = confluent.admin(sp.target)  # kept referenced until the future resolves
    admin.create_partitions([NewPartitions(sp.topic, 2)])[sp.topic].result(30)
    deadline = time.monotonic() + 15
    while True:  # wait for partition 1's leader
        try:
            sp.cc.refresh([sp.topic])
            sp.cc.leader_for(sp.topic, 1)
            base = sp.produce([b"p1-%d" % i for i in range(5)], p=1)
            break
        except Exception:  # noqa: BLE001 - metadata not there yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    assert base == 0
    wait_assigned(sp, a.member, sp.member_epochs[a.member], 1)
    s1 = ShareSession(sp.cc.leader_for(sp.topic, 1), sp.group, a.member)
    assert s1.fetch_until([sp.key(1)], 5) == {o: 1 for o in range(5)}


def spso_now(sp: SharePartitionUnderTest, log: list) -> int:
    start, batches = sp.state()
    log.append((start, batches))
    return effective_spso(start, batches)


@pytest.mark.requirement("KIP-932.STATE.009", "KIP-932.STATE.010", "KIP-932.STATE.002", "KIP-932.ORDER.001")
def test_durable_state_example(sp, record_property):
    """The seed's worked example with offsets 110..119 shifted to 0..9 (batches 0-2, 3-8, 9):
    three members, release 0, ack 9, re-fetch 0 (count 2), 1-2 released (the seed lets
    their lock expire; test_locks covers expiry), ack 3-8, member 3 re-fetches 1-2 (count 2),
    ack 0 -> SPSO 1, ack 1-2 -> SPSO 10. The SPSO never passes an Available or Acquired
    record, and redelivered 0..2 come after 9 (ORDER.001 allows it)."""
    require_share_groups(sp.target)
    if not sp.target.capabilities().supports_api(ApiKey.READ_SHARE_GROUP_STATE):
        raise NotSupportedByTarget("the SPSO is observed with ReadShareGroupState, which the target lacks")
    sp.open()
    c1, c2, c3 = sp.primed_member(), sp.member(), sp.member()
    sp.produce([b"a%d" % i for i in range(3)])
    sp.produce([b"b%d" % i for i in range(6)])
    sp.produce([b"c"])
    log: list = []
    assert c1.fetch_until([sp.key()], 3, max_records=3) == {0: 1, 1: 1, 2: 1}
    assert c2.fetch_until([sp.key()], 6, max_records=6) == {o: 1 for o in range(3, 9)}
    assert c3.fetch_until([sp.key()], 1, max_records=1) == {9: 1}
    steps = []
    assert ack_codes(c1.ack({sp.key(): [(0, 0, [RELEASE])]})) == {0: 0}
    steps.append(("release 0", spso_now(sp, log), 0))
    assert ack_codes(c3.ack({sp.key(): [(9, 9, [ACCEPT])]})) == {0: 0}
    steps.append(("ack 9", spso_now(sp, log), 0))
    assert c1.fetch_until([sp.key()], 1) == {0: 2}
    assert ack_codes(c1.ack({sp.key(): [(1, 2, [RELEASE])]})) == {0: 0}
    steps.append(("1-2 back to available", spso_now(sp, log), 0))
    assert ack_codes(c2.ack({sp.key(): [(3, 8, [ACCEPT])]})) == {0: 0}
    steps.append(("ack 3-8", spso_now(sp, log), 0))
    assert c3.fetch_until([sp.key()], 2) == {1: 2, 2: 2}
    assert ack_codes(c1.ack({sp.key(): [(0, 0, [ACCEPT])]})) == {0: 0}
    steps.append(("ack 0", spso_now(sp, log), 1))
    assert ack_codes(c3.ack({sp.key(): [(1, 2, [ACCEPT])]})) == {0: 0}
    steps.append(("ack 1-2", spso_now(sp, log), 10))
    stored = [start for start, _ in log]
    implied = [got for _, got, _ in steps]
    before = [0] + implied[:-1]  # the SPSO before each step (0: the topic's first offset)
    # KIP: each write carries the new SPSO. Kafka 4.x: the start offset as it was before
    # the write (one write behind), the batches already final.
    follows = "kip" if stored == implied else "kafka" if stored == before else "neither"
    record_property("steps", steps)
    record_property("stored_start_offsets", {"stored": stored, "implied": implied, "follows": follows})
    assert [(name, got) for name, got, _ in steps] == [(name, want) for name, _, want in steps]
    assert follows != "neither", (stored, implied)


def require_delete_records(sp: SharePartitionUnderTest) -> None:
    require_share_groups(sp.target)
    if not sp.target.capabilities().supports_api(ApiKey.DELETE_RECORDS):
        raise NotSupportedByTarget("DeleteRecords is not advertised")


def delete_records_before(sp: SharePartitionUnderTest, offset: int) -> None:
    """DeleteRecords (the log start offset of partition 0 moves to `offset`)."""
    from confluent_kafka import TopicPartition

    admin = confluent.admin(sp.target)  # kept referenced until the future resolves
    futures = admin.delete_records([TopicPartition(sp.topic, 0, offset)])
    for f in futures.values():
        assert f.result(30).low_watermark == offset


@pytest.mark.requirement("KIP-932.SPSO.005")
def test_spso_follows_the_log_start_offset(sp, target):
    """SPSO 0 and 100 unconsumed records; DeleteRecords up to 50: only 50..99 are delivered
    and the SPSO ends past them."""
    require_delete_records(sp)
    sp.open()
    a = sp.primed_member()
    sp.produce_batches(10, 10)
    delete_records_before(sp, 50)
    got = a.fetch_until([sp.key()], 50)
    assert got == {o: 1 for o in range(50, 100)}
    assert ack_codes(a.ack({sp.key(): [(50, 99, [ACCEPT])]})) == {0: 0}
    if target.capabilities().supports_api(ApiKey.READ_SHARE_GROUP_STATE):
        assert effective_spso(*sp.state()) == 100


@pytest.mark.requirement("KIP-932.SPSO.006")
def test_acquired_records_below_a_new_log_start_can_be_acknowledged(sp, target):
    """Acquire 0..9, DeleteRecords up to 5, ACCEPT 0..9: no error, nothing redelivered, and
    the next record produced is the next one delivered."""
    require_delete_records(sp)
    sp.open()
    a = sp.primed_member()
    sp.produce([b"v%d" % i for i in range(10)])
    assert a.fetch_until([sp.key()], 10) == {o: 1 for o in range(10)}
    delete_records_before(sp, 5)
    assert ack_codes(a.ack({sp.key(): [(0, 9, [ACCEPT])]})) == {0: 0}
    nxt = sp.produce([b"next"])
    assert a.fetch_until([sp.key()], 1) == {nxt: 1}
    if target.capabilities().supports_api(ApiKey.READ_SHARE_GROUP_STATE):
        assert effective_spso(*sp.state()) >= 10


@pytest.mark.requirement("KIP-932.SPSO.006")
def test_released_records_overtaken_by_a_new_log_start_are_not_redelivered(sp, target):
    """KIP-932.SPSO.006, the RELEASE case: acquire 0..9, DeleteRecords up to 5, RELEASE 0..9:
    no error; 5..9 come back (count 2)
    and 0..4 never do, although they were released rather than accepted (KIP "Log
    retention": records below the log start offset are Archived, whatever their state)."""
    require_delete_records(sp)
    sp.open()
    a = sp.primed_member()
    base = sp.produce([b"v%d" % i for i in range(10)])
    assert a.fetch_until([sp.key()], 10) == {o: 1 for o in range(base, base + 10)}
    delete_records_before(sp, base + 5)
    assert ack_codes(a.ack({sp.key(): [(base, base + 9, [RELEASE])]})) == {0: 0}
    got = a.fetch_until([sp.key()], 5)
    assert got == {o: 2 for o in range(base + 5, base + 10)}, f"overtaken records 0..4 were redelivered: {got}"
    assert ack_codes(a.ack({sp.key(): [(base + 5, base + 9, [ACCEPT])]})) == {0: 0}
    nxt = sp.produce([b"next"])
    assert a.fetch_until([sp.key()], 1) == {nxt: 1}
    if target.capabilities().supports_api(ApiKey.READ_SHARE_GROUP_STATE):
        assert effective_spso(*sp.state()) >= base + 10
