"""KIP-848 consumer groups over the wire: raw ConsumerGroupHeartbeat/ConsumerGroupDescribe,
the member-epoch checks of OffsetCommit/OffsetFetch/TxnOffsetCommit, the group-type rules,
ApiVersions, and a confluent-kafka consumer with group.protocol=consumer."""

from __future__ import annotations

import datetime
import time
import uuid

from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import RawClient
from reference_impl.handlers.api_versions import advertised_versions
from reference_impl.model.broker_config import BrokerConfig
from reference_impl.tests.test_groups_wire import (
    assert_commit_round_trip, assert_split, close_all, create_topic, join, nested, poll_until, unique,
)

CGH, CGD = 68, 69
REBALANCE = datetime.timedelta(milliseconds=30_000)


def heartbeat(coord: RawClient, group: str, member_id: str, epoch: int, *, topics=None, owned=None,
              instance=None, regex=None, assignor=None, rebalance=REBALANCE, version: int = 1):
    owned_parts = None if owned is None else tuple(
        nested(CGH, version, "TopicPartitions", topic_id=t, partitions=tuple(ps)) for t, ps in owned.items())
    return coord.request(
        CGH, version, group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance, rack_id=None,
        rebalance_timeout=rebalance, subscribed_topic_names=None if topics is None else tuple(topics),
        subscribed_topic_regex=regex, server_assignor=assignor, topic_partitions=owned_parts,
    )


def join_cg(coord: RawClient, group: str, topics, **kw):
    member_id = uuid.uuid4().hex
    return member_id, heartbeat(coord, group, member_id, 0, topics=topics, owned={}, **kw)


def assigned(resp) -> dict:
    if resp.assignment is None:
        return {}
    return {tp.topic_id: set(tp.partitions) for tp in resp.assignment.topic_partitions}


def test_api_versions_advertise_kip848(client):
    resp = client.bootstrap.request(18, 3, client_software_name="t", client_software_version="1")
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[CGH] == (0, 1) and keys[CGD] == (0, 1)
    assert {f.name: f.max_version_level for f in resp.finalized_features}["group.version"] == 1


def _until(send, done, timeout: float = 10.0):
    """Heartbeat until `done(response)` (the coordinator batches target assignments, KIP-1263)."""
    deadline = time.monotonic() + timeout
    resp = send()
    while not done(resp) and time.monotonic() < deadline:
        time.sleep(0.1)
        resp = send()
    assert done(resp), resp
    return resp


def test_group_version_zero_hides_kip848():
    """Below group.version 1 the broker does not offer the consumer group protocol."""
    off = BrokerConfig(finalized_features={"transaction.version": 2, "share.version": 1})
    assert {CGH, CGD} & {k for k, _lo, _hi in advertised_versions(off)} == set()
    assert {CGH, CGD} <= {k for k, _lo, _hi in advertised_versions(BrokerConfig())}


def test_join_assign_and_leave(client):
    topic, group = unique("t"), unique("cg")
    create_topic(client, topic, 4)
    coord = client.coordinator_for(group)
    m1, r1 = join_cg(coord, group, [topic])
    # A new group starts at epoch 1 (empty assignment): the first member gets epoch 2.
    assert r1.error_code == ErrorCode.none and r1.member_id == m1 and r1.member_epoch == 2
    assert r1.heartbeat_interval == datetime.timedelta(milliseconds=5000)
    (tid,) = assigned(r1)
    assert assigned(r1) == {tid: {0, 1, 2, 3}}
    m2, r2 = join_cg(coord, group, [topic])
    assert r2.error_code == ErrorCode.none and assigned(r2) == {}
    # Within the assignment interval m1 is then told to keep only half: revocation first,
    # its epoch stays 2 until it acknowledges.
    h = _until(lambda: heartbeat(coord, group, m1, 2, owned={tid: [0, 1, 2, 3]}), lambda r: r.assignment is not None)
    assert h.error_code == ErrorCode.none and h.member_epoch == 2
    keep = assigned(h)[tid]
    assert len(keep) == 2
    # m2 gets nothing until m1 acknowledges the revocation.
    r2 = heartbeat(coord, group, m2, r2.member_epoch, owned={})
    assert r2.error_code == ErrorCode.none and assigned(r2) == {}
    h = heartbeat(coord, group, m1, 2, owned={tid: sorted(keep)})
    assert h.member_epoch == 3
    h2 = heartbeat(coord, group, m2, r2.member_epoch, owned={})
    assert h2.member_epoch == 3 and assigned(h2) == {tid: {0, 1, 2, 3} - keep}
    d = coord.request(CGD, 1, group_ids=(group,), include_authorized_operations=False).groups[0]
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        ErrorCode.none, "Stable", 3, 3, "uniform")
    assert {m.member_id for m in d.members} == {m1, m2} and {m.member_type for m in d.members} == {1}
    # m1 leaves: its partitions go to m2 once the next target is computed.
    leave = heartbeat(coord, group, m1, -1)
    assert (leave.error_code, leave.member_epoch) == (ErrorCode.none, -1)
    h2 = _until(lambda: heartbeat(coord, group, m2, 3, owned={tid: sorted({0, 1, 2, 3} - keep)}),
                lambda r: r.assignment is not None)
    assert h2.member_epoch == 4 and assigned(h2) == {tid: {0, 1, 2, 3}}


def test_heartbeat_errors(client):
    topic, group = unique("t"), unique("cg")
    create_topic(client, topic, 1)
    coord = client.coordinator_for(group)
    bad = heartbeat(coord, group, "", 0, topics=[topic], owned={})
    assert (bad.error_code, bad.error_message) == (ErrorCode.invalid_request, "MemberId can't be empty.")
    bad = heartbeat(coord, group, "m", 0, topics=None, owned={})
    assert bad.error_code == ErrorCode.invalid_request
    assert heartbeat(coord, group, "ghost", 3).error_code == ErrorCode.group_id_not_found
    m1, r1 = join_cg(coord, group, [topic])
    # As kafka-native 4.4.0: an empty (non-null) subscription joins without bumping the epoch;
    # v0 lets the coordinator name the member; empty group ids are described first.
    empty = heartbeat(coord, group, "idle", 0, topics=[], owned={})
    assert (empty.error_code, empty.member_epoch) == (ErrorCode.none, 2)
    v0 = heartbeat(coord, group, "", 0, topics=[topic], owned={}, version=0)
    assert v0.error_code == ErrorCode.none and v0.member_id
    described = coord.request(CGD, 1, group_ids=(group, ""), include_authorized_operations=False).groups
    assert [(d.group_id, d.error_code) for d in described] == [("", ErrorCode.invalid_group_id), (group, ErrorCode.none)]
    assert described[1].group_epoch == 3
    assert heartbeat(coord, group, "ghost", 2).error_code == ErrorCode.unknown_member_id
    assert heartbeat(coord, group, m1, 5).error_code == ErrorCode.fenced_member_epoch
    assert heartbeat(coord, group, m1, 2, assignor="nope").error_code == ErrorCode.unsupported_assignor


def test_offset_commit_member_epochs(client):
    topic, group = unique("t"), unique("cg")
    create_topic(client, topic, 1)
    coord = client.coordinator_for(group)
    m1, r1 = join_cg(coord, group, [topic])

    def commit(member_id, epoch, version=9):
        part = nested(8, version, "OffsetCommitRequestPartition", partition_index=0, committed_offset=5,
                      committed_leader_epoch=-1, committed_metadata=None)
        t = nested(8, version, "OffsetCommitRequestTopic", name=topic, partitions=(part,))
        resp = coord.request(8, version, group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
                             group_instance_id=None, topics=(t,))
        return resp.topics[0].partitions[0].error_code

    assert commit(m1, 2) == ErrorCode.none
    assert commit(m1, 1) == ErrorCode.stale_member_epoch  # p0 is held since epoch 2 (KIP-1251)
    assert commit(m1, 3) == ErrorCode.stale_member_epoch
    assert commit("ghost", 2) == ErrorCode.unknown_member_id
    assert commit(m1, 2, version=8) == ErrorCode.unsupported_version

    def fetch(member_id, epoch):
        g = nested(9, 9, "OffsetFetchRequestGroup", group_id=group, member_id=member_id, member_epoch=epoch,
                   topics=(nested(9, 9, "OffsetFetchRequestTopics", name=topic, partition_indexes=(0,)),))
        return coord.request(9, 9, groups=(g,), require_stable=True).groups[0]

    ok = fetch(m1, 2)
    assert ok.error_code == ErrorCode.none and ok.topics[0].partitions[0].committed_offset == 5
    assert fetch(m1, 7).error_code == ErrorCode.stale_member_epoch
    assert fetch("ghost", 2).error_code == ErrorCode.unknown_member_id
    assert fetch(None, -1).error_code == ErrorCode.none


def test_group_type_conflicts(client):
    group = unique("cg")
    topic = unique("t")
    create_topic(client, topic, 1)
    coord = client.coordinator_for(group)
    m1, r1 = join_cg(coord, group, [topic])
    assert r1.error_code == ErrorCode.none
    assert join(coord, group).error_code == ErrorCode.inconsistent_group_protocol
    share = coord.request(76, 1, group_id=group, member_id=uuid.uuid4().hex, member_epoch=0, rack_id=None,
                          subscribed_topic_names=(topic,))
    assert share.error_code == ErrorCode.group_id_not_found
    listed = coord.request(16, 5, states_filter=(), types_filter=("consumer",))
    assert [(g.group_id, g.protocol_type, g.group_type) for g in listed.groups if g.group_id == group] == [
        (group, "consumer", "consumer")]


def _consumer(bootstrap: str, group: str, client_id: str):
    from confluent_kafka import Consumer  # optional dependency: only the real-client test needs it

    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer", "client.id": client_id,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000,
    })


def test_confluent_consumers_with_the_consumer_protocol(cluster, client):
    """Two librdkafka consumers (group.protocol=consumer) split the partitions; when one
    leaves, the other gets them all; commits carry the member epoch."""
    topic, group = unique("t"), unique("cg")
    create_topic(client, topic, 4)
    a = _consumer(cluster.bootstrap_servers, group, "consumer-a")
    b = _consumer(cluster.bootstrap_servers, group, "consumer-b")
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        assert_split(a, b, 4, timeout=60.0)
        assert_commit_round_trip(a, topic, 10)
        b.close()
        assert poll_until([a], lambda: len(a.assignment()) == 4, timeout=60.0), a.assignment()
    finally:
        close_all((a, b))


def test_txn_offset_commit_member_epoch(client):
    """TxnOffsetCommit to a consumer group: the member epoch in the generation field; a stale
    one is ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID (Kafka's OffsetMetadataManager)."""
    topic, group, tid = unique("t"), unique("cg"), unique("tx")
    create_topic(client, topic, 1)
    coord = client.coordinator_for(group)
    m1, _ = join_cg(coord, group, [topic])
    txn_coord = client.coordinator_for(tid, key_type=1)
    init = txn_coord.request(22, 5, transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=60),
                             producer_id=-1, producer_epoch=-1)
    assert init.error_code == ErrorCode.none

    def commit(member_id, epoch):
        part = nested(28, 5, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=3,
                      committed_leader_epoch=-1, committed_metadata=None)
        resp = coord.request(28, 5, transactional_id=tid, group_id=group, producer_id=init.producer_id,
                             producer_epoch=init.producer_epoch, generation_id=epoch, member_id=member_id,
                             group_instance_id=None,
                             topics=(nested(28, 5, "TxnOffsetCommitRequestTopic", name=topic, partitions=(part,)),))
        return resp.topics[0].partitions[0].error_code

    assert commit(m1, 1) == ErrorCode.illegal_generation
    assert commit(m1, 3) == ErrorCode.illegal_generation
    assert commit("ghost", 2) == ErrorCode.unknown_member_id
    assert commit(m1, 2) == ErrorCode.none


def test_group_config_sets_the_heartbeat_interval(client):
    """IncrementalAlterConfigs consumer.heartbeat.interval.ms on the group: the next heartbeat
    answers it (Kafka's per-group override of group.consumer.heartbeat.interval.ms)."""
    topic, group = unique("t"), unique("cg")
    create_topic(client, topic, 1)
    coord = client.coordinator_for(group)
    config = nested(44, 1, "AlterableConfig", name="consumer.heartbeat.interval.ms", config_operation=0, value="7000")
    altered = client.bootstrap.request(44, 1, validate_only=False, resources=(
        nested(44, 1, "AlterConfigsResource", resource_type=32, resource_name=group, configs=(config,)),))
    assert altered.responses[0].error_code == ErrorCode.none, altered
    _m1, r1 = join_cg(coord, group, [topic])
    assert r1.heartbeat_interval == datetime.timedelta(milliseconds=7000)
