"""Consumer groups (KIP-848) next to share groups (KIP-932), issue 28 item 4: one group id
names one group of one type -- the other kind's heartbeats and offset commits are refused
and leave it unchanged -- and a consumer group and a share group reading one topic each get
every record. The answers are Kafka 4.4.0's, measured on kafka-native: GROUP_ID_NOT_FOUND
("Group X is not a share group" / "... not a consumer group") for the other kind's
heartbeat and for commits to a share group's id, INCONSISTENT_GROUP_PROTOCOL for a classic
JoinGroup to a share group's id.

Online migration between the classic and consumer protocols (TYPES.003/004) follows the
target's group.consumer.migration.policy (DescribeConfigs BROKER via conformance.target_limits;
unreported: Kafka 4.x's default, bidirectional). Where the policy forbids a direction the test
checks Kafka's refusal instead -- which can fail -- and the migration itself is "not supported
by target". Kafka 4.4.0, measured per policy: a classic JoinGroup into a non-empty consumer group
is admitted unless the policy is disabled (else INCONSISTENT_GROUP_PROTOCOL); a consumer
heartbeat converts a non-empty classic group only under upgrade or bidirectional (else
GROUP_ID_NOT_FOUND, GroupMetadataManager.validateOnlineUpgrade).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer
from kio.schema.errors import ErrorCode as E

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment, TopicPartition
from kio.schema.types import TopicName

from clients import confluent, groups, share, wire
from conformance import target_limits
from conformance.suites.kip447 import CONSUMER, RawTxn, group_coordinator, join, sync
from reference_impl.protocol import framing
from targets.target import NotSupportedByTarget

MIGRATION_POLICY = "group.consumer.migration.policy"
CLASSIC_JOIN_ALLOWED = frozenset({"upgrade", "downgrade", "bidirectional"})  # all but disabled (measured)
ONLINE_UPGRADE_ALLOWED = frozenset({"upgrade", "bidirectional"})  # ConsumerGroupMigrationPolicy.isUpgradeEnabled


def conflict_scenario(target, ids):
    """Consumer group G (one KIP-848 member) and share group S (one member) on topic T; each
    kind knocks on the other's door."""
    topic, consumer_group, share_group = ids.topic(), ids.group(), ids.group()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        group_coordinator(cc, consumer_group, topic)
        member = groups.join_consumer(cc, consumer_group, [topic], want=1)
        share_member, share_epoch = share.join_share_group(cc, share_group, [topic])
        g_coord, s_coord = cc.coordinator_for(consumer_group), cc.coordinator_for(share_group)
        share_on_consumer = share.heartbeat(g_coord, consumer_group, share.new_member_id(), 0, [topic])
        consumer_on_share = groups.heartbeat(s_coord, share_group, share.new_member_id(), 0, topics=[topic],
                                             owned={}, rebalance_ms=10_000)
        classic_on_share = wire.join_group(s_coord, share_group, topic=topic)
        commit_on_share = wire.offset_commit(s_coord, share_group, topic, 0, 1)
        txn = RawTxn(cc, ids.transactional_id())
        txn.init()
        txn.add_offsets(share_group)
        _, txn_on_share = txn.txn_offset_commit(share_group, topic, {0: 1})
        txn.end(commit=False)
        still_consumer = member.beat()
        still_share = share.heartbeat(s_coord, share_group, share_member, share_epoch)
    return {"setup": member.errors, "share_on_consumer_group": int(share_on_consumer.error_code),
            "consumer_on_share_group": int(consumer_on_share.error_code),
            "classic_join_on_share_group": int(classic_on_share.error_code),
            "offset_commit_on_share_group": commit_on_share, "txn_offset_commit_on_share_group": txn_on_share[0],
            "consumer_member_kept": still_consumer, "share_member_kept": int(still_share.error_code)}


@pytest.mark.requirement("KIP-848.TYPES.001")
def test_group_id_of_one_kind_is_refused_to_the_other(target, differential, consumer_protocol):
    """KIP-848.TYPES.001: a group id held by a consumer group is refused to a share group member and to
    share-group offsets, and one held by a share group to a consumer member or a classic JoinGroup."""
    share.require_share_groups(target)
    obs = differential.run(conflict_scenario).target
    assert obs["setup"] == [], obs
    assert obs["share_on_consumer_group"] == E.group_id_not_found, f"a consumer group's id joined as a share group: {obs}"
    assert obs["consumer_on_share_group"] == E.group_id_not_found, f"a share group's id joined as a consumer group: {obs}"
    assert obs["classic_join_on_share_group"] == E.inconsistent_group_protocol, obs
    assert obs["offset_commit_on_share_group"] == E.group_id_not_found, obs
    assert obs["txn_offset_commit_on_share_group"] == E.group_id_not_found, obs
    assert obs["consumer_member_kept"] == 0 and obs["share_member_kept"] == 0, f"a refused join changed a group: {obs}"


def migration_policy(target) -> dict:
    """The target's group.consumer.migration.policy as observation keys: its value and whether
    the target reported it (False: Kafka 4.x's default is assumed, e.g. kfake, older Kafka)."""
    limits = target_limits.limits(target)
    return {"migration_policy": limits.policy(MIGRATION_POLICY), "policy_reported": MIGRATION_POLICY in limits.policies}


def not_supported_migration(requirement: str, what: str, obs: dict) -> NotSupportedByTarget:
    """The migration requirement is not supported: the target's policy forbids it (its refusal was checked)."""
    return NotSupportedByTarget(f"{requirement} ({what}): the target's {MIGRATION_POLICY} is "
                                f"{obs['migration_policy']!r}; Kafka's refusal was checked: {obs}")


def _assignment(topic: str, partitions: tuple[int, ...]) -> bytes:
    """Embedded consumer-protocol assignment (int16 version 0, then kio's v0 schema): Kafka
    reads it when it converts a classic group (ConsumerGroup.fromClassicGroup)."""
    tp = TopicPartition(topic=TopicName(topic), partitions=partitions)
    return b"\x00\x00" + framing.encode_entity(ConsumerProtocolAssignment(assigned_partitions=(tp,), user_data=None))


def classic_into_consumer_scenario(target, ids):
    """Consumer group G has one KIP-848 member owning T's partition; a classic member sends
    JoinGroup(G) (consumer embedded protocol, following MEMBER_ID_REQUIRED); G's member heartbeats."""
    topic, group = ids.topic(), ids.group()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        member = groups.join_consumer(cc, group, [topic], want=1)
        joined = join(coord, group, topic, timeout_s=30)
        kept = member.beat()
    return {"setup": member.errors, "classic_join": int(joined.error_code), "consumer_member_beat": kept,
            **migration_policy(target)}


@pytest.mark.requirement("KIP-848.TYPES.003")
def test_classic_member_joins_a_consumer_group(target, differential, consumer_protocol):
    """KIP-848.TYPES.003: a group.consumer.migration.policy other than disabled (Kafka 4.x's default:
    bidirectional) lets a classic member into a non-empty consumer group (a mixed group): its
    JoinGroup answers NONE and the consumer member stays (GroupMetadataManager.
    classicGroupJoinToConsumerGroup). Under disabled the JoinGroup answers INCONSISTENT_GROUP_PROTOCOL,
    the consumer member stays, and the requirement is not supported by target."""
    obs = differential.run(classic_into_consumer_scenario).target
    assert obs["setup"] == [], obs
    allowed = obs["migration_policy"] in CLASSIC_JOIN_ALLOWED
    assert obs["classic_join"] == (E.none if allowed else E.inconsistent_group_protocol), \
        f"a classic JoinGroup into a consumer group, {MIGRATION_POLICY} {obs['migration_policy']!r}: {obs}"
    assert obs["consumer_member_beat"] == E.none, f"the consumer member lost its place: {obs}"
    if not allowed:
        raise not_supported_migration("KIP-848.TYPES.003", "a classic member in a consumer group", obs)


def consumer_into_classic_scenario(target, ids):
    """Classic group C has one Stable member (JoinGroup + SyncGroup, the range assignment of
    T's partition to itself); a KIP-848 member sends ConsumerGroupHeartbeat(C, epoch 0)."""
    topic, group = ids.topic(), ids.group()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        joined = join(coord, group, topic, timeout_s=30)
        setup = [int(joined.error_code)] if int(joined.error_code) else []
        if not setup:
            mine = {joined.member_id: _assignment(topic, (0,))}
            synced = sync(coord, group, int(joined.generation_id), joined.member_id, assignments=mine)
            setup += [int(synced.error_code)] if int(synced.error_code) else []
        newcomer = groups.Member(cc, group, CONSUMER, share.new_member_id(), 0, None)
        upgrade = newcomer.beat(topics=[topic], rebalance_ms=10_000)
    return {"setup": setup, "consumer_heartbeat": upgrade, **migration_policy(target)}


@pytest.mark.requirement("KIP-848.TYPES.004")
def test_consumer_member_joins_a_classic_group(target, differential, consumer_protocol):
    """KIP-848.TYPES.004: migration policy upgrade or bidirectional (Kafka 4.x's default) converts a
    non-empty classic group whose members use the consumer embedded protocol into a consumer group
    when a KIP-848 member joins (online upgrade, GroupMetadataManager.convertToConsumerGroup): its
    heartbeat answers NONE. Under disabled or downgrade it answers GROUP_ID_NOT_FOUND and the
    requirement is not supported by target."""
    obs = differential.run(consumer_into_classic_scenario).target
    assert obs["setup"] == [], obs
    allowed = obs["migration_policy"] in ONLINE_UPGRADE_ALLOWED
    assert obs["consumer_heartbeat"] == (E.none if allowed else E.group_id_not_found), \
        f"a consumer heartbeat on a classic group, {MIGRATION_POLICY} {obs['migration_policy']!r}: {obs}"
    if not allowed:
        raise not_supported_migration("KIP-848.TYPES.004", "online upgrade of a classic group", obs)


RECORDS = 20


def _consume_all(target, group: str, topic: str, want: int, wait_s: float = 60.0) -> list[bytes]:
    """Values a consumer-protocol confluent-kafka consumer of `group` reads from `topic`."""
    c = Consumer(confluent.config(target, **{"group.id": group, "group.protocol": "consumer",
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    values: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + wait_s
        while len(values) < want and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                values.append(m.value())
    finally:
        confluent.close_stalled_consumer(c)
    return values


@pytest.mark.requirement("KIP-848.TYPES.002")
def test_consumer_group_and_share_group_both_read_the_topic(target, unique, consumer_protocol):
    """KIP-848.TYPES.002: Share group S (primed: share.auto.offset.reset is latest) and consumer group G on topic
    T with 20 records: S acquires all 20 and accepts them, then G still reads all 20."""
    share.require_share_groups(target)
    with wire.cluster_client(target) as cc:
        sp = share.SharePartitionUnderTest(target, cc, unique.topic(), unique.group()).open()
        session = sp.primed_member()
        values = [b"v%d" % i for i in range(RECORDS)]
        sp.produce(values)
        acquired = session.fetch_until([sp.key()], want=RECORDS, wait_s=20)
        session.ack({sp.key(): [(min(acquired), max(acquired), [share.ACCEPT])]} if acquired else {})
        session.close()
    read = _consume_all(target, unique.group(), sp.topic, RECORDS)
    assert sorted(acquired) == list(range(RECORDS)), f"the share group acquired {sorted(acquired)}"
    assert sorted(read) == sorted(values), f"the consumer group read {len(read)} of {RECORDS} records"
