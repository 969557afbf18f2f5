"""Group coordinator over the wire: raw-protocol error paths and real clients.

Runs the in-process reference cluster with 1 and 3 brokers. The raw client drives the
error paths a client library would hide; confluent-kafka consumers and the AdminClient
check that real clients work against the reference (classic group protocol).
"""

from __future__ import annotations

import datetime
import struct
import threading
import time
import uuid

import pytest
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.handlers.registry import HANDLERS
from reference_impl.protocol import framing, payloads

SESSION = datetime.timedelta(milliseconds=10_000)
REBALANCE = datetime.timedelta(milliseconds=10_000)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def nested(api_key: int, version: int, class_name: str, /, **fields):
    return payloads.build(payloads.nested(framing.request_schema(api_key, version), class_name), **fields)


def subscription(*topics: str) -> bytes:
    return struct.pack(">h", 0) + framing.encode_entity(
        ConsumerProtocolSubscription(topics=tuple(topics), user_data=None))


def protocols(version: int = 9, name: str = "range", metadata: bytes | None = None):
    return (nested(11, version, "JoinGroupRequestProtocol", name=name,
                   metadata=subscription("t") if metadata is None else metadata),)


def join(coord: RawClient, group: str, member_id: str = "", *, version: int = 9, instance: str | None = None,
         ptype: str = "consumer", protos=None, session=SESSION, timeout: float | None = None):
    req = payloads.build(
        framing.request_schema(11, version), group_id=group, session_timeout=session, rebalance_timeout=REBALANCE,
        member_id=member_id, group_instance_id=instance, protocol_type=ptype,
        protocols=protocols(version) if protos is None else protos, reason=None,
    )
    return coord.send(req, timeout=timeout)


def join_member(coord: RawClient, group: str, **kw):
    first = join(coord, group, **kw)
    assert first.error_code == ErrorCode.member_id_required
    return join(coord, group, first.member_id, **kw)


def sync(coord: RawClient, group: str, generation: int, member_id: str, assignments=(), *, version: int = 5,
         instance=None, ptype="consumer", pname="range"):
    return coord.request(
        14, version, group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance,
        protocol_type=ptype, protocol_name=pname,
        assignments=tuple(nested(14, version, "SyncGroupRequestAssignment", member_id=m, assignment=a)
                          for m, a in assignments),
    )


def create_topic(client: ClusterClient, name: str, partitions: int) -> None:
    topic = nested(19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1,
                   assignments=(), configs=())
    controller = client.bootstrap
    resp = controller.request(19, 7, topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False)
    assert resp.topics[0].error_code in (ErrorCode.none, ErrorCode.topic_already_exists), resp


def non_coordinator(client: ClusterClient, key: str) -> RawClient | None:
    coord = client.coordinator_for(key)
    for node_id in client.nodes:
        other = client.node(node_id)
        if other is not coord:
            return other
    return None


# -- FindCoordinator ---------------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_every_version(cluster, client, version):
    state = cluster.cluster.state
    for key_type in (0, 1) if version >= 1 else (0,):
        key = unique("key")
        expected = state.coordinator_for(key)
        if version >= 4:
            resp = client.bootstrap.request(10, version, key_type=key_type, coordinator_keys=(key, key + "x"))
            got = {c.key: c for c in resp.coordinators}
            assert got[key].error_code == ErrorCode.none and got[key].node_id == expected
            assert got[key + "x"].node_id == state.coordinator_for(key + "x")
            assert (got[key].host, got[key].port) == (state.nodes[expected].host, state.nodes[expected].port)
        else:
            resp = client.bootstrap.request(10, version, key=key, key_type=key_type)
            assert resp.error_code == ErrorCode.none and resp.node_id == expected
            assert resp.port == state.nodes[expected].port
            if version >= 1:
                assert resp.error_message == "NONE"


def test_find_coordinator_unknown_key_type(client):
    resp = client.bootstrap.request(10, 4, key_type=7, coordinator_keys=("a",))
    assert resp.coordinators[0].error_code == ErrorCode.invalid_request
    assert resp.coordinators[0].node_id == -1
    old = client.bootstrap.request(10, 3, key="a", key_type=7)
    assert old.error_code == ErrorCode.invalid_request and old.node_id == -1


# -- Join / Sync / Heartbeat / Leave -------------------------------------------------------


def test_two_step_join_sync_heartbeat_leave(client):
    group = unique("g")
    coord = client.coordinator_for(group)
    first = join(coord, group)
    assert first.error_code == ErrorCode.member_id_required and first.member_id.startswith("kipcheck-raw-")
    r = join(coord, group, first.member_id)
    assert (r.error_code, r.generation_id, r.protocol_type, r.protocol_name) == (ErrorCode.none, 1, "consumer", "range")
    assert r.leader == r.member_id and len(r.members) == 1
    s = sync(coord, group, 1, r.member_id, [(r.member_id, b"assign")])
    assert (s.error_code, s.assignment, s.protocol_name) == (ErrorCode.none, b"assign", "range")
    assert coord.request(12, 4, group_id=group, generation_id=1, member_id=r.member_id).error_code == ErrorCode.none
    assert coord.request(12, 4, group_id=group, generation_id=7, member_id=r.member_id).error_code == \
        ErrorCode.illegal_generation
    leave = coord.request(13, 5, group_id=group, members=(
        nested(13, 5, "MemberIdentity", member_id=r.member_id, group_instance_id=None, reason="bye"),
        nested(13, 5, "MemberIdentity", member_id="ghost", group_instance_id=None, reason=None),
    ))
    assert leave.error_code == ErrorCode.none
    assert [m.error_code for m in leave.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    d = coord.request(15, 5, groups=(group,), include_authorized_operations=False).groups[0]
    assert (d.group_state, d.protocol_type, d.members) == ("Empty", "consumer", ())


def test_parked_join_is_answered_when_rebalance_completes(cluster, client):
    group = unique("g")
    coord = client.coordinator_for(group)
    a = join_member(coord, group)
    sync(coord, group, 1, a.member_id, [(a.member_id, b"A")])
    host, port = client.nodes[next(n for n in client.nodes if client.node(n) is coord)]
    results = {}

    def second_member():
        with RawClient(host, port, client_id="second") as other:
            results["b"] = join_member(other, group)

    t = threading.Thread(target=second_member)
    t.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        hb = coord.request(12, 4, group_id=group, generation_id=1, member_id=a.member_id)
        if hb.error_code == ErrorCode.rebalance_in_progress:
            break
        time.sleep(0.02)
    assert hb.error_code == ErrorCode.rebalance_in_progress
    assert "b" not in results  # b is parked until a rejoins
    again = join(coord, group, a.member_id)
    t.join(5)
    b = results["b"]
    assert again.generation_id == b.generation_id == 2
    assert again.leader == a.member_id and b.leader == a.member_id
    assert {m.member_id for m in again.members} == {a.member_id, b.member_id} and b.members == ()
    assert b.member_id.startswith("second-")


def test_join_error_paths(client):
    group = unique("g")
    coord = client.coordinator_for(group)
    assert join(coord, group, session=datetime.timedelta(milliseconds=100)).error_code == \
        ErrorCode.invalid_session_timeout
    assert join(coord, "").error_code == ErrorCode.invalid_group_id
    assert join(coord, group, "not-a-member").error_code == ErrorCode.unknown_member_id
    assert join(coord, group, ptype="").error_code == ErrorCode.inconsistent_group_protocol
    join_member(coord, group)
    other = join(coord, group, ptype="connect")
    assert other.error_code == ErrorCode.inconsistent_group_protocol
    assert other.member_id == "" and other.protocol_name is None
    old = join(coord, group, version=5, ptype="connect", protos=protocols(5))
    assert old.error_code == ErrorCode.inconsistent_group_protocol and old.protocol_name == ""
    g3 = unique("g3")
    v3 = join(client.coordinator_for(g3), g3, version=3, protos=protocols(3))  # no MEMBER_ID_REQUIRED before v4
    assert v3.error_code == ErrorCode.none and v3.generation_id == 1 and v3.leader == v3.member_id


def test_sync_error_paths(client):
    group = unique("g")
    coord = client.coordinator_for(group)
    assert sync(coord, group, 1, "x").error_code == ErrorCode.unknown_member_id
    r = join_member(coord, group)
    mid = r.member_id
    assert sync(coord, group, 1, "ghost").error_code == ErrorCode.unknown_member_id
    assert sync(coord, group, 2, mid).error_code == ErrorCode.illegal_generation
    assert sync(coord, group, 1, mid, pname="roundrobin").error_code == ErrorCode.inconsistent_group_protocol
    assert sync(coord, group, 1, mid, ptype=None).error_code == ErrorCode.inconsistent_group_protocol  # v5: mandatory
    ok = sync(coord, group, 1, mid, [(mid, b"z")], version=0)
    assert ok.error_code == ErrorCode.none and ok.assignment == b"z"


def test_static_membership_fencing(client):
    group = unique("g")
    coord = client.coordinator_for(group)
    first = join(coord, group, instance="inst-1")
    assert first.error_code == ErrorCode.none and first.member_id.startswith("inst-1-")
    sync(coord, group, 1, first.member_id, [(first.member_id, b"A")], instance="inst-1")
    second = join(coord, group, instance="inst-1")
    assert second.error_code == ErrorCode.none and second.member_id != first.member_id
    assert second.generation_id == 1 and second.skip_assignment  # v9 static leader
    hb = coord.request(12, 4, group_id=group, generation_id=1, member_id=first.member_id,
                       group_instance_id="inst-1")
    assert hb.error_code == ErrorCode.fenced_instance_id
    s = sync(coord, group, 1, second.member_id, instance="inst-1")
    assert s.error_code == ErrorCode.none and s.assignment == b"A"
    leave = coord.request(13, 5, group_id=group, members=(
        nested(13, 5, "MemberIdentity", member_id="", group_instance_id="inst-1", reason=None),))
    assert leave.members[0].error_code == ErrorCode.none


def test_leave_group_v0_single_member(client):
    group = unique("g")
    coord = client.coordinator_for(group)
    assert coord.request(13, 0, group_id=group, member_id="x").error_code == ErrorCode.unknown_member_id
    r = join_member(coord, group)
    assert coord.request(13, 1, group_id=group, member_id=r.member_id).error_code == ErrorCode.none


def test_requests_to_other_node_get_not_coordinator(client3):
    client = client3
    group = unique("g")
    other = non_coordinator(client, group)
    assert join(other, group).error_code == ErrorCode.not_coordinator
    assert sync(other, group, 1, "m").error_code == ErrorCode.not_coordinator
    assert other.request(12, 4, group_id=group, generation_id=1, member_id="m").error_code == \
        ErrorCode.not_coordinator
    assert other.request(13, 5, group_id=group, members=()).error_code == ErrorCode.not_coordinator
    fetch = other.request(9, 8, groups=(nested(9, 8, "OffsetFetchRequestGroup", group_id=group, topics=None),),
                          require_stable=False)
    assert fetch.groups[0].error_code == ErrorCode.not_coordinator
    assert other.request(9, 7, group_id=group, topics=None, require_stable=False).error_code == \
        ErrorCode.not_coordinator
    d = other.request(15, 5, groups=(group,), include_authorized_operations=False)
    assert d.groups[0].error_code == ErrorCode.not_coordinator
    assert other.request(42, 2, groups_names=(group,)).results[0].error_code == ErrorCode.not_coordinator


# -- offsets ---------------------------------------------------------------------------------


def commit(coord, group, topic, parts, *, version=9, generation=-1, member_id="", metadata="m"):
    topics = (nested(8, version, "OffsetCommitRequestTopic", name=topic, partitions=tuple(
        nested(8, version, "OffsetCommitRequestPartition", partition_index=p, committed_offset=o,
               committed_leader_epoch=3, committed_metadata=metadata)
        for p, o in parts)),)
    return coord.request(8, version, group_id=group, generation_id_or_member_epoch=generation,
                         member_id=member_id, group_instance_id=None, topics=topics,
                         retention_time=datetime.timedelta(milliseconds=-1))


def test_offset_commit_and_fetch(client):
    topic = unique("t")
    create_topic(client, topic, 2)
    group = unique("g")
    coord = client.coordinator_for(group)
    r = commit(coord, group, topic, [(0, 10), (1, 20), (5, 1)])
    errors = {p.partition_index: p.error_code for p in r.topics[0].partitions}
    assert errors == {0: ErrorCode.none, 1: ErrorCode.none, 5: ErrorCode.unknown_topic_or_partition}
    missing = commit(coord, group, unique("missing"), [(0, 1)])
    assert missing.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    # v8+: several groups, all partitions.
    f = coord.request(9, 8, groups=(
        nested(9, 8, "OffsetFetchRequestGroup", group_id=group, topics=None),
        nested(9, 8, "OffsetFetchRequestGroup", group_id=group, topics=(
            nested(9, 8, "OffsetFetchRequestTopics", name=topic, partition_indexes=(0, 1)),
            nested(9, 8, "OffsetFetchRequestTopics", name="no-such-topic", partition_indexes=(0,)),
        )),
    ), require_stable=True)
    everything, listed = f.groups
    assert [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata)
            for p in everything.topics[0].partitions] == [(0, 10, 3, "m"), (1, 20, 3, "m")]
    assert [p.committed_offset for p in listed.topics[0].partitions] == [10, 20]
    assert [(p.committed_offset, p.error_code) for p in listed.topics[1].partitions] == [(-1, ErrorCode.none)]
    # v1 (oldest offered) and v7.
    v1 = coord.request(9, 1, group_id=group, topics=(
        nested(9, 1, "OffsetFetchRequestTopic", name=topic, partition_indexes=(1,)),))
    assert v1.topics[0].partitions[0].committed_offset == 20
    v7 = coord.request(9, 7, group_id=group, topics=None, require_stable=False)
    assert v7.error_code == ErrorCode.none and len(v7.topics[0].partitions) == 2
    # The simple commit created an Empty, protocol-less group.
    d = coord.request(15, 6, groups=(group,), include_authorized_operations=True).groups[0]
    assert (d.group_state, d.protocol_type, d.error_code) == ("Empty", "", ErrorCode.none)
    assert d.authorized_operations == 3400
    # Group-managed commits are checked against the group's generation and members.
    g2 = unique("g")
    c2 = client.coordinator_for(g2)
    m = join_member(c2, g2)
    assert commit(c2, g2, topic, [(0, 1)], generation=1, member_id="ghost").topics[0].partitions[0].error_code == \
        ErrorCode.unknown_member_id
    assert commit(c2, g2, topic, [(0, 1)], generation=1, member_id=m.member_id).topics[0].partitions[0] \
        .error_code == ErrorCode.rebalance_in_progress  # CompletingRebalance
    sync(c2, g2, 1, m.member_id, [(m.member_id, b"")])
    assert commit(c2, g2, topic, [(0, 1)], generation=2, member_id=m.member_id).topics[0].partitions[0] \
        .error_code == ErrorCode.illegal_generation
    assert commit(c2, g2, topic, [(0, 5)], generation=1, member_id=m.member_id).topics[0].partitions[0] \
        .error_code == ErrorCode.none
    nog = unique("nog")
    cn = client.coordinator_for(nog)
    assert commit(cn, nog, topic, [(0, 1)], generation=3, member_id="m", version=9).topics[0].partitions[0] \
        .error_code == ErrorCode.group_id_not_found
    assert commit(cn, nog, topic, [(0, 1)], generation=3, member_id="m", version=8).topics[0].partitions[0] \
        .error_code == ErrorCode.illegal_generation
    assert commit(cn, nog, topic, [(0, 1)], metadata="x" * 5000).topics[0].partitions[0].error_code == \
        ErrorCode.offset_metadata_too_large


# -- admin ------------------------------------------------------------------------------------


def test_list_describe_delete(cluster, client):
    group = unique("g")
    coord = client.coordinator_for(group)
    m = join_member(coord, group)
    sync(coord, group, 1, m.member_id, [(m.member_id, b"A")])
    listed = {}
    for node_id in client.nodes:
        resp = client.node(node_id).request(16, 5, states_filter=(), types_filter=())
        for g in resp.groups:
            listed[g.group_id] = (node_id, g.group_state, g.protocol_type, g.group_type)
    coordinator_id = cluster.cluster.state.coordinator_for(group)
    assert listed[group] == (coordinator_id, "Stable", "consumer", "classic")
    stable_only = coord.request(16, 4, states_filter=("stable",))
    assert group in {g.group_id for g in stable_only.groups}
    assert group not in {g.group_id for g in coord.request(16, 4, states_filter=("Empty",)).groups}
    assert coord.request(16, 5, states_filter=(), types_filter=("consumer",)).groups == ()
    assert coord.request(42, 2, groups_names=(group,)).results[0].error_code == ErrorCode.non_empty_group
    coord.request(13, 5, group_id=group, members=(
        nested(13, 5, "MemberIdentity", member_id=m.member_id, group_instance_id=None, reason=None),))
    assert coord.request(42, 2, groups_names=(group, group)).results == (
        payloads.build(payloads.nested(framing.response_schema(42, 2), "DeletableGroupResult"),
                       group_id=group, error_code=ErrorCode.none),)
    gone = coord.request(15, 6, groups=(group,), include_authorized_operations=False).groups[0]
    assert (gone.error_code, gone.group_state) == (ErrorCode.group_id_not_found, "Dead")
    assert gone.error_message == f"Group {group} not found."
    old = coord.request(15, 5, groups=(group,), include_authorized_operations=False).groups[0]
    assert (old.error_code, old.group_state) == (ErrorCode.none, "Dead")
    assert coord.request(42, 2, groups_names=(group,)).results[0].error_code == ErrorCode.group_id_not_found


# -- real clients -------------------------------------------------------------------------------

needs_data_path = pytest.mark.skipif(
    not {1, 2, 3, 19}.issubset(HANDLERS), reason="needs the data path handlers (Fetch, ListOffsets, Metadata, CreateTopics)"
)


def _consumer(bootstrap: str, group: str, **extra):
    from confluent_kafka import Consumer

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "classic",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 200,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    conf.update(extra)
    return Consumer(conf)


def poll_until(consumers, predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        if predicate():
            return True
    return False


def assert_split(a, b, partitions: int, timeout: float = 30.0) -> None:
    """Both consumers end up with some of the topic's partitions, none twice."""
    def split() -> bool:
        pa, pb = a.assignment(), b.assignment()
        return len(pa) > 0 and len(pb) > 0 and len(pa) + len(pb) == partitions

    assert poll_until([a, b], split, timeout), (a.assignment(), b.assignment())
    assert not {p.partition for p in a.assignment()} & {p.partition for p in b.assignment()}


def assert_commit_round_trip(consumer, topic: str, base: int) -> None:
    """Commit base+p for each assigned partition p (with the member's epoch or generation)
    and read the offsets back."""
    from confluent_kafka import TopicPartition  # optional dependency, as _consumer

    mine = sorted(p.partition for p in consumer.assignment())
    consumer.commit(offsets=[TopicPartition(topic, p, base + p) for p in mine], asynchronous=False)
    got = consumer.committed([TopicPartition(topic, p) for p in mine], timeout=10)
    assert [(t.partition, t.offset) for t in got] == [(p, base + p) for p in mine]


def close_all(consumers) -> None:
    for c in consumers:
        try:
            c.close()
        except RuntimeError:  # already closed by the test
            pass


@needs_data_path
def test_two_consumers_share_then_one_takes_all(cluster, client):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = unique("t")
    create_topic(client, topic, 4)
    group = unique("cg")
    a = _consumer(cluster.bootstrap_servers, group, **{"client.id": "consumer-a"})
    b = _consumer(cluster.bootstrap_servers, group, **{"client.id": "consumer-b"})
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        assert_split(a, b, 4)

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        desc = admin.describe_consumer_groups([group])[group].result(15)
        assert desc.state.name == "STABLE"
        assert sorted(m.client_id for m in desc.members) == ["consumer-a", "consumer-b"]
        assert sum(len(m.assignment.topic_partitions) for m in desc.members) == 4

        assert_commit_round_trip(a, topic, 100)

        b.close()
        assert poll_until([a], lambda: len(a.assignment()) == 4), a.assignment()
        a.commit(offsets=[TopicPartition(topic, p, 7) for p in range(4)], asynchronous=False)
        got = a.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
        assert [t.offset for t in got] == [7, 7, 7, 7]
        a.close()

        listed = admin.list_consumer_groups().result(15)
        states = {g.group_id: g.state.name for g in listed.valid}
        assert states.get(group) == "EMPTY"
        deleted = admin.delete_consumer_groups([group])
        deleted[group].result(15)
        listed = admin.list_consumer_groups().result(15)
        assert group not in {g.group_id for g in listed.valid}
    finally:
        close_all((a, b))
