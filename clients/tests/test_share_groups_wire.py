"""Share groups (KIP-932) over the wire: ShareGroupHeartbeat, ShareGroupDescribe,
FindCoordinator share keys, ListGroups/DeleteGroups, and the group id namespace shared with
classic groups.

Runs with the raw client against the in-process reference cluster with 1 and 3 brokers
(short `group.share.session.timeout.ms`). The same checks run against real Kafka when
KIPCHECK_SHARE_WIRE_KAFKA names a target spec, e.g. `kafka-native:4.4.0:nodes=3` (the
broker options for short share sessions are added here). Assertions hold on both: partition
coverage and balance, never exact placement; epochs only by their relations. Where Kafka
releases answer differently the expectation says so (`Env.kafka_version`).
"""

from __future__ import annotations

import datetime
import os
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.model.broker_state import BrokerConfig, NodeEndpoint, ReferenceState
from reference_impl.model.clock import ManualClock
from reference_impl.model.share_state_records import coordinator_key
from reference_impl.protocol import framing, payloads
from reference_impl.server.broker_server import ThreadedReferenceCluster
from targets.factory import create_target
from targets.kafka_native.versions import resolve_release
from targets.target import parse_target_spec

SESSION_MS = 1_500
HEARTBEAT_MS = 500
OMITTED_OPS = -(2**31)
ALL_GROUP_OPS = 3400  # READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS (no authorizer)
TRANSIENT = {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available}
KAFKA_SPEC = os.environ.get("KIPCHECK_SHARE_WIRE_KAFKA")
# Kafka's minimum share session timeout / heartbeat interval are 45 s / 5 s by default.
KAFKA_SESSION_MS, KAFKA_HEARTBEAT_MS = 3_000, 1_000
KAFKA_OPTIONS = (
    f":broker.group.share.min.session.timeout.ms=2000:broker.group.share.session.timeout.ms={KAFKA_SESSION_MS}"
    f":broker.group.share.min.heartbeat.interval.ms=500:broker.group.share.heartbeat.interval.ms={KAFKA_HEARTBEAT_MS}"
)


@dataclass
class Env:
    bootstrap: str
    nodes: int
    session_ms: int
    heartbeat_ms: int
    reference: Any = None  # the ThreadedReferenceCluster, or None for real Kafka
    kafka_version: tuple[int, int] | None = None
    extra: dict = field(default_factory=dict)

    @property
    def state(self) -> ReferenceState:
        return self.reference.cluster.state


_PARAMS = ["reference-1", "reference-3"] + (["kafka"] if KAFKA_SPEC else [])


@pytest.fixture(scope="module", params=_PARAMS)
def env(request):
    if request.param == "kafka":
        release = resolve_release(parse_target_spec(KAFKA_SPEC).version)
        version = tuple(int(x) for x in release.version.split(".")[:2])
        target = create_target(KAFKA_SPEC + KAFKA_OPTIONS)
        target.start()
        try:
            with ClusterClient(target.bootstrap_servers) as cc:
                nodes = len(cc.nodes)
            yield Env(target.bootstrap_servers, nodes, KAFKA_SESSION_MS, KAFKA_HEARTBEAT_MS, kafka_version=version)
        finally:
            target.stop()
        return
    brokers = int(request.param.rsplit("-", 1)[1])
    config = BrokerConfig(group_share_session_timeout_ms=SESSION_MS, group_share_heartbeat_interval_ms=HEARTBEAT_MS)
    with ThreadedReferenceCluster(brokers=brokers, config=config) as cluster:
        yield Env(cluster.bootstrap_servers, brokers, SESSION_MS, HEARTBEAT_MS, reference=cluster)


@pytest.fixture()
def client(env):
    with ClusterClient(env.bootstrap) as cc:
        yield cc


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- helpers -----------------------------------------------------------------------------


def create_topic(client: ClusterClient, partitions: int = 4) -> tuple[str, uuid.UUID]:
    name = unique("sgt")
    req = framing.request_schema(19, 7)
    topic = payloads.build(payloads.nested(req, "CreatableTopic"), name=name, num_partitions=partitions,
                           replication_factor=1, assignments=(), configs=())
    resp = client.bootstrap.request(19, 7, topics=(topic,), timeout=datetime.timedelta(seconds=30),
                                    validate_only=False)
    assert resp.topics[0].error_code == ErrorCode.none, resp
    deadline = time.monotonic() + 15
    while True:
        md = client.refresh([name])
        t = next((t for t in md.topics if t.name == name), None)
        if t is not None and t.error_code == ErrorCode.none and len(t.partitions) == partitions:
            return name, t.topic_id
        assert time.monotonic() < deadline, f"topic {name} never showed up in metadata"
        time.sleep(0.1)


def coordinator(client: ClusterClient, group: str) -> RawClient:
    """The group's coordinator, once it answers as one (a freshly started Kafka moves and
    loads __consumer_offsets partitions for a while: NOT_COORDINATOR, LOAD_IN_PROGRESS)."""
    deadline = time.monotonic() + 30
    while True:
        node = client.coordinator_for(group, 0, wait_s=30)
        probe = heartbeat(node, group, str(uuid.uuid4()), 5, retry=False)  # never creates a group
        if probe.error not in TRANSIENT | {ErrorCode.not_coordinator} or time.monotonic() > deadline:
            return node
        time.sleep(0.3)


def eventually(check, timeout_s: float = 15.0):
    """Kafka answers ListGroups/Describe from committed state: a write shows up a moment later."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except (AssertionError, KeyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def non_coordinator(client: ClusterClient, group: str) -> RawClient | None:
    coord = coordinator(client, group)
    return next((client.node(n) for n in sorted(client.nodes) if client.node(n) is not coord), None)


@dataclass
class Beat:
    error: ErrorCode
    message: str | None
    member_id: str | None
    epoch: int
    interval_ms: int
    assignment: dict[uuid.UUID, tuple[int, ...]] | None


def heartbeat(node: RawClient, group: str, member: str, epoch: int, topics=None, *, rack=None, retry=True) -> Beat:
    deadline = time.monotonic() + 15
    while True:
        r = node.request(76, 1, group_id=group, member_id=member, member_epoch=epoch, rack_id=rack,
                         subscribed_topic_names=None if topics is None else tuple(topics))
        if not (retry and r.error_code in TRANSIENT and time.monotonic() < deadline):
            break
        time.sleep(0.2)
    assignment = None
    if r.assignment is not None:
        assignment = {t.topic_id: tuple(t.partitions) for t in r.assignment.topic_partitions}
    return Beat(ErrorCode(r.error_code), r.error_message, r.member_id, int(r.member_epoch),
                int(r.heartbeat_interval.total_seconds() * 1000), assignment)


class Member:
    """A share consumer's membership as its heartbeat loop keeps it."""

    def __init__(self, node: RawClient, group: str, topic: str) -> None:
        self.node, self.group, self.topic = node, group, topic
        self.member_id = str(uuid.uuid4())  # v1: the client generates its member id
        self.epoch = 0
        self.assigned: dict[uuid.UUID, tuple[int, ...]] = {}
        self.beats: list[Beat] = []

    def beat(self) -> Beat:
        b = heartbeat(self.node, self.group, self.member_id, self.epoch, (self.topic,) if self.epoch == 0 else None)
        assert b.error == ErrorCode.none, b
        assert b.member_id == self.member_id
        assert b.epoch >= self.epoch
        self.epoch = b.epoch
        if b.assignment is not None:
            self.assigned = {t: ps for t, ps in b.assignment.items() if ps}
        self.beats.append(b)
        return b

    def leave(self) -> Beat:
        return heartbeat(self.node, self.group, self.member_id, -1)

    def partitions(self, topic_id) -> set[int]:
        return set(self.assigned.get(topic_id, ()))


def beat_until(members: list[Member], predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        for m in members:
            m.beat()
        if predicate():
            return
        assert time.monotonic() < deadline, [(m.member_id, m.epoch, m.assigned) for m in members]
        time.sleep(0.1)


def describe(node: RawClient, *groups: str, ops: bool = False):
    return node.request(77, 1, group_ids=tuple(groups), include_authorized_operations=ops).groups


def list_groups(client: ClusterClient, version: int = 5, **fields) -> dict[str, Any]:
    out = {}
    for n in sorted(client.nodes):
        for g in client.node(n).request(16, version, **fields).groups:
            out[g.group_id] = g
    return out


def classic_member(node: RawClient, group: str) -> str:
    sub = struct.pack(">h", 0) + framing.encode_entity(ConsumerProtocolSubscription(topics=("t",), user_data=None))
    req = framing.request_schema(11, 9)
    proto = payloads.build(payloads.nested(req, "JoinGroupRequestProtocol"), name="range", metadata=sub)

    def join(member_id: str):
        return node.send(payloads.build(
            req, group_id=group, session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id=member_id, group_instance_id=None,
            protocol_type="consumer", protocols=(proto,), reason=None,
        ))

    first = join("")
    assert first.error_code == ErrorCode.member_id_required
    second = join(first.member_id)
    assert second.error_code == ErrorCode.none
    return second.member_id


def share_group_with_member(client: ClusterClient) -> tuple[str, str, Member]:
    topic, _ = create_topic(client, 2)
    group = unique("sg")
    m = Member(coordinator(client, group), group, topic)
    m.beat()
    return group, topic, m


# -- ApiVersions ---------------------------------------------------------------------------


def test_api_versions_and_share_version_feature(env, client):
    versions = client.bootstrap.api_versions()
    assert versions[76] == (1, 1) and versions[77] == (1, 1)
    assert versions[10][1] >= 6  # FindCoordinator v6: share coordinator keys
    resp = client.bootstrap.api_versions_response(4 if versions[18][1] >= 4 else 3)
    finalized = {f.name: int(f.max_version_level) for f in resp.finalized_features}
    assert finalized.get("share.version", 0) >= 1
    if env.reference is not None:
        supported = {f.name: (int(f.min_version), int(f.max_version)) for f in resp.supported_features}
        assert finalized["share.version"] == 1 and supported["share.version"] == (0, 2)  # 2: KIP-1289


# -- membership ----------------------------------------------------------------------------


def test_two_members_share_every_partition_then_one_leaves(env, client):
    topic, topic_id = create_topic(client, 4)
    group = unique("sg")
    coord = coordinator(client, group)
    a, b = Member(coord, group, topic), Member(coord, group, topic)

    first = a.beat()
    assert first.epoch >= 1 and first.assignment is not None  # a join always carries an assignment
    assert first.interval_ms == env.heartbeat_ms
    # Partitions come once their share-group state is initialised (the next heartbeats).
    beat_until([a], lambda: a.partitions(topic_id) == {0, 1, 2, 3})
    assert set(a.assigned) == {topic_id}
    epoch_alone = a.epoch

    joined = b.beat()
    # 4.2 and the reference bump the group epoch at once; 4.4 batches assignments and bumps later.
    assert joined.assignment is not None and b.epoch >= epoch_alone
    if env.reference is not None:
        assert b.epoch > epoch_alone

    def balanced() -> bool:
        pa, pb = a.partitions(topic_id), b.partitions(topic_id)
        return pa | pb == {0, 1, 2, 3} and not pa & pb and len(pa) == len(pb) == 2 and a.epoch == b.epoch

    beat_until([a, b], balanced)
    assert a.epoch > epoch_alone
    assert a.beat().assignment is None  # unchanged: not sent

    (d,) = describe(coord, group)
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch) == (ErrorCode.none, "Stable", a.epoch, a.epoch)
    assert {m.member_id: m.member_epoch for m in d.members} == {a.member_id: a.epoch, b.member_id: b.epoch}

    left = a.leave()
    assert (left.error, left.member_id, left.epoch, left.assignment) == (ErrorCode.none, a.member_id, -1, None)
    assert a.leave().error == ErrorCode.unknown_member_id
    beat_until([b], lambda: b.partitions(topic_id) == {0, 1, 2, 3})
    assert b.epoch > a.epoch
    (d,) = describe(coord, group)
    assert [m.member_id for m in d.members] == [b.member_id]
    assert d.group_state == "Stable"
    assert b.leave().epoch == -1
    (d,) = describe(coord, group)
    assert (d.group_state, d.members) == ("Empty", ())


def test_silent_member_is_removed_after_the_session_timeout(env, client):
    topic, topic_id = create_topic(client, 4)
    group = unique("sg")
    coord = coordinator(client, group)
    a, b = Member(coord, group, topic), Member(coord, group, topic)
    a.beat()
    b.beat()
    beat_until([a, b], lambda: a.partitions(topic_id) | b.partitions(topic_id) == {0, 1, 2, 3}
               and a.partitions(topic_id) and b.partitions(topic_id))
    (before,) = describe(coord, group)
    # b goes silent; a keeps heartbeating and takes over every partition.
    silent_since = time.monotonic()
    beat_until([a], lambda: a.partitions(topic_id) == {0, 1, 2, 3}, timeout_s=env.session_ms / 1000 + 30)
    assert time.monotonic() - silent_since >= env.session_ms / 1000 * 0.8
    (after,) = describe(coord, group)
    assert [m.member_id for m in after.members] == [a.member_id]
    assert after.group_epoch > before.group_epoch
    gone = heartbeat(coord, group, b.member_id, b.epoch)
    assert gone.error == ErrorCode.unknown_member_id
    assert gone.message == f"Member {b.member_id} is not a member of group {group}."
    # A removed member may join again with epoch 0 and the same id.
    again = heartbeat(coord, group, b.member_id, 0, (topic,))
    assert again.error == ErrorCode.none and again.epoch >= a.epoch  # 4.4 bumps the epoch later
    a.leave()
    heartbeat(coord, group, b.member_id, -1)

    # Every member silent: the group empties by itself.
    c = Member(coord, group, topic)
    c.beat()
    deadline = time.monotonic() + env.session_ms / 1000 + 30
    while describe(coord, group)[0].members:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert describe(coord, group)[0].group_state == "Empty"


def test_heartbeat_errors(env, client):
    topic, _ = create_topic(client, 1)
    group = unique("sg")
    coord = coordinator(client, group)
    member = str(uuid.uuid4())

    def err(b: Beat) -> tuple[ErrorCode, str | None]:
        assert (b.member_id, b.epoch, b.assignment) == (None, 0, None)
        return b.error, b.message

    invalid = ErrorCode.invalid_request
    assert err(heartbeat(coord, group, "", 0, (topic,))) == (invalid, None)
    assert err(heartbeat(coord, group, " ", 0, (topic,))) == (invalid, "MemberId can't be empty.")
    assert err(heartbeat(coord, "", member, 0, (topic,))) == (invalid, "GroupId can't be empty.")
    assert err(heartbeat(coord, group, member, 0, (topic,), rack=" ")) == (invalid, "RackId can't be empty.")
    assert err(heartbeat(coord, group, member, 0, None)) == (invalid, "SubscribedTopicNames must be set in first request.")
    assert err(heartbeat(coord, group, member, 0, ())) == (invalid, "SubscribedTopicNames must be set in first request.")
    assert err(heartbeat(coord, group, member, -2, (topic,))) == (invalid, "MemberEpoch is invalid.")
    assert err(heartbeat(coord, group, member, 1, (topic,))) == (
        ErrorCode.group_id_not_found, f"Share group {group} not found.")
    assert err(heartbeat(coord, group, member, -1)) == (ErrorCode.group_id_not_found, f"Group {group} not found.")

    m = Member(coord, group, topic)
    m.beat()
    stranger = str(uuid.uuid4())
    assert err(heartbeat(coord, group, stranger, 1)) == (
        ErrorCode.unknown_member_id, f"Member {stranger} is not a member of group {group}.")
    assert err(heartbeat(coord, group, stranger, -1))[0] == ErrorCode.unknown_member_id
    fenced = heartbeat(coord, group, m.member_id, m.epoch + 5)
    assert err(fenced)[0] == ErrorCode.fenced_member_epoch
    assert fenced.message.startswith(f"The share group member has a greater member epoch ({m.epoch + 5}) than")
    # A join with a topic that does not exist is accepted (nothing to assign).
    other_group = unique("sg")
    lonely = heartbeat(coordinator(client, other_group), other_group, str(uuid.uuid4()), 0, (unique("nosuch"),))
    assert lonely.error == ErrorCode.none and lonely.assignment == {}
    m.leave()


def test_wrong_coordinator_and_find_coordinator_share_keys(env, client):
    topic, topic_id = create_topic(client, 2)
    group = unique("sg")
    coord = coordinator(client, group)
    Member(coord, group, topic).beat()
    other = non_coordinator(client, group)
    if other is not None:
        b = heartbeat(other, group, str(uuid.uuid4()), 0, (topic,), retry=False)
        assert (b.error, b.message, b.member_id) == (ErrorCode.not_coordinator, None, None)
        # Request validation comes before placement.
        b = heartbeat(other, group, str(uuid.uuid4()), 0, None, retry=False)
        assert (b.error, b.message) == (ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
        assert heartbeat(other, group, "", 0, (topic,), retry=False).error == ErrorCode.invalid_request
        (d,) = describe(other, group)
        assert (d.error_code, d.error_message) == (ErrorCode.not_coordinator, "This is not the correct coordinator.")
        (r,) = other.request(42, 2, groups_names=(group,)).results
        assert r.error_code == ErrorCode.not_coordinator
        (d,) = describe(other, "")
        assert d.error_code == ErrorCode.invalid_group_id

    # FindCoordinator: share-partition keys "group:topicId:partition" (Kafka's base64 Uuid) from v6.
    keys = [coordinator_key(group, topic_id, p) for p in range(2)]
    bad = [f"{group}:{topic_id}:0", group, "", f"{group}:x:0", f":{keys[0].split(':')[1]}:0"]
    resp = client.bootstrap.request(10, 6, key_type=2, coordinator_keys=tuple(keys + bad))
    got = {c.key: c for c in resp.coordinators}
    for key in keys:
        assert got[key].error_code == ErrorCode.none and got[key].node_id in client.nodes
        if env.reference is not None:
            assert got[key].node_id == env.state.coordinator_for(key)
    for key in bad:
        assert (got[key].error_code, got[key].node_id) == (ErrorCode.invalid_request, -1)
    for v in (4, 5):
        (c,) = client.bootstrap.request(10, v, key_type=2, coordinator_keys=(keys[0],)).coordinators
        assert (c.error_code, c.node_id) == (ErrorCode.invalid_request, -1)
    old = client.bootstrap.request(10, 3, key_type=2, key=keys[0])
    assert (old.error_code, old.node_id) == (ErrorCode.invalid_request, -1)


# -- one group id namespace --------------------------------------------------------------


def test_share_requests_on_a_classic_group(env, client):
    group = unique("cg")
    coord = coordinator(client, group)
    classic_member(coord, group)
    topic, _ = create_topic(client, 1)
    for epoch, topics in ((0, (topic,)), (3, None), (-1, None)):
        b = heartbeat(coord, group, str(uuid.uuid4()), epoch, topics)
        assert (b.error, b.message) == (ErrorCode.group_id_not_found, f"Group {group} is not a share group.")
    (d,) = describe(coord, group)
    assert d.error_code == ErrorCode.group_id_not_found
    # Kafka describes committed state: until the classic group's records are committed it
    # reads "Group g not found." (seen on 4.2.1 and 4.4.0), then "... is not a share group.".
    expected = {f"Group {group} is not a share group."}
    if env.reference is None:
        expected.add(f"Group {group} not found.")
    assert d.error_message in expected


def test_classic_requests_on_a_share_group(env, client):
    group, _topic, m = share_group_with_member(client)
    coord = m.node
    sub = struct.pack(">h", 0) + framing.encode_entity(ConsumerProtocolSubscription(topics=("t",), user_data=None))
    req = framing.request_schema(11, 9)
    proto = payloads.build(payloads.nested(req, "JoinGroupRequestProtocol"), name="range", metadata=sub)
    for member_id, ptype in (("", "consumer"), ("someone", "consumer"), ("", "share")):
        r = coord.send(payloads.build(
            req, group_id=group, session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id=member_id, group_instance_id=None,
            protocol_type=ptype, protocols=(proto,), reason=None,
        ))
        assert (r.error_code, r.member_id, r.generation_id) == (ErrorCode.inconsistent_group_protocol, "", -1)
    (old,) = coord.request(15, 5, groups=(group,), include_authorized_operations=False).groups
    assert (old.error_code, old.group_state, old.members) == (ErrorCode.none, "Dead", ())
    (new,) = coord.request(15, 6, groups=(group,), include_authorized_operations=False).groups
    assert (new.error_code, new.error_message, new.group_state) == (
        ErrorCode.group_id_not_found, f"Group {group} is not a classic group.", "Dead")
    # The share group is untouched.
    assert m.beat().error == ErrorCode.none
    m.leave()


# -- ShareGroupDescribe / ListGroups / DeleteGroups -------------------------------------------


def test_share_group_describe(env, client):
    topic, topic_id = create_topic(client, 2)
    group = unique("sg")
    coord = coordinator(client, group)
    m = Member(coord, group, topic)
    m.beat()
    beat_until([m], lambda: m.partitions(topic_id) == {0, 1})
    (d,) = describe(coord, group)
    assert (d.error_code, d.error_message, d.group_id, d.group_state) == (ErrorCode.none, None, group, "Stable")
    assert d.group_epoch == d.assignment_epoch == m.epoch
    assert d.assignor_name == "simple" and d.authorized_operations == OMITTED_OPS
    (member,) = d.members
    assert (member.member_id, member.member_epoch, member.rack_id) == (m.member_id, m.epoch, None)
    assert (member.client_id, member.client_host) == ("kipcheck-raw", "/127.0.0.1")
    assert member.subscribed_topic_names == (topic,)
    (tp,) = member.assignment.topic_partitions
    assert (tp.topic_id, tp.topic_name, sorted(tp.partitions)) == (topic_id, topic, [0, 1])
    assert describe(coord, group, ops=True)[0].authorized_operations == ALL_GROUP_OPS

    missing = unique("sg")
    (d,) = describe(coordinator(client, missing), missing, ops=True)
    assert (d.error_code, d.error_message, d.group_state, d.members) == (
        ErrorCode.group_id_not_found, f"Group {missing} not found.", "", ())
    assert d.authorized_operations == OMITTED_OPS
    empty_first = describe(coord, group, "")
    assert (empty_first[0].group_id, empty_first[0].error_code) == ("", ErrorCode.invalid_group_id)
    assert empty_first[1].group_id == group
    m.leave()


def test_list_and_delete_share_groups(env, client):
    group, topic, m = share_group_with_member(client)
    coord = m.node
    classic = unique("cg")
    classic_member(coordinator(client, classic), classic)

    def both_listed():
        listed = list_groups(client, states_filter=(), types_filter=())
        assert (listed[group].protocol_type, listed[group].group_state, listed[group].group_type) == (
            "share", "Stable", "share")
        assert listed[classic].group_type == "classic"

    eventually(both_listed)
    for types in (("share",), ("Share",), ("share", "classic")):
        assert group in list_groups(client, states_filter=(), types_filter=types)
    only_share = list_groups(client, states_filter=(), types_filter=("share",))
    assert classic not in only_share
    assert group not in list_groups(client, states_filter=(), types_filter=("classic",))
    assert group not in list_groups(client, states_filter=(), types_filter=("consumer",))
    assert group in list_groups(client, states_filter=("stable",), types_filter=())
    assert group not in list_groups(client, states_filter=("Empty",), types_filter=("share",))
    assert list_groups(client, 4, states_filter=("Stable",))[group].group_state == "Stable"
    assert list_groups(client, 3)[group].protocol_type == "share"

    (r,) = coord.request(42, 2, groups_names=(group,)).results
    assert r.error_code == ErrorCode.non_empty_group
    assert m.leave().epoch == -1
    eventually(lambda: list_groups(client, states_filter=("empty",), types_filter=("share",))[group])
    results = coord.request(42, 2, groups_names=(group, group)).results
    assert [(x.group_id, x.error_code) for x in results] == [(group, ErrorCode.none)]
    (d,) = describe(coord, group)
    assert (d.error_code, d.error_message) == (ErrorCode.group_id_not_found, f"Group {group} not found.")

    def gone():
        assert group not in list_groups(client, states_filter=(), types_filter=())

    eventually(gone)
    (r,) = coord.request(42, 2, groups_names=(group,)).results
    assert r.error_code == ErrorCode.group_id_not_found
    # The id is free again: a classic group may take it.
    classic_member(coord, group)


# -- reference only ------------------------------------------------------------------------


def test_share_groups_off_without_share_version():
    config = BrokerConfig(finalized_features={"transaction.version": 2})
    with ThreadedReferenceCluster(brokers=1, config=config) as cluster, ClusterClient(cluster.bootstrap_servers) as cc:
        r = cc.bootstrap.request(76, 1, group_id="g", member_id=str(uuid.uuid4()), member_epoch=0, rack_id=None,
                                 subscribed_topic_names=("t",))
        assert r.error_code == ErrorCode.unsupported_version
        (d,) = describe(cc.bootstrap, "g")
        assert d.error_code == ErrorCode.unsupported_version


def test_reference_state_tick_expires_share_sessions():
    clock = ManualClock(0)
    state = ReferenceState([NodeEndpoint(0, "localhost", 9092)], clock,
                           BrokerConfig(group_share_session_timeout_ms=1_000))
    state.topics.create("t", num_partitions=2)
    # the namespace hooks, both ways
    assert state.share_groups.heartbeat("g", "m", 0, None, ("t",)).error == ErrorCode.none
    assert state.group_type("g") == "share"
    assert state.share_groups.heartbeat("g", "m", 1).assignment is not None
    clock.advance(999)
    state.tick()
    assert "m" in state.share_groups.group("g").members
    clock.advance(1)
    state.tick()
    assert state.share_groups.group("g").members == {}
    assert state.share_groups.heartbeat("g", "m", 2).error == ErrorCode.unknown_member_id
