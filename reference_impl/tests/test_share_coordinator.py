"""Share coordinator / persister model (KIP-932 SCOORD, PERSIST) and its five RPC handlers.

Model tests run on a ManualClock with the in-model `__share_group_state` log; the wire
tests attach a ShareCoordinator to a ThreadedReferenceCluster's state themselves.
"""

from __future__ import annotations

import random
import uuid

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient
from reference_impl.model.clock import ManualClock
from reference_impl.model.share_coordinator import (
    ShareCoordinator,
    ShareCoordinatorConfig,
    ShareGroupOffset,
    merge_state_batches,
    topic_exists_in,
)
from reference_impl.model.share_state_records import (
    DeliveryState,
    RecordType,
    SharePartitionKey,
    ShareSnapshotValue,
    ShareStateLog,
    ShareUpdateValue,
    StateBatch,
    coordinator_key,
    java_string_hash,
    kafka_abs,
    kafka_uuid_str,
    parse_kafka_uuid,
    snapshot_record,
    state_partition_for,
    update_record,
)
from reference_impl.protocol import framing, payloads
from reference_impl.server.broker_server import ThreadedReferenceCluster

AVAIL, ACKED, ARCHIVED = DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED
G = "G1"
TID = uuid.UUID("0f5a3e9c-2f0c-4b9e-9f7e-3c1d2b4a5e6f")
KEY = SharePartitionKey(G, TID, 0)


def B(first: int, last: int, state: int, count: int) -> StateBatch:
    return StateBatch(first, last, int(state), count)


def make(limit: int = 500, **kw) -> tuple[ShareCoordinator, ManualClock]:
    clock = ManualClock()
    return ShareCoordinator(clock, ShareCoordinatorConfig(snapshot_update_records_per_snapshot=limit), **kw), clock


def write(sc: ShareCoordinator, start: int = -1, batches=(), *, state_epoch: int = 1, leader_epoch: int = 0,
          partition: int = 0, group: str = G, topic=TID):
    return sc.write(group, topic, partition, state_epoch=state_epoch, leader_epoch=leader_epoch,
                    start_offset=start, state_batches=tuple(batches))


def assert_replay_equal(sc: ShareCoordinator) -> ShareCoordinator:
    rebuilt = ShareCoordinator.rebuild(sc)
    assert rebuilt.snapshot() == sc.snapshot()
    assert rebuilt.fencing_state() == sc.fencing_state()
    assert rebuilt.last_redundant_offset() == sc.last_redundant_offset()
    assert [r.offset for r in rebuilt.log] == [r.offset for r in sc.log]
    return rebuilt


# ----------------------------------------------------------------------------- keys


def test_coordinator_key_uses_kafka_uuid_text_and_utils_abs_placement():
    text = kafka_uuid_str(TID)
    assert len(text) == 22 and "=" not in text and parse_kafka_uuid(text) == TID
    assert coordinator_key(G, TID, 3) == f"G1:{text}:3" == SharePartitionKey(G, TID, 3).coordinator_key
    assert java_string_hash("") == 0 and java_string_hash("abc") == 96354
    assert kafka_abs(-(2**31)) == 0 and kafka_abs(-7) == 7
    for p in range(20):
        k = coordinator_key(G, TID, p)
        assert state_partition_for(k) == kafka_abs(java_string_hash(k)) % 50
        assert 0 <= state_partition_for(k, 7) < 7


# ----------------------------------------------------------------- the KIP's worked example


KIP_STEPS = [
    # (what happened, StartOffset, StateBatches written, expected SPSO, expected batches)
    ("start at 100", 100, [], 100, ()),
    ("acknowledge 100-109", 110, [], 110, ()),
    ("release 110", -1, [B(110, 110, AVAIL, 1)], 110, (B(110, 110, AVAIL, 1),)),
    ("acknowledge 119", -1, [B(119, 119, ACKED, 1)], 110, (B(110, 110, AVAIL, 1), B(119, 119, ACKED, 1))),
    ("lock timeout 111-112", -1, [B(111, 112, AVAIL, 1)], 110, (B(110, 112, AVAIL, 1), B(119, 119, ACKED, 1))),
    ("acknowledge 113-118", -1, [B(113, 118, ACKED, 1)], 110, (B(110, 112, AVAIL, 1), B(113, 119, ACKED, 1))),
    # The KIP's cumulative column says SPSO=111 here, but its request carries StartOffset -1,
    # so the persisted SPSO stays 110 and offset 110 is kept as Acknowledged (count 2).
    ("acknowledge 110", -1, [B(110, 110, ACKED, 2)], 110,
     (B(110, 110, ACKED, 2), B(111, 112, AVAIL, 1), B(113, 119, ACKED, 1))),
    ("acknowledge 111-112", 120, [], 120, ()),
]


def test_kip_worked_write_sequence_step_by_step():
    sc, _ = make()
    init = sc.initialize(G, TID, 0, state_epoch=1, start_offset=-1)
    assert init.ok and len(init.records) == 1
    r0 = init.records[0]
    assert r0.record_type is RecordType.SHARE_SNAPSHOT and r0.offset == 0
    assert r0.value == ShareSnapshotValue(0, 1, 0, -1, (), r0.value.create_timestamp, r0.value.write_timestamp)
    for i, (what, start, batches, spso, expected) in enumerate(KIP_STEPS, start=1):
        res = write(sc, start, batches)
        assert res.ok, what
        (rec,) = res.records
        # Each write is one ShareUpdate carrying exactly the request's delta.
        assert rec.offset == i and rec.record_type is RecordType.SHARE_UPDATE, what
        assert rec.value == ShareUpdateValue(snapshot_epoch=0, leader_epoch=0, start_offset=start,
                                             state_batches=tuple(batches)), what
        state = sc.state(KEY)
        assert (state.start_offset, state.state_batches) == (spso, expected), what
        read = sc.read(G, TID, 0, leader_epoch=0)
        assert read.ok and read.records == () and (read.start_offset, read.state_batches) == (spso, expected), what
        assert read.state_epoch == 1
        assert_replay_equal(sc)
    assert [r.record_type for r in sc.log] == [RecordType.SHARE_SNAPSHOT] + [RecordType.SHARE_UPDATE] * len(KIP_STEPS)


def test_kip_worked_sequence_with_small_snapshot_limit():
    """limit 2: snapshots interleave; the first cycle holds limit+1 updates (Kafka's counter)."""
    sc, _ = make(limit=2)
    sc.initialize(G, TID, 0, state_epoch=1, start_offset=-1)
    kinds = []
    for _, start, batches, spso, expected in KIP_STEPS:
        (rec,) = write(sc, start, batches).records
        kinds.append((rec.record_type, rec.value.snapshot_epoch))
        assert (sc.state(KEY).start_offset, sc.state(KEY).state_batches) == (spso, expected)
        if rec.is_snapshot:  # a snapshot carries the full merged state
            assert (rec.value.start_offset, rec.value.state_batches) == (spso, expected)
        assert_replay_equal(sc)
    S, U = RecordType.SHARE_SNAPSHOT, RecordType.SHARE_UPDATE
    assert kinds == [(U, 0), (U, 0), (U, 0), (S, 1), (U, 1), (U, 1), (S, 2), (U, 2)]


def test_seed_example_only_non_acquired_state_is_persisted():
    """PERSIST.006: SPSO 2, offset 3 Available (count 2), 5 Acknowledged, 6 Archived."""
    sc, _ = make()
    sc.initialize(G, TID, 0, 1, 0)
    batches = [B(3, 3, AVAIL, 2), B(5, 5, ACKED, 1), B(6, 6, ARCHIVED, 1)]
    assert write(sc, 2, batches).ok
    r = sc.read(G, TID, 0, 0)
    assert (r.start_offset, r.state_batches) == (2, tuple(batches))


# ----------------------------------------------------------------------------- snapshots


def _cycles(sc: ShareCoordinator, key=KEY) -> list[int]:
    """Number of ShareUpdates between consecutive ShareSnapshots of `key`."""
    out, n = [], None
    for r in sc.log.records_for(key):
        if r.is_snapshot:
            if n is not None:
                out.append(n)
            n = 0
        else:
            n += 1
    return out


def test_snapshot_cadence_default_500():
    sc, _ = make()
    assert sc.config.snapshot_update_records_per_snapshot == 500
    sc.initialize(G, TID, 0, 1, 0)
    for i in range(1200):
        assert write(sc, i + 1, []).ok
    snaps = [r for r in sc.log if r.is_snapshot]
    assert [s.value.snapshot_epoch for s in snaps] == [0, 1, 2]
    assert _cycles(sc) == [501, 500]  # first cycle one longer: Kafka's counter starts at 0
    current = 0
    for r in sc.log:  # every update repeats the latest snapshot epoch
        if r.is_snapshot:
            current = r.value.snapshot_epoch
        else:
            assert r.value.snapshot_epoch == current
    assert sc.state(KEY).start_offset == 1200
    assert_replay_equal(sc)


def test_snapshot_limit_zero_writes_only_snapshots():
    sc, _ = make(limit=0)
    sc.initialize(G, TID, 0, 1, 0)
    for i in range(5):
        (rec,) = write(sc, -1, [B(i, i, ACKED, 1)]).records
        assert rec.is_snapshot and rec.value.snapshot_epoch == i + 1
    assert sc.state(KEY).state_batches == (B(0, 4, ACKED, 1),)
    assert_replay_equal(sc)


def test_forced_snapshot_and_cold_partition_snapshots():
    sc, clock = make()
    sc.initialize(G, TID, 0, 1, 5)
    write(sc, -1, [B(7, 9, AVAIL, 2)])
    res = sc.force_snapshot(G, TID, 0)
    (rec,) = res.records
    assert rec.is_snapshot and rec.value.snapshot_epoch == 1
    assert (rec.value.start_offset, rec.value.state_batches) == (5, (B(7, 9, AVAIL, 2),))
    assert sc.snapshot_cold_partitions() == []  # not old enough yet
    clock.advance(sc.config.cold_partition_snapshot_interval_ms)
    (cold,) = sc.snapshot_cold_partitions()
    assert cold.value.snapshot_epoch == 2 and cold.value.write_timestamp == clock.now_ms()
    assert cold.value.create_timestamp == rec.value.create_timestamp
    clock.advance(sc.config.cold_partition_snapshot_interval_ms)
    assert sc.snapshot_cold_partitions() == []  # everything already cold-snapshotted: quiet
    assert_replay_equal(sc)


# ----------------------------------------------------------------------------- fencing


def test_state_epoch_fencing():
    sc, _ = make()
    sc.initialize(G, TID, 0, state_epoch=5, start_offset=10)
    write(sc, 12, [], state_epoch=5)
    before, log_len = sc.state(KEY), len(sc.log)
    res = write(sc, 20, [], state_epoch=4)
    assert res.error == ErrorCode.fenced_state_epoch and res.records == ()
    assert sc.state(KEY) == before and len(sc.log) == log_len
    assert write(sc, 13, [], state_epoch=-1).ok  # -1 skips the check
    assert write(sc, 14, [], state_epoch=9).ok  # newer: accepted, not recorded (Kafka)
    assert sc.state(KEY).state_epoch == 5
    # Initialize: older epoch fenced; same epoch repeats safely (new snapshot); newer replaces.
    assert sc.initialize(G, TID, 0, 4, 0).error == ErrorCode.fenced_state_epoch
    again = sc.initialize(G, TID, 0, 5, 10)
    assert again.ok and again.records[0].value.snapshot_epoch == 1
    assert sc.read_summary(G, TID, 0).state_epoch == 5
    alter = sc.initialize(G, TID, 0, 6, 0)
    assert alter.ok and sc.state(KEY).state_epoch == 6 and sc.state(KEY).start_offset == 0
    assert write(sc, 3, [], state_epoch=5).error == ErrorCode.fenced_state_epoch
    assert_replay_equal(sc)


def test_leader_epoch_fencing():
    sc, _ = make()
    sc.initialize(G, TID, 0, 1, 0)
    assert sc.leader_epoch(KEY) == 0  # Kafka stores 0 on initialize (KIP: -1)
    # Only a read records a new leader epoch; it appends a record without batches.
    r = sc.read(G, TID, 0, leader_epoch=3)
    assert r.ok and len(r.records) == 1 and r.records[0].value.leader_epoch == 3
    assert r.records[0].value.state_batches == () and sc.leader_epoch(KEY) == 3
    assert sc.read(G, TID, 0, leader_epoch=3).records == ()  # same epoch: nothing written
    assert write(sc, 1, [], leader_epoch=2).error == ErrorCode.fenced_leader_epoch
    assert sc.read(G, TID, 0, leader_epoch=2).error == ErrorCode.fenced_leader_epoch
    assert sc.read(G, TID, 0, leader_epoch=-1).error == ErrorCode.fenced_leader_epoch
    assert write(sc, 1, [], leader_epoch=-1).ok  # writes skip the check for -1
    # A write with a higher leader epoch is accepted but does not raise the stored one.
    assert write(sc, 2, [], leader_epoch=7).ok and sc.leader_epoch(KEY) == 3
    assert write(sc, 3, [], leader_epoch=4).ok
    # A new state epoch does not reset Kafka's fencing epoch.
    sc.initialize(G, TID, 0, 2, 0)
    assert write(sc, 1, [], state_epoch=2, leader_epoch=1).error == ErrorCode.fenced_leader_epoch
    assert sc.read_summary(G, TID, 0, leader_epoch=0).ok  # summary never fences
    assert_replay_equal(sc)


def test_uninitialized_share_partition():
    sc, _ = make()
    assert write(sc, 0, []).error == ErrorCode.invalid_request
    assert sc.read(G, TID, 0, 0).error == ErrorCode.invalid_request
    s = sc.read_summary(G, TID, 0, 0)
    assert s.ok and (s.start_offset, s.leader_epoch, s.state_epoch) == (-1, 0, 0)
    assert len(sc.log) == 0


def test_invalid_keys_unknown_topics_and_loading():
    known = {(TID, 0)}
    sc, _ = make(topic_exists=lambda t, p: (t, p) in known)
    assert sc.initialize(G, TID, -1, 1, 0).error == ErrorCode.invalid_request
    assert sc.initialize(G, None, 0, 1, 0).error == ErrorCode.invalid_request
    assert sc.initialize(G, TID, 1, 1, 0).error == ErrorCode.unknown_topic_or_partition
    assert sc.initialize(G, TID, 0, 1, 0).ok
    known.clear()  # topic deleted
    assert write(sc, 1, []).error == ErrorCode.unknown_topic_or_partition
    assert sc.read(G, TID, 0, 0).error == ErrorCode.unknown_topic_or_partition
    assert sc.delete(G, TID, 0).error == ErrorCode.unknown_topic_or_partition
    (tomb,) = sc.cleanup_deleted_topics([TID])
    assert tomb.is_tombstone and sc.state(KEY) is None
    known.add((TID, 0))
    sc.initialize(G, TID, 0, 1, 0)
    sc.begin_loading([sc.state_partition_for(KEY)])
    for res in (sc.read(G, TID, 0, 0), write(sc, 1, []), sc.read_summary(G, TID, 0), sc.delete(G, TID, 0),
                sc.initialize(G, TID, 0, 1, 0)):
        assert res.error == ErrorCode.coordinator_load_in_progress
    sc.finish_loading()
    assert sc.read(G, TID, 0, 0).ok


# ----------------------------------------------------------------------------- merging


@pytest.mark.parametrize(
    "so_far, new, start, expected",
    [
        ([], [], -1, ()),
        ([B(5, 9, AVAIL, 1)], [], 7, (B(7, 9, AVAIL, 1),)),
        ([B(5, 9, AVAIL, 1)], [], 10, ()),
        # contiguous, same state and count: coalesced
        ([B(1, 3, ACKED, 1)], [B(4, 6, ACKED, 1)], -1, (B(1, 6, ACKED, 1),)),
        # contiguous, different state: kept apart
        ([B(1, 3, ACKED, 1)], [B(4, 6, AVAIL, 1)], -1, (B(1, 3, ACKED, 1), B(4, 6, AVAIL, 1))),
        # overlap: higher delivery count wins wherever it covers
        ([B(1, 10, AVAIL, 1)], [B(4, 6, AVAIL, 2)], -1, (B(1, 3, AVAIL, 1), B(4, 6, AVAIL, 2), B(7, 10, AVAIL, 1))),
        # overlap, same count: higher state wins
        ([B(1, 10, ACKED, 1)], [B(4, 6, AVAIL, 1)], -1, (B(1, 10, ACKED, 1),)),
        ([B(1, 10, AVAIL, 1)], [B(4, 6, ARCHIVED, 1)], -1, (B(1, 3, AVAIL, 1), B(4, 6, ARCHIVED, 1), B(7, 10, AVAIL, 1))),
        # a lower-priority newer batch only fills gaps
        ([B(5, 8, ACKED, 3)], [B(1, 10, AVAIL, 1)], -1, (B(1, 4, AVAIL, 1), B(5, 8, ACKED, 3), B(9, 10, AVAIL, 1))),
        # start offset prunes before merging
        ([B(1, 5, AVAIL, 2), B(8, 9, ACKED, 1)], [B(4, 8, AVAIL, 1)], 4,
         (B(4, 5, AVAIL, 2), B(6, 7, AVAIL, 1), B(8, 9, ACKED, 1))),
    ],
)
def test_merge_cases(so_far, new, start, expected):
    assert merge_state_batches(so_far, new, start) == expected


def _oracle(batches, start):
    per: dict[int, tuple[int, int]] = {}
    for b in batches:
        for o in range(b.first_offset, b.last_offset + 1):
            if start != -1 and o < start:
                continue
            per[o] = max(per.get(o, (-1, -1)), b.priority)
    return per


def test_merge_matches_per_offset_priority_oracle():
    rng = random.Random(932)
    for _ in range(400):
        def rand_batches(n):
            out = []
            for _ in range(n):
                f = rng.randrange(0, 40)
                out.append(B(f, f + rng.randrange(0, 8), rng.choice([0, 2, 4]), rng.randrange(1, 4)))
            return out

        so_far, new = rand_batches(rng.randrange(0, 5)), rand_batches(rng.randrange(0, 5))
        start = rng.choice([-1, rng.randrange(0, 45)])
        merged = merge_state_batches(so_far, new, start)
        if len(so_far) + len(new) < 2 and start == -1:
            continue  # Kafka passes a lone batch through untouched
        got = {o: b.priority for b in merged for o in range(b.first_offset, b.last_offset + 1)}
        assert got == _oracle(so_far + new, start)
        for a, b in zip(merged, merged[1:]):  # sorted, disjoint, maximally coalesced
            assert a.last_offset < b.first_offset
            assert not (a.last_offset + 1 == b.first_offset and a.priority == b.priority)


# ------------------------------------------------------------------------ delete and replay


def test_delete_writes_tombstone_and_replay_forgets():
    sc, _ = make()
    other = SharePartitionKey(G, TID, 1)
    sc.initialize(G, TID, 0, 1, 0)
    sc.initialize(G, TID, 1, 1, 0)
    write(sc, 5, [B(6, 7, ACKED, 1)])
    res = sc.delete(G, TID, 0)
    (tomb,) = res.records
    assert res.ok and tomb.is_tombstone and tomb.record_type is RecordType.SHARE_SNAPSHOT
    assert sc.state(KEY) is None and sc.state(other) is not None and sc.leader_epoch(KEY) is None
    assert sc.read(G, TID, 0, 0).error == ErrorCode.invalid_request
    assert sc.read_summary(G, TID, 0).start_offset == -1
    again = sc.delete(G, TID, 0)
    assert again.ok and again.records == ()  # absent state: success, nothing written
    rebuilt = assert_replay_equal(sc)
    assert rebuilt.state(KEY) is None
    fresh = sc.initialize(G, TID, 0, 3, -1)
    assert fresh.records[0].value.snapshot_epoch == 0  # a fresh state, not a continuation
    assert sc.state(KEY).state_batches == ()


def test_replay_accepts_the_kips_deletion_marker():
    log = ShareStateLog()
    log.append(snapshot_record(KEY, ShareSnapshotValue(0, 1, 0, 10)))
    log.append(snapshot_record(KEY, ShareSnapshotValue(-1, 1, 0, 10)))
    sc = ShareCoordinator(ManualClock(), log=log)
    assert sc.state(KEY) is None


def test_replay_equality_under_random_operations():
    rng = random.Random(4242)
    sc, clock = make(limit=3)
    keys = [SharePartitionKey(g, TID, p) for g in ("a", "b") for p in range(3)]
    epochs = {k: 1 for k in keys}
    for step in range(600):
        k = rng.choice(keys)
        op = rng.random()
        clock.advance(rng.randrange(0, 50_000))
        if op < 0.08:
            epochs[k] += rng.choice([0, 1])
            sc.initialize(k.group_id, k.topic_id, k.partition, epochs[k], rng.choice([-1, rng.randrange(0, 100)]))
        elif op < 0.12:
            sc.delete(k.group_id, k.topic_id, k.partition)
        elif op < 0.2:
            sc.read(k.group_id, k.topic_id, k.partition, rng.randrange(-1, 6))
        elif op < 0.23:
            sc.snapshot_cold_partitions()
        else:
            f = rng.randrange(0, 120)
            batches = [B(f, f + rng.randrange(0, 6), rng.choice([0, 2, 4]), rng.randrange(1, 5))]
            write(sc, rng.choice([-1, -1, rng.randrange(0, 120)]), batches, group=k.group_id,
                  partition=k.partition, state_epoch=epochs[k], leader_epoch=rng.randrange(-1, 6))
        if step % 50 == 0:
            assert_replay_equal(sc)
    assert_replay_equal(sc)
    # Pruning below the last redundant offset keeps the rebuilt state identical.
    before = sc.snapshot()
    start = sc.prune()
    assert start > 0 and start == sc.log.log_start_offset
    assert all(r.offset >= start for r in sc.log)
    rebuilt = ShareCoordinator.rebuild(sc)
    assert rebuilt.snapshot() == before


def test_last_redundant_offset_waits_for_idle_partitions():
    sc, clock = make(limit=0)  # every write is a snapshot
    sc.initialize("a", TID, 0, 1, 0)  # offset 0, then idle
    sc.initialize("b", TID, 0, 1, 0)  # offset 1
    for i in range(5):
        write(sc, i, [], group="b")
    assert sc.last_redundant_offset() is None  # "a"'s only snapshot is at offset 0
    clock.advance(sc.config.cold_partition_snapshot_interval_ms)
    sc.snapshot_cold_partitions()
    assert sc.last_redundant_offset() == min(r.offset for r in sc.log if r.key.group_id == "a" and r.offset > 0)
    sc.prune()
    assert ShareCoordinator.rebuild(sc).snapshot() == sc.snapshot()


def test_state_from_update_without_snapshot_like_kafka():
    """A ShareUpdate for unknown state (its snapshot pruned away) becomes the state."""
    log = ShareStateLog()
    log.append(update_record(KEY, ShareUpdateValue(4, 2, 30, (B(31, 31, ACKED, 1),))))
    sc = ShareCoordinator(ManualClock(), log=log)
    assert sc.state(KEY) == ShareGroupOffset(4, 0, 2, 30, (B(31, 31, ACKED, 1),))
    assert sc.update_count(KEY) == 0


# ----------------------------------------------------------------------------- wire


def _cluster_with_coordinator(brokers: int):
    threaded = ThreadedReferenceCluster(brokers=brokers)
    threaded.start()
    state = threaded.cluster.state
    created = state.topics.create("share-t", num_partitions=3)
    state.share_coordinator = ShareCoordinator(state.clock, topic_exists=topic_exists_in(state.topics))
    return threaded, created.topic_id


def _client_for(threaded, cc, topic_id, partition, group=G, coordinator=True):
    state = threaded.cluster.state
    node = state.coordinator_for(coordinator_key(group, topic_id, partition))
    if not coordinator:
        node = next(n for n in sorted(state.nodes) if n != node)
    return cc.node(node)


def test_persister_rpcs_over_the_wire():
    threaded, topic_id = _cluster_with_coordinator(3)
    try:
        with ClusterClient(threaded.bootstrap_servers) as cc:
            def req(key, version, partition_fields, *, group=G, topics_cls, part_cls, topic=topic_id):
                cls = framing.request_schema(key, version)
                part = payloads.build(payloads.nested(cls, part_cls), **partition_fields)
                t = payloads.build(payloads.nested(cls, topics_cls), topic_id=topic, partitions=(part,))
                return payloads.build(cls, group_id=group, topics=(t,))

            coord = _client_for(threaded, cc, topic_id, 0)
            other = _client_for(threaded, cc, topic_id, 0, coordinator=False)

            def one(resp):
                (res,) = resp.results
                (p,) = res.partitions
                return p

            init = req(83, 0, dict(partition=0, state_epoch=2, start_offset=-1),
                       topics_cls="InitializeStateData", part_cls="PartitionData")
            assert one(other.send(init)).error_code == ErrorCode.not_coordinator
            assert one(coord.send(init)).error_code == ErrorCode.none

            read = req(84, 0, dict(partition=0, leader_epoch=1), topics_cls="ReadStateData", part_cls="PartitionData")
            p = one(coord.send(read))
            assert (p.error_code, p.state_epoch, p.start_offset, p.state_batches) == (ErrorCode.none, 2, -1, ())

            batch_cls = payloads.nested(framing.request_schema(85, 1), "StateBatch")
            wr = req(85, 1, dict(partition=0, state_epoch=2, leader_epoch=1, start_offset=100,
                                 delivery_complete_count=7,
                                 state_batches=(payloads.build(batch_cls, first_offset=101, last_offset=103,
                                                               delivery_state=2, delivery_count=1),)),
                     topics_cls="WriteStateData", part_cls="PartitionData")
            assert one(coord.send(wr)).error_code == ErrorCode.none
            p = one(coord.send(read))
            assert p.start_offset == 100 and [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                              for b in p.state_batches] == [(101, 103, 2, 1)]

            fenced = req(85, 0, dict(partition=0, state_epoch=1, leader_epoch=1, start_offset=200, state_batches=()),
                         topics_cls="WriteStateData", part_cls="PartitionData")
            assert one(coord.send(fenced)).error_code == ErrorCode.fenced_state_epoch
            zombie = req(85, 0, dict(partition=0, state_epoch=2, leader_epoch=0, start_offset=200, state_batches=()),
                         topics_cls="WriteStateData", part_cls="PartitionData")
            assert one(coord.send(zombie)).error_code == ErrorCode.fenced_leader_epoch

            for version in (0, 1):
                summ = req(87, version, dict(partition=0, leader_epoch=1),
                           topics_cls="ReadStateSummaryData", part_cls="PartitionData")
                p = one(coord.send(summ))
                assert (p.error_code, p.state_epoch, p.leader_epoch, p.start_offset) == (ErrorCode.none, 2, 1, 100)
                if version == 1:
                    assert p.delivery_complete_count == 7

            missing = req(84, 0, dict(partition=1, leader_epoch=1), topics_cls="ReadStateData", part_cls="PartitionData")
            miss_coord = _client_for(threaded, cc, topic_id, 1)
            assert one(miss_coord.send(missing)).error_code == ErrorCode.invalid_request
            unknown = req(83, 0, dict(partition=9, state_epoch=1, start_offset=0),
                          topics_cls="InitializeStateData", part_cls="PartitionData")
            unknown_answer = one(_client_for(threaded, cc, topic_id, 9).send(unknown))
            assert unknown_answer.error_code == ErrorCode.unknown_topic_or_partition

            delete = req(86, 0, dict(partition=0), topics_cls="DeleteStateData", part_cls="PartitionData")
            assert one(coord.send(delete)).error_code == ErrorCode.none
            assert one(coord.send(read)).error_code == ErrorCode.invalid_request

            # A partition repeated in one request is answered once (Kafka keys results by partition).
            cls = framing.request_schema(87, 1)
            part = payloads.build(payloads.nested(cls, "PartitionData"), partition=1, leader_epoch=0)
            twice = payloads.build(cls, group_id=G, topics=(
                payloads.build(payloads.nested(cls, "ReadStateSummaryData"), topic_id=topic_id, partitions=(part, part)),))
            (res,) = miss_coord.send(twice).results
            assert [(int(p.partition), p.error_code, p.start_offset, p.state_epoch) for p in res.partitions] == [
                (1, ErrorCode.none, -1, 0)]

            empty_group = req(84, 0, dict(partition=0, leader_epoch=1), group="",
                              topics_cls="ReadStateData", part_cls="PartitionData")
            assert coord.send(empty_group).results == ()

            # Restart recovery: a coordinator rebuilt from the log answers the same.
            state = threaded.cluster.state
            assert one(coord.send(init)).error_code == ErrorCode.none
            assert one(coord.send(wr)).error_code == ErrorCode.none
            before = one(coord.send(read))
            state.share_coordinator = ShareCoordinator.rebuild(state.share_coordinator)
            after = one(coord.send(read))
            assert (after.start_offset, after.state_batches, after.state_epoch) == (
                before.start_offset, before.state_batches, before.state_epoch)

            # Without a share coordinator every partition is COORDINATOR_NOT_AVAILABLE.
            state.share_coordinator = None
            assert one(coord.send(read)).error_code == ErrorCode.coordinator_not_available
    finally:
        threaded.stop()
