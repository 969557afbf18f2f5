"""KIP-932 access control with a real authorizer ("Access control"; issue 14 item 5).

Share groups are GROUP resources: reading about one needs DESCRIBE, changing one (joining,
consuming, altering offsets) needs READ; ShareFetch/ShareAcknowledge also need READ on each
topic; the share-state RPCs are inter-broker CLUSTER_ACTION. Each test sends the call as an
unprivileged SASL user first (refused with the KIP's error, and nothing is created, described
or delivered), then grants the permission as the super user and sends it again (processed),
so a target that refuses everything fails as surely as one that checks nothing.

Only targets with an authorizer run these (kafka-native:authorizer=standard,
reference:authorizer=standard); elsewhere clients.acl.require_authorizer answers "not supported
by target" naming the setting. The super user sets up topics and groups and is the observer of "nothing leaked". Kafka:
KafkaApis.handleShareGroupHeartbeatRequest / handleShareFetchRequest /
handleShareAcknowledgeRequest / handle*ShareGroupOffsetsRequest, AuthHelper.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from clients import wire
from clients.acl import (
    CLUSTER, KIP932_CLUSTER_USER, RESOURCE_USER, AclScene, Op, Res, require_authorizer, until_allowed,
)
from clients.errors import COORDINATOR_RETRIABLE
from clients.share import (
    ACCEPT, READ_SHARE_GROUP_STATE, SHARE_COORDINATOR_KEY_TYPE, SHARE_GROUP_DESCRIBE, E,
    ShareSession, acquired, eventually, heartbeat, join_share_group, kafka_uuid, leader_epoch, nested, new_member_id,
    produce_values, require_share_groups, set_group_configs,
)
from conformance.suites import require_api
from conformance.suites.kip98 import create_ready_topic
from conformance.suites.kip932.test_admin import (
    ALTER_OFFSETS, DELETE_OFFSETS, DESCRIBE_OFFSETS, EARLIEST, alter_offsets, delete_offsets, describe_offsets,
    start_offsets,
)
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol.api_keys import ApiKey

WRITE_SHARE_GROUP_STATE = ApiKey.WRITE_SHARE_GROUP_STATE
READ_SHARE_GROUP_STATE_SUMMARY = ApiKey.READ_SHARE_GROUP_STATE_SUMMARY


class Scene(AclScene):
    """A topic with records, a share group id, the super user's client and the user's."""

    def __init__(self, target: Any, unique: Any, role: int, records: int = 3) -> None:
        super().__init__(target, role)
        self.topic, self.group = unique.topic(), unique.group()
        create_ready_topic(target, self.su, self.topic)
        self.tid: uuid.UUID = wire.topic_ids(self.su, self.topic).topic_id
        produce_values(self.su, self.topic, [b"r%d" % i for i in range(records)])

    def coordinator(self) -> RawClient:
        return self.as_user(self.su.coordinator_for(self.group, 0, wait_s=30))

    def leader(self) -> RawClient:
        return self.as_user(self.su.leader_for(self.topic, 0))


@pytest.fixture
def scene(target, unique):
    require_authorizer(target)
    require_share_groups(target)
    s = Scene(target, unique, RESOURCE_USER)
    try:
        yield s
    finally:
        s.close()


def describe_group(node: RawClient, group: str, wait_s: float = 15.0) -> Any:
    """ShareGroupDescribe of one group; the coordinator's not-ready answers are retried (a
    fresh __consumer_offsets partition answers NOT_COORDINATOR while it loads)."""
    deadline = time.monotonic() + wait_s
    while True:
        (entry,) = node.request(SHARE_GROUP_DESCRIBE, 1, group_ids=(group,), include_authorized_operations=False).groups
        if int(entry.error_code) not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            return entry
        time.sleep(0.2)


def _group_refused(resp: Any) -> bool:
    return int(resp.error_code) == E.group_authorization_failed


def _topic_refused(resp: Any) -> bool:
    return int(resp.error_code) == E.topic_authorization_failed


@pytest.mark.requirement("KIP-932.ACL.001")
def test_share_group_heartbeat_needs_read_on_the_group(scene, record_property):
    """KIP-932.ACL.001: Without READ on g, ShareGroupHeartbeat answers GROUP_AUTHORIZATION_FAILED, gives no
    member epoch or assignment, and creates no group (the super user's ShareGroupDescribe
    finds none). With READ on g the KIP's table asks nothing more: the heartbeat joins (NONE,
    epoch >= 1). Kafka also wants DESCRIBE on each subscribed topic and answers
    TOPIC_AUTHORIZATION_FAILED until then (DIV-93220; the side is recorded); with it granted
    the heartbeat joins."""
    member = new_member_id()
    refused = heartbeat(scene.coordinator(), scene.group, member, 0, [scene.topic])
    assert int(refused.error_code) == E.group_authorization_failed, refused
    assert refused.assignment is None and int(refused.member_epoch) <= 0, f"a refused heartbeat leaked: {refused}"
    seen = describe_group(scene.su.coordinator_for(scene.group, 0, wait_s=30), scene.group)
    assert int(seen.error_code) == E.group_id_not_found, f"a refused heartbeat created the group: {seen}"
    scene.grant((Res.GROUP, scene.group, Op.READ))
    joined = until_allowed(lambda: heartbeat(scene.coordinator(), scene.group, member, 0, [scene.topic]), _group_refused)
    record_property("follows:share_heartbeat_topic_describe", "kip" if int(joined.error_code) == E.none else "kafka")
    if int(joined.error_code) == E.topic_authorization_failed:
        assert joined.assignment is None and int(joined.member_epoch) <= 0, f"a refused heartbeat leaked: {joined}"
        scene.grant((Res.TOPIC, scene.topic, Op.DESCRIBE))
        joined = until_allowed(lambda: heartbeat(scene.coordinator(), scene.group, member, 0, [scene.topic]),
                               _topic_refused)
    assert int(joined.error_code) == E.none and int(joined.member_epoch) >= 1, joined


@pytest.mark.requirement("KIP-932.ACL.001")
def test_share_group_describe_needs_describe_on_the_group(scene, record_property):
    """KIP-932.ACL.001: The super user's member is in g. Without DESCRIBE on g the user's ShareGroupDescribe
    answers GROUP_AUTHORIZATION_FAILED for g with no member listed. With DESCRIBE on g it
    answers NONE and lists the member (KIP); Kafka also wants DESCRIBE on the group's topics
    and answers TOPIC_AUTHORIZATION_FAILED for g, listing nobody, until then (DIV-93220; the
    side is recorded)."""
    member, _ = join_share_group(scene.su, scene.group, [scene.topic])
    refused = describe_group(scene.coordinator(), scene.group)
    assert int(refused.error_code) == E.group_authorization_failed, refused
    assert not refused.members, f"a refused describe listed members: {refused.members}"
    scene.grant((Res.GROUP, scene.group, Op.DESCRIBE))
    seen = until_allowed(lambda: describe_group(scene.coordinator(), scene.group), _group_refused)
    record_property("follows:share_describe_topic_describe", "kip" if int(seen.error_code) == E.none else "kafka")
    if int(seen.error_code) == E.topic_authorization_failed:
        assert not seen.members, f"a refused describe listed members: {seen.members}"
        scene.grant((Res.TOPIC, scene.topic, Op.DESCRIBE))
        seen = until_allowed(lambda: describe_group(scene.coordinator(), scene.group), _topic_refused)
    assert int(seen.error_code) == E.none, seen
    assert [m.member_id for m in seen.members] == [member], seen


@pytest.mark.requirement("KIP-932.ACL.002")
def test_share_fetch_and_acknowledge_need_read_on_the_group_and_the_topic(scene):
    """KIP-932.ACL.002: 3 records in t. Without READ on g: ShareFetch and ShareAcknowledge answer
    GROUP_AUTHORIZATION_FAILED at the top level and deliver nothing. With READ on g (and
    DESCRIBE, not READ, on t, so the member can join Kafka's group): ShareFetch answers
    TOPIC_AUTHORIZATION_FAILED for t-0 and delivers nothing. With READ on t too: the records
    are delivered and acknowledged (NONE)."""
    set_group_configs(scene.su, scene.group, EARLIEST)
    member, key = new_member_id(), (scene.tid, 0)
    no_group = ShareSession(scene.leader(), scene.group, member).fetch([key], max_wait_ms=200)
    assert int(no_group.error_code) == E.group_authorization_failed and acquired(no_group) == [], no_group
    no_group_ack = ShareSession(scene.leader(), scene.group, member).ack({key: [(0, 0, [ACCEPT])]})
    assert int(no_group_ack.error_code) == E.group_authorization_failed, no_group_ack

    # Topic DESCRIBE lets the member join on Kafka (DIV-93220) and is not READ.
    scene.grant((Res.GROUP, scene.group, Op.READ), (Res.TOPIC, scene.topic, Op.DESCRIBE))
    joined = until_allowed(lambda: heartbeat(scene.coordinator(), scene.group, member, 0, [scene.topic]),
                           lambda r: _group_refused(r) or _topic_refused(r))
    assert int(joined.error_code) == E.none, joined
    session = ShareSession(scene.leader(), scene.group, member)  # one session: epoch 0 opens it once
    no_topic = until_allowed(lambda: session.fetch([key], max_wait_ms=200), _group_refused)
    assert int(no_topic.error_code) == E.none, no_topic
    codes = {(t.topic_id, int(p.partition_index)): int(p.error_code) for t in no_topic.responses for p in t.partitions}
    assert codes == {key: E.topic_authorization_failed}, no_topic
    assert acquired(no_topic) == [], f"records of a topic without READ were delivered: {acquired(no_topic)}"

    scene.grant((Res.TOPIC, scene.topic, Op.READ))
    got = until_allowed(lambda: session.fetch_until([key], 3, wait_s=10.0), lambda got: len(got) < 3)
    assert sorted(got) == [0, 1, 2], got
    acked = session.ack({key: [(0, 2, [ACCEPT])]})
    ack_codes = {int(p.error_code) for t in acked.responses for p in t.partitions}
    assert int(acked.error_code) == E.none and ack_codes == {E.none}, acked


@pytest.mark.requirement("KIP-932.ACL.003")
def test_share_group_offsets_admin_needs_group_permissions(scene, record_property):
    """KIP-932.ACL.003: An empty share group g exists (the super user's member joined and left). Without any
    permission: DescribeShareGroupOffsets answers GROUP_AUTHORIZATION_FAILED for g,
    AlterShareGroupOffsets(t-0 -> 1) and DeleteShareGroupOffsets(t) answer it at the top
    level, and the super user still sees the start offset unchanged. With DESCRIBE on g the
    describe is answered; with READ on g and t the alter moves the start offset to 1 and the
    delete removes it (KIP: READ on the group for both). Kafka refuses the delete until DELETE
    on g is granted too (DIV-93221; the side is recorded)."""
    require_api(scene.target.capabilities(), DESCRIBE_OFFSETS, what="DescribeShareGroupOffsets")
    require_api(scene.target.capabilities(), ALTER_OFFSETS, what="AlterShareGroupOffsets")
    require_api(scene.target.capabilities(), DELETE_OFFSETS, what="DeleteShareGroupOffsets")
    set_group_configs(scene.su, scene.group, EARLIEST)
    member, _ = join_share_group(scene.su, scene.group, [scene.topic])
    su_coord = scene.su.coordinator_for(scene.group, 0, wait_s=30)
    heartbeat(su_coord, scene.group, member, -1)
    before = start_offsets(describe_offsets(su_coord, scene.group, [(scene.topic, [0])]))

    refused_describe = describe_offsets(scene.coordinator(), scene.group, [(scene.topic, [0])])
    assert int(refused_describe.error_code) == E.group_authorization_failed, refused_describe
    refused_alter = alter_offsets(scene.coordinator(), scene.group, [(scene.topic, [(0, 1)])])
    assert int(refused_alter.error_code) == E.group_authorization_failed, refused_alter
    refused_delete = delete_offsets(scene.coordinator(), scene.group, [scene.topic])
    assert int(refused_delete.error_code) == E.group_authorization_failed, refused_delete
    after = start_offsets(describe_offsets(su_coord, scene.group, [(scene.topic, [0])]))
    assert after == before, f"refused offset admin changed the group: {before} -> {after}"

    scene.grant((Res.GROUP, scene.group, Op.DESCRIBE))
    described = until_allowed(lambda: describe_offsets(scene.coordinator(), scene.group, [(scene.topic, [0])]),
                              _group_refused)
    assert int(described.error_code) == E.none, described
    scene.grant((Res.GROUP, scene.group, Op.READ), (Res.TOPIC, scene.topic, Op.READ))
    altered = until_allowed(lambda: alter_offsets(scene.coordinator(), scene.group, [(scene.topic, [(0, 1)])]),
                            _group_refused)
    assert int(altered.error_code) == E.none, altered
    assert start_offsets(describe_offsets(su_coord, scene.group, [(scene.topic, [0])]))[(scene.topic, 0)][0] == 1
    deleted = delete_offsets(scene.coordinator(), scene.group, [scene.topic])
    record_property("follows:delete_share_offsets_permission", "kip" if int(deleted.error_code) == E.none else "kafka")
    if int(deleted.error_code) == E.group_authorization_failed:  # Kafka: DELETE on the group (DIV-93221)
        kept = start_offsets(describe_offsets(su_coord, scene.group, [(scene.topic, [0])]))[(scene.topic, 0)][0]
        assert kept == 1, f"a refused DeleteShareGroupOffsets changed the start offset: {kept}"
        scene.grant((Res.GROUP, scene.group, Op.DELETE))
        deleted = until_allowed(lambda: delete_offsets(scene.coordinator(), scene.group, [scene.topic]), _group_refused)
    assert int(deleted.error_code) == E.none, deleted

    def removed() -> None:
        gone = start_offsets(describe_offsets(su_coord, scene.group, [(scene.topic, [0])]))[(scene.topic, 0)][:2]
        assert gone == (-1, E.none), f"DeleteShareGroupOffsets answered NONE; the super user sees {gone}"

    eventually(removed)


def _read_state(node: RawClient, cc: ClusterClient, group: str, tid: uuid.UUID) -> Any:
    return node.request(READ_SHARE_GROUP_STATE, 0, group_id=group, topics=(
        nested(READ_SHARE_GROUP_STATE, 0, "ReadStateData", topic_id=tid, partitions=(
            nested(READ_SHARE_GROUP_STATE, 0, "PartitionData", partition=0, leader_epoch=leader_epoch(cc, tid, 0)),)),
    )).results[0].partitions[0]


def _read_summary(node: RawClient, cc: ClusterClient, group: str, tid: uuid.UUID) -> Any:
    return node.request(READ_SHARE_GROUP_STATE_SUMMARY, 0, group_id=group, topics=(
        nested(READ_SHARE_GROUP_STATE_SUMMARY, 0, "ReadStateSummaryData", topic_id=tid, partitions=(
            nested(READ_SHARE_GROUP_STATE_SUMMARY, 0, "PartitionData", partition=0,
                   leader_epoch=leader_epoch(cc, tid, 0)),)),
    )).results[0].partitions[0]


def _write_state(node: RawClient, cc: ClusterClient, group: str, tid: uuid.UUID, state_epoch: int) -> Any:
    v = 0  # every field the probe needs is in v0
    return node.request(WRITE_SHARE_GROUP_STATE, v, group_id=group, topics=(
        nested(WRITE_SHARE_GROUP_STATE, v, "WriteStateData", topic_id=tid, partitions=(
            nested(WRITE_SHARE_GROUP_STATE, v, "PartitionData", partition=0, state_epoch=state_epoch,
                   leader_epoch=leader_epoch(cc, tid, 0), start_offset=2, state_batches=()),)),
    )).results[0].partitions[0]


def _cluster_refused(part: Any) -> bool:
    return int(part.error_code) == E.cluster_authorization_failed


@pytest.mark.requirement("KIP-932.ACL.004")
def test_share_state_rpcs_need_cluster_action(target, unique):
    """KIP-932.ACL.004: A share-partition t-0 of g has persisted state (a member fetched it). As a user
    without CLUSTER_ACTION, ReadShareGroupState, WriteShareGroupState (start offset 2) and
    ReadShareGroupStateSummary (the RPC the KIP's ACL table misnames
    "ReadShareGroupStateOffsets", DIV-93223) answer CLUSTER_AUTHORIZATION_FAILED and the
    state the super user reads is unchanged;
    with CLUSTER_ACTION granted on the cluster the user's read is processed (NONE, the same
    start offset)."""
    require_authorizer(target)
    require_share_groups(target)
    s = Scene(target, unique, KIP932_CLUSTER_USER)
    try:
        require_api(target.capabilities(), READ_SHARE_GROUP_STATE, what="ReadShareGroupState")
        require_api(target.capabilities(), WRITE_SHARE_GROUP_STATE, what="WriteShareGroupState")
        set_group_configs(s.su, s.group, EARLIEST)
        member, _ = join_share_group(s.su, s.group, [s.topic])
        ShareSession(s.su.leader_for(s.topic, 0), s.group, member).fetch_until([(s.tid, 0)], 3, wait_s=10.0)
        su_coord = s.su.coordinator_for(f"{s.group}:{kafka_uuid(s.tid)}:0", SHARE_COORDINATOR_KEY_TYPE, wait_s=30)
        before = _read_state(su_coord, s.su, s.group, s.tid)
        assert int(before.error_code) == E.none, before
        user_coord = s.as_user(su_coord)
        refused_read = _read_state(user_coord, s.su, s.group, s.tid)
        assert int(refused_read.error_code) == E.cluster_authorization_failed, refused_read
        refused_write = _write_state(user_coord, s.su, s.group, s.tid, int(before.state_epoch))
        assert int(refused_write.error_code) == E.cluster_authorization_failed, refused_write
        if target.capabilities().supports_api(READ_SHARE_GROUP_STATE_SUMMARY):
            refused_summary = _read_summary(user_coord, s.su, s.group, s.tid)
            assert int(refused_summary.error_code) == E.cluster_authorization_failed, refused_summary
        after = _read_state(su_coord, s.su, s.group, s.tid)
        assert int(after.start_offset) == int(before.start_offset) and after.state_batches == before.state_batches, (
            f"a refused WriteShareGroupState changed the state: {before} -> {after}")
        s.grant((CLUSTER[0], CLUSTER[1], Op.CLUSTER_ACTION))
        allowed = until_allowed(lambda: _read_state(user_coord, s.su, s.group, s.tid), _cluster_refused)
        assert int(allowed.error_code) == E.none and int(allowed.start_offset) == int(before.start_offset), allowed
    finally:
        s.close()
