"""KIP-447 "Fencing zombie": TxnOffsetCommit v3+ carries the consumer's generation id, member
id and group instance id, and the group coordinator validates them like an ordinary offset
commit. Wire level (raw JoinGroup / SyncGroup / TxnOffsetCommit) and client level
(confluent-kafka `send_offsets_to_transaction(offsets, consumer.consumer_group_metadata())`).

The five steps of the KIP text (section "Fencing zombie"):

1. client A is about to commit offsets for P1 but stalls (long GC) before TxnOffsetCommit;
2. A falls out of the group (session / rebalance timeout), the group rebalances;
3. client B is assigned P1;
4. B sees no pending offsets of A, processes P1 and commits transactionally;
5. A resumes and sends its TxnOffsetCommit with its old generation: it is fenced.
"""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from clients import confluent, wire
from conformance.suites.kip447 import (
    CLASSIC,
    CONSUMER,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    UNKNOWN_MEMBER_ID,
    UNSTABLE_OFFSET_COMMIT,
    RawTxn,
    aged_member_txn,
    commit,
    STALE_MEMBER_EPOCH,
    UNRELEASED_INSTANCE_ID,
    group_coordinator,
    offset_fetch,
    both_protocols,
    group_config,
    group_under_test,
    protocol_scenario,
    require_txn_offset_commit_v3,
)
from clients.txn import txn_offset_commit
from targets.target import NotSupportedByTarget
from reference_impl.protocol.api_keys import ApiKey


def _stable_offset(coord, group: str, topic: str, partition: int, timeout_s: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        _, ans = offset_fetch(coord, group, topic, [partition], require_stable=True)
        off, err = ans[partition]
        if err != UNSTABLE_OFFSET_COMMIT or time.monotonic() > deadline:
            return [off, err]
        time.sleep(0.05)


# --------------------------------------------------------------------------- wire level
# Each scenario runs its group under `protocol` (GroupUnderTest): the generation of a classic
# member or the member epoch of a KIP-848 member is what TxnOffsetCommit carries.

# The refusal of a commit whose generation / epoch the member no longer holds: Kafka answers
# ILLEGAL_GENERATION for TxnOffsetCommit under both protocols (the KIP-848 text's
# STALE_MEMBER_EPOCH is what Kafka 4.4 answers to OffsetCommit v9+ only: DIV-84801).
STALE = {CLASSIC: (ILLEGAL_GENERATION,), CONSUMER: (ILLEGAL_GENERATION, STALE_MEMBER_EPOCH)}
# A replaced static member: classic groups answer FENCED_INSTANCE_ID; a KIP-848 group no
# longer knows the old member id (Kafka 4.4: UNKNOWN_MEMBER_ID, DIV-84802).
REPLACED = {CLASSIC: (FENCED_INSTANCE_ID,), CONSUMER: (FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID)}


def stale_generation_scenario(target, ids, protocol):
    """Member M joins (g1) and ages (g2: a classic rejoin, or a KIP-848 rival taking its
    partition 1). A transaction stages offset 11 with (g1, M) on the partition it no longer
    holds at g1: refused; it commits anyway and G's offset must not change. A second
    transaction with (g2, M) commits offset 12 on partition 0."""
    with wire.cluster_client(target) as cc:
        start = aged_member_txn(target, cc, ids, protocol)
        g, m, g1, p, txn, add = start.g, start.member, start.first_epoch, start.revoked, start.txn, start.add
        version, stale = txn.txn_offset_commit(g.group, g.topic, {p: 11}, generation=g1, member_id=m.member_id)
        end1 = txn.end(commit=True)
        coord = m.coordinator
        after_stale = _stable_offset(coord, g.group, g.topic, p)
        txn.add_offsets(g.group)
        _, good = txn.txn_offset_commit(g.group, g.topic, {0: 12}, generation=m.epoch, member_id=m.member_id)
        end2 = txn.end(commit=True)
        after_good = _stable_offset(coord, g.group, g.topic, 0)
    return {"join_errors": m.errors, "generation_bumped": m.epoch > g1,
            "txn_offset_commit_version": version, "add_offsets": add, "stale": stale[p], "end1": end1,
            "after_stale": after_stale, "current": good[0], "end2": end2, "after_current": after_good}


@pytest.mark.requirement("KIP-447.FENCE.002")
@both_protocols("KIP-848.FENCE.001")
def test_txn_offset_commit_with_stale_generation_is_fenced(target, differential, group_protocol):
    """KIP-447.FENCE.002: a TxnOffsetCommit with a stale generation is fenced; under the consumer
    protocol KIP-848.FENCE.001: with an older member epoch (ILLEGAL_GENERATION on Kafka 4.4)."""
    require_txn_offset_commit_v3(target)
    obs = differential.run(protocol_scenario(stale_generation_scenario, group_protocol),
                           requirement="KIP-447.FENCE.002").target
    assert obs["join_errors"] == [] and obs["generation_bumped"], obs
    assert obs["txn_offset_commit_version"] >= 3
    assert obs["stale"] in STALE[group_protocol], f"stale generation answered {obs['stale']}"
    assert obs["after_stale"] == [-1, 0], "a fenced TxnOffsetCommit changed the group's offset"
    assert obs["current"] == 0 and obs["after_current"] == [12, 0], obs


def unknown_member_scenario(target, ids, protocol):
    with wire.cluster_client(target) as cc:
        g = group_under_test(target, cc, ids, protocol)
        m = g.join()
        txn = RawTxn(cc, ids.transactional_id())
        txn.init()
        txn.add_offsets(g.group)
        _, unknown = txn.txn_offset_commit(g.group, g.topic, {0: 5}, generation=m.epoch, member_id="not-a-member")
        _, defaults = txn.txn_offset_commit(g.group, g.topic, {0: 6})  # generation -1, member "", no instance
        end = txn.end(commit=True)
        after = _stable_offset(m.coordinator, g.group, g.topic, 0)
    return {"join": m.errors, "unknown_member": unknown[0], "defaults": defaults[0], "end": end, "after": after}


@pytest.mark.requirement("KIP-447.FENCE.003", "KIP-447.FENCE.005")
@both_protocols("KIP-848.FENCE.003")
def test_txn_offset_commit_unknown_member_and_default_fields(target, differential, group_protocol):
    """KIP-447.FENCE.003, KIP-447.FENCE.005, KIP-848.FENCE.003 (consumer protocol): An unknown member id is refused with UNKNOWN_MEMBER_ID; the default-valued group fields
    (generation -1, member "", no instance id) skip membership checks for an active group."""
    require_txn_offset_commit_v3(target)
    obs = differential.run(protocol_scenario(unknown_member_scenario, group_protocol),
                           requirement="KIP-447.FENCE.003").target
    assert obs["join"] == []
    assert obs["unknown_member"] == UNKNOWN_MEMBER_ID, obs
    assert obs["defaults"] == 0, f"default group fields refused for an active group: {obs}"
    assert obs["end"] == 0 and obs["after"] == [6, 0], obs


def static_member_scenario(target, ids, protocol):
    """Static member (instance I) joins as m1 and is replaced by m2 with I (classic: m2's join
    replaces m1; consumer: m2's join is refused while m1 is active, m1 leaves with epoch -2,
    m2 joins); a TxnOffsetCommit with (m1, I) is fenced, (m2, I) is accepted."""
    with wire.cluster_client(target) as cc:
        g = group_under_test(target, cc, ids, protocol)
        m1 = g.join(instance_id=ids.instance_id())
        m2, busy = g.replace_static(m1)
        txn = RawTxn(cc, ids.transactional_id())
        txn.init()
        txn.add_offsets(g.group)
        _, old = txn.txn_offset_commit(g.group, g.topic, {0: 7}, generation=m1.epoch, member_id=m1.member_id,
                                       instance_id=m1.instance_id)
        _, new = txn.txn_offset_commit(g.group, g.topic, {0: 8}, generation=m2.epoch, member_id=m2.member_id,
                                       instance_id=m2.instance_id)
        end = txn.end(commit=True)
        after = _stable_offset(m2.coordinator, g.group, g.topic, 0)
        old_beat = m1.beat() if protocol == CONSUMER else None
    return {"join": m1.errors, "rejoin": m2.errors, "replaced": m2.member_id != m1.member_id, "busy": busy,
            "old_member": old[0], "new_member": new[0], "end": end, "after": after, "old_heartbeat": old_beat}


@pytest.mark.requirement("KIP-447.FENCE.004")
@both_protocols("KIP-848.FENCE.004")
def test_txn_offset_commit_from_replaced_static_member_is_fenced(target, differential, group_protocol):
    require_txn_offset_commit_v3(target)
    obs = differential.run(protocol_scenario(static_member_scenario, group_protocol),
                           requirement="KIP-447.FENCE.004").target
    if obs["join"] == [] and obs["rejoin"] != []:
        raise NotSupportedByTarget(f"static member rejoin refused with {obs['rejoin']}")
    assert obs["join"] == [] and obs["replaced"], obs
    assert obs["old_member"] in REPLACED[group_protocol], obs
    assert obs["new_member"] == 0 and obs["after"] == [8, 0], obs
    if group_protocol == CONSUMER:  # KIP-848.FENCE.004: one active member per instance id
        assert obs["busy"] == UNRELEASED_INSTANCE_ID, f"a second member took an active instance id: {obs}"
        assert obs["old_heartbeat"] == FENCED_INSTANCE_ID, f"the replaced member still heartbeats: {obs}"


def zombie_scenario(target, ids, protocol):
    """The KIP's five steps over the raw protocol. A's rebalance timeout is 1.5 s so that its
    eviction (step 2) happens while B waits (classic: in its JoinGroup; consumer: while A,
    told to give up a partition, stalls)."""
    with wire.cluster_client(target) as cc:
        g = group_under_test(target, cc, ids, protocol)
        a = g.join(session_ms=6000, rebalance_ms=1500)
        gen_a = a.epoch
        # 1. A's transaction is open (offsets partition added), then A stalls.
        txn_a = RawTxn(cc, ids.transactional_id())
        txn_a.init()
        add_a = txn_a.add_offsets(g.group)
        # 2. + 3. B joins; A does not rejoin / revoke and is dropped at its rebalance timeout.
        t0 = time.monotonic()
        b, b_alone = g.take_over(a, rebalance_ms=1500)
        waited = time.monotonic() - t0
        # 4. B commits its progress transactionally with its own generation.
        txn_b = RawTxn(cc, ids.transactional_id())
        txn_b.init()
        txn_b.add_offsets(g.group)
        _, b_commit = txn_b.txn_offset_commit(g.group, g.topic, {0: 20}, generation=b.epoch, member_id=b.member_id)
        end_b = txn_b.end(commit=True)
        # 5. A resumes: its TxnOffsetCommit carries the old generation and member id.
        _, a_commit = txn_a.txn_offset_commit(g.group, g.topic, {0: 10}, generation=gen_a, member_id=a.member_id)
        end_a = txn_a.end(commit=True)
        after = _stable_offset(b.coordinator, g.group, g.topic, 0)
    return {"join_a": a.errors, "add_offsets_a": add_a, "join_b": b.errors,
            "b_generation_newer": b.epoch > gen_a, "b_sole_member": b_alone,
            "b_commit": b_commit[0], "end_b": end_b, "a_commit": a_commit[0], "end_a": end_a, "after": after,
            "b_join_waited_s": round(waited, 1)}


@pytest.mark.requirement("KIP-447.FENCE.006", "KIP-447.FENCE.003")
@both_protocols("KIP-848.ZOMBIE.001")
def test_kip_five_step_zombie_is_fenced_wire(target, differential, group_protocol):
    """KIP-447.FENCE.006, KIP-447.FENCE.003: KIP-447's five-step zombie, on the wire; under the consumer
    protocol KIP-848.ZOMBIE.001: the member past its rebalance timeout is removed and its commit fenced."""
    require_txn_offset_commit_v3(target)
    obs = differential.run(protocol_scenario(zombie_scenario, group_protocol), requirement="KIP-447.FENCE.006",
                           ignore_keys=["b_join_waited_s"]).target
    assert obs["join_a"] == [] and obs["add_offsets_a"] == 0
    assert obs["join_b"] == [] and obs["b_generation_newer"], obs
    assert obs["b_sole_member"], f"A was not dropped from the group: {obs}"
    assert obs["b_commit"] == 0 and obs["end_b"] == 0, obs
    assert obs["a_commit"] in (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID), f"the zombie's commit was not fenced: {obs}"
    assert obs["after"] == [20, 0], f"the group's offset is not B's: {obs}"


# --------------------------------------------------------------------------- client level


def parse_group_metadata(blob: bytes) -> dict:
    """librdkafka's serialized consumer group metadata ("CGMDv2:", int32 generation in host
    order, group id NUL, member id NUL, 1-byte null flag for the instance id, instance id NUL)."""
    if not isinstance(blob, bytes) or not blob.startswith(b"CGMDv2:"):
        return {}
    rest = blob[7:]
    (generation,) = struct.unpack("=i", rest[:4])
    parts = rest[4:].split(b"\x00")
    group_id, member_id = parts[0].decode(), parts[1].decode()
    return {"generation_id": generation, "group_id": group_id, "member_id": member_id}


def _txn_producer(target, tid: str) -> Producer:
    p = Producer(confluent.config(target, **{"transactional.id": tid, "transaction.timeout.ms": 20000}))
    p.init_transactions(30)
    return p


# How long B waits for the stalled A's partition. librdkafka 2.16 under the consumer protocol
# logs "leaving group" at max.poll.interval.ms but keeps quiet instead of sending the leave
# heartbeat, so the coordinator drops A at the session timeout (Kafka's
# group.consumer.session.timeout.ms, 45 s): measured 50 s on kafka-native 4.4.0.
TAKE_OVER_S = {CLASSIC: 40, CONSUMER: 90}


def _consumer(target, group: str, protocol: str = CLASSIC, **extra) -> Consumer:
    cfg = confluent.config(target, **{
        "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "max.poll.interval.ms": 6000,
        **group_config(protocol, **{"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}),
    })
    cfg.update(extra)
    return Consumer(cfg)


def _wait_assigned(c: Consumer, timeout_s: float) -> list:
    polled = []
    deadline = time.monotonic() + timeout_s
    while not c.assignment():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no assignment within {timeout_s}s")
        m = c.poll(0.2)
        if m is not None and not m.error():
            polled.append(m)
    return polled


def _offsets_error(exc: KafkaException) -> dict:
    err = exc.args[0]
    return {"code": err.code(), "name": err.name(), "abortable": err.txn_requires_abort(), "fatal": err.fatal()}


@pytest.mark.requirement("KIP-447.API.001", "KIP-447.API.002", "KIP-447.FENCE.006")
@both_protocols("KIP-848.ZOMBIE.001")
def test_zombie_send_offsets_fenced_client(target, unique, group_protocol):
    """Client A consumes, stalls past max.poll.interval.ms (its partitions go to B), B commits
    transactionally; A's producer then sends A's stale group metadata and is refused with
    ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID; the group's offset stays B's. Under the consumer
    protocol the metadata's generation is the member epoch. KIP-848.ZOMBIE.001 (consumer protocol): the removed member's commit is fenced
    (librdkafka stops heartbeating, so its session timeout, not its rebalance timeout, removes it)."""
    require_txn_offset_commit_v3(target)
    topic, group, out = unique.topic(), unique.group(), unique.topic()
    confluent.create_topic(target, topic)
    confluent.create_topic(target, out)
    confluent.produce(target, topic, [{"value": b"%d" % i} for i in range(10)])
    producer_a = _txn_producer(target, unique.transactional_id())
    producer_b = _txn_producer(target, unique.transactional_id() + "-b")
    a = _consumer(target, group, group_protocol)
    b = None
    try:
        a.subscribe([topic])
        got = _wait_assigned(a, 30)
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            m = a.poll(0.2)
            if m is not None and not m.error():
                got.append(m)
        assert len(got) >= 3
        md_a = a.consumer_group_metadata()
        meta_a = parse_group_metadata(md_a)
        # A stalls (no poll); B joins and gets the partition once A is dropped.
        b = _consumer(target, group, group_protocol)
        b.subscribe([topic])
        _wait_assigned(b, TAKE_OVER_S[group_protocol])
        md_b = b.consumer_group_metadata()
        meta_b = parse_group_metadata(md_b)
        producer_b.begin_transaction()
        producer_b.produce(out, b"from-b", partition=0)
        producer_b.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], md_b, 30)
        producer_b.commit_transaction(30)
        # A resumes with its stale metadata.
        producer_a.begin_transaction()
        producer_a.produce(out, b"from-a", partition=0)
        error = None
        try:
            producer_a.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], md_a, 30)
            producer_a.commit_transaction(30)
        except KafkaException as exc:
            error = _offsets_error(exc)
            if error["abortable"]:
                producer_a.abort_transaction(30)
        committed = b.committed([TopicPartition(topic, 0)], timeout=15)[0].offset
    finally:
        confluent.close_stalled_consumer(a)
        if b is not None:
            confluent.close_stalled_consumer(b)  # B has not polled since its assignment either
    # KIP-447.API.002: the metadata names the group, the member and the generation the broker
    # assigned, refreshed by the rebalance (confluent-kafka serializes it as CGMDv2).
    assert meta_a and meta_b, f"the consumers' group metadata did not parse: {md_a!r} {md_b!r}"
    assert meta_a["group_id"] == group and meta_a["member_id"] and meta_a["generation_id"] >= 1, meta_a
    assert meta_b["group_id"] == group and meta_b["member_id"] != meta_a["member_id"], (meta_a, meta_b)
    assert meta_b["generation_id"] > meta_a["generation_id"], (meta_a, meta_b)
    assert error is not None, "the zombie's sendOffsetsToTransaction + commit succeeded"
    assert error["name"] in ("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID"), error
    assert committed == 7, f"the group's offset is {committed}, not B's 7"


@pytest.mark.requirement("KIP-447.API.001", "KIP-447.FENCE.004")
@both_protocols("KIP-848.FENCE.004")
def test_replaced_static_member_send_offsets_fenced_client(target, unique, group_protocol):
    """KIP-848.FENCE.004 (consumer protocol): Static member A1 (group.instance.id I) is replaced by A2 with the same instance id
    (consumer protocol: after A1 closed, its static leave; a KIP-848 group refuses a second
    active member with I); sending offsets with A1's metadata is fenced (REPLACED)."""
    require_txn_offset_commit_v3(target)
    topic, group, instance = unique.topic(), unique.group(), unique.instance_id()
    confluent.create_topic(target, topic)
    producer = _txn_producer(target, unique.transactional_id())
    a1 = _consumer(target, group, group_protocol, **{"group.instance.id": instance})
    a2 = None
    try:
        a1.subscribe([topic])
        _wait_assigned(a1, 30)
        md1 = a1.consumer_group_metadata()
        if group_protocol == CONSUMER:
            confluent.close_stalled_consumer(a1)
            a1 = None
        a2 = _consumer(target, group, group_protocol, **{"group.instance.id": instance})
        a2.subscribe([topic])
        _wait_assigned(a2, 30)
        producer.begin_transaction()
        error = None
        try:
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], md1, 30)
            producer.commit_transaction(30)
        except KafkaException as exc:
            error = _offsets_error(exc)
            if error["abortable"]:
                producer.abort_transaction(30)
    finally:
        for c in (a1, a2):  # neither polled since its assignment; a1 is fenced
            if c is not None:
                try:
                    confluent.close_stalled_consumer(c)
                except Exception:  # noqa: BLE001 - a fenced static member may refuse to close cleanly
                    pass
    assert error is not None, "sendOffsetsToTransaction with a replaced static member's metadata succeeded"
    assert error["name"] in {ErrorCode(c).name.upper() for c in REPLACED[group_protocol]}, error


def versions_scenario(target, ids):
    """Exactly the versions KIP-447 needs: TxnOffsetCommit v3 stages an offset (default group
    fields), OffsetFetch v7 with RequireStable answers it UNSTABLE_OFFSET_COMMIT while pending
    and without RequireStable the committed one; after the commit v7 returns it."""
    topic, group = ids.topic(), ids.group()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        seed = commit(coord, group, topic, 0, 5)
        txn = RawTxn(cc, ids.transactional_id())
        init, add = txn.init(), txn.add_offsets(group)
        v3, staged = txn_offset_commit(coord, txn.tid, txn.pid, txn.epoch, group, topic, {0: 9}, highest=3, lowest=3)
        v7, pending = offset_fetch(coord, group, topic, [0], require_stable=True, highest=7, lowest=7)
        _, unstable = offset_fetch(coord, group, topic, [0], require_stable=False, highest=7, lowest=7)
        end = txn.end(commit=True)
        after = _stable_offset(coord, group, topic, 0)
    return {"seed": seed, "init": init, "add": add, "versions": [v3, v7], "staged": staged,
            "pending": list(pending[0]), "unstable": list(unstable[0]), "end": end, "after": after}


@pytest.mark.requirement("KIP-447.COMPAT.001")
def test_kip447_versions_advertised(target, differential):
    """KIP-447.COMPAT.001: TxnOffsetCommit v3+ (group fields) and OffsetFetch v7+ (RequireStable)
    are advertised (else not supported, never passed) and work at exactly v3 and v7."""
    caps = target.capabilities()
    toc, of = caps.max_version(ApiKey.TXN_OFFSET_COMMIT), caps.max_version(ApiKey.OFFSET_FETCH)
    if toc is None or of is None or toc < 3 or of < 7:
        raise NotSupportedByTarget(f"TxnOffsetCommit max v{toc}, OffsetFetch max v{of}: KIP-447 needs v3+ / v7+")
    obs = differential.run(versions_scenario).target
    assert (obs["seed"], obs["init"], obs["add"], obs["versions"]) == (0, 0, 0, [3, 7]), obs
    assert obs["staged"] == {0: 0}, f"KIP-447.COMPAT.001: TxnOffsetCommit v3: {obs}"
    assert obs["pending"] == [-1, UNSTABLE_OFFSET_COMMIT], f"KIP-447.COMPAT.001: OffsetFetch v7 RequireStable: {obs}"
    assert obs["unstable"] == [5, 0], f"KIP-447.COMPAT.001: OffsetFetch v7 without RequireStable: {obs}"
    assert obs["end"] == 0 and obs["after"] == [9, 0], obs


def stale_producer_epoch_scenario(target, ids):
    """Instance A opens a transaction with offsets; instance B initialises the same
    transactional id (epoch bump, A fenced); A's next TxnOffsetCommit carries the old epoch."""
    topic, group, tid = ids.topic(), ids.group(), ids.transactional_id()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        a = RawTxn(cc, tid)
        a.init()
        a.add_offsets(group)
        _, first = a.txn_offset_commit(group, topic, {0: 5})
        b = RawTxn(cc, tid)
        b_init = b.init()
        _, stale = a.txn_offset_commit(group, topic, {0: 9})
        after = _stable_offset(coord, group, topic, 0)
    return {"first": first[0], "b_init": b_init, "epoch_bumped": b.epoch > a.epoch,
            "stale": stale[0], "after": after}


@pytest.mark.requirement("KIP-98.TXNOFF.002")
def test_txn_offset_commit_from_a_fenced_producer_epoch_is_refused(target, differential):
    """Issue 14: no test sent TxnOffsetCommit with an outdated producer epoch. After the
    transactional id is initialised again, the old instance's commit is refused for its
    partition (INVALID_PRODUCER_EPOCH, or PRODUCER_FENCED on newer versions) and stores nothing."""
    require_txn_offset_commit_v3(target)
    obs = differential.run(stale_producer_epoch_scenario).target
    assert obs["first"] == 0 and obs["b_init"] == 0 and obs["epoch_bumped"], obs
    assert obs["stale"] in (int(ErrorCode.invalid_producer_epoch), int(ErrorCode.producer_fenced)), obs
    assert obs["after"][0] == -1, f"a fenced producer's offsets became visible: {obs['after']}"
    assert obs["after"][1] == 0, f"OffsetFetch of the group (nothing committed) answered error {obs['after'][1]}"
