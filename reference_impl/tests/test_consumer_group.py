"""The KIP-848 consumer group model (reference_impl/model/consumer_group.py) and its
server-side assignors, without the wire: epochs, reconciliation, timeouts, static
membership, offset-commit epoch checks, and a hypothesis run of random heartbeats that
checks no partition ever has two owners."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.broker_config import BrokerConfig
from reference_impl.model.clock import ManualClock
from reference_impl.model.consumer_assignor import AssignmentMember, range_, uniform
from reference_impl.model.consumer_group import (
    ConsumerGroupConfig,
    ConsumerGroups,
    ConsumerGroupState,
    HeartbeatRequest,
    MemberState,
)
from reference_impl.model.group_coordinator import GroupCoordinator, OffsetCommitEntry
from reference_impl.model.seeded_bugs import SeededBugs

G = "g"


@dataclass
class Topic:
    topic_id: uuid.UUID
    partitions: list
    is_internal: bool = False


@dataclass
class Topics:
    by_name: dict = field(default_factory=dict)

    def add(self, name: str, n: int) -> uuid.UUID:
        self.by_name[name] = Topic(uuid.uuid4(), list(range(n)))
        return self.by_name[name].topic_id

    def get(self, name):
        return self.by_name.get(name)

    def names(self):
        return list(self.by_name)


def make(seeded: SeededBugs = bugs.NO_BUGS, **config):
    """A coordinator that assigns at once (assignment interval 0) unless told otherwise."""
    clock = ManualClock()
    config.setdefault("assignment_interval_ms", 0)
    return ConsumerGroups(clock, ConsumerGroupConfig(**config), seeded), clock, Topics()


def hb(coord, topics, member, epoch, *, names=None, owned=None, instance=None, regex=None, rebalance=-1, group=G):
    return coord.heartbeat(HeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance, rebalance_timeout_ms=rebalance,
        subscribed_topic_names=None if names is None else tuple(names), subscribed_topic_regex=regex,
        owned=None if owned is None else tuple((t, tuple(sorted(ps))) for t, ps in owned.items()),
    ), topics)


def join(coord, topics, member, names=("t",), **kw):
    return hb(coord, topics, member, 0, names=names, owned={}, rebalance=kw.pop("rebalance", 30_000), **kw)


def test_first_member_gets_everything_at_epoch_2():
    """A new group starts at epoch 1 with an empty assignment (KAFKA-20268, Kafka 4.3+)."""
    coord, _clock, topics = make()
    tid = topics.add("t", 3)
    r = join(coord, topics, "m1")
    assert (r.error, r.member_epoch, r.heartbeat_interval_ms, r.assignment) == (
        ErrorCode.none, 2, 5000, {tid: frozenset({0, 1, 2})})
    assert coord.group(G).state is ConsumerGroupState.STABLE


def test_revocation_before_reassignment():
    coord, _clock, topics = make()
    tid = topics.add("t", 2)
    join(coord, topics, "m1")
    r2 = join(coord, topics, "m2")
    assert r2.member_epoch == 3 and r2.assignment == {}
    m2 = coord.group(G).members["m2"]
    assert m2.state is MemberState.UNRELEASED_PARTITIONS
    r1 = hb(coord, topics, "m1", 2, owned={tid: {0, 1}})
    assert r1.member_epoch == 2 and len(r1.assignment[tid]) == 1  # revoke one, epoch unchanged
    m1 = coord.group(G).members["m1"]
    assert m1.state is MemberState.UNREVOKED_PARTITIONS and m1.pending_revocation
    revoked = next(iter(m1.pending_revocation[tid]))
    # m2 must not get the partition while m1 still owns it.
    assert hb(coord, topics, "m2", 3, owned={}).assignment is None
    r1 = hb(coord, topics, "m1", 2, owned={tid: r1.assignment[tid]})
    assert r1.member_epoch == 3
    r2 = hb(coord, topics, "m2", 3, owned={})
    assert r2.assignment == {tid: frozenset({revoked})}
    assert coord.group(G).state is ConsumerGroupState.STABLE


def test_seeded_bug_assigns_before_revocation():
    coord, _clock, topics = make(SeededBugs(frozenset({bugs.CONSUMER_GROUP_NO_REVOCATION_BEFORE_REASSIGN})))
    tid = topics.add("t", 2)
    join(coord, topics, "m1")
    r2 = join(coord, topics, "m2")
    assert r2.assignment and len(r2.assignment[tid]) == 1  # handed out while m1 still owns it


def test_rebalance_timeout_fences_a_member_that_does_not_revoke():
    coord, clock, topics = make()
    tid = topics.add("t", 2)
    join(coord, topics, "m1", rebalance=1_000)
    join(coord, topics, "m2")
    hb(coord, topics, "m1", 2, owned={tid: {0, 1}})
    clock.advance(999)
    coord.tick(clock.now_ms())
    assert "m1" in coord.group(G).members
    clock.advance(1)
    coord.tick(clock.now_ms())
    group = coord.group(G)
    assert "m1" not in group.members and group.group_epoch == 4
    assert hb(coord, topics, "m1", 2).error == ErrorCode.unknown_member_id
    assert hb(coord, topics, "m2", 3, owned={}).assignment == {tid: frozenset({0, 1})}


def test_session_timeout_removes_member_and_bumps_epoch():
    coord, clock, topics = make(session_timeout_ms=45_000)
    topics.add("t", 1)
    join(coord, topics, "m1")
    clock.advance(44_999)
    assert hb(coord, topics, "m1", 2).error == ErrorCode.none  # renews the session
    clock.advance(45_000)
    coord.tick(clock.now_ms())
    group = coord.group(G)
    assert not group.members and group.group_epoch == 3 and group.state is ConsumerGroupState.EMPTY


def test_epoch_fencing_and_lost_response():
    coord, _clock, topics = make()
    tid = topics.add("t", 2)
    join(coord, topics, "m1")
    assert hb(coord, topics, "m1", 3).error == ErrorCode.fenced_member_epoch
    join(coord, topics, "m2")
    r1 = hb(coord, topics, "m1", 2, owned={tid: {0, 1}})
    hb(coord, topics, "m1", 2, owned={tid: r1.assignment[tid]})  # now epoch 3, previous 2
    # The response with epoch 3 was lost: epoch 2 with owned partitions inside the assignment is fine.
    assert hb(coord, topics, "m1", 2, owned={tid: r1.assignment[tid]}).error == ErrorCode.none
    assert hb(coord, topics, "m1", 2, owned={tid: {0, 1}}).error == ErrorCode.fenced_member_epoch
    assert hb(coord, topics, "m1", 0, names=("t",), owned={tid: {0}}).error == ErrorCode.invalid_request


@pytest.mark.parametrize("req, message", [
    (dict(member="m", epoch=0, names=None, owned={}), "SubscribedTopicNames or SubscribedTopicRegex must be set"),
    (dict(member="m", epoch=0, names=("t",), owned=None), "TopicPartitions must be empty"),
    (dict(member="m", epoch=-3), "MemberEpoch is invalid."),
    (dict(member="", epoch=1), "MemberId can't be empty."),
])
def test_invalid_requests(req, message):
    coord, _clock, topics = make()
    r = hb(coord, topics, req["member"], req["epoch"], names=req.get("names"), owned=req.get("owned"),
           rebalance=30_000)
    assert r.error == ErrorCode.invalid_request and r.error_message.startswith(message)


def test_static_member_leaves_temporarily_and_is_replaced():
    coord, clock, topics = make()
    tid = topics.add("t", 2)
    join(coord, topics, "a", instance="i1")
    assert join(coord, topics, "b", instance="i1").error == ErrorCode.unreleased_instance_id
    left = hb(coord, topics, "a", -2, instance="i1")
    assert (left.error, left.member_epoch) == (ErrorCode.none, -2)
    epoch = coord.group(G).group_epoch
    r = join(coord, topics, "b", instance="i1")
    assert (r.error, r.assignment) == (ErrorCode.none, {tid: frozenset({0, 1})})
    group = coord.group(G)
    assert set(group.members) == {"b"} and group.group_epoch == epoch  # no rebalance
    assert hb(coord, topics, "a", 1, instance="i1").error == ErrorCode.fenced_instance_id


def test_leave_and_unknown_group():
    coord, _clock, topics = make()
    topics.add("t", 1)
    assert hb(coord, topics, "m1", -1).error == ErrorCode.group_id_not_found
    join(coord, topics, "m1")
    assert hb(coord, topics, "ghost", -1).error == ErrorCode.unknown_member_id
    r = hb(coord, topics, "m1", -1)
    assert (r.error, r.member_epoch) == (ErrorCode.none, -1)
    assert coord.group(G).state is ConsumerGroupState.EMPTY


def test_group_max_size():
    coord, _clock, topics = make(max_size=1)
    topics.add("t", 1)
    join(coord, topics, "m1")
    assert join(coord, topics, "m2").error == ErrorCode.group_max_size_reached
    assert hb(coord, topics, "m1", 2).error == ErrorCode.none


def test_new_partitions_bump_the_epoch_and_regex_subscription():
    coord, _clock, topics = make()
    t1 = topics.add("orders-1", 1)
    r = join(coord, topics, "m1", names=(), regex="orders-.*")
    assert r.assignment == {t1: frozenset({0})}
    t2 = topics.add("orders-2", 2)
    r = hb(coord, topics, "m1", 2, owned={t1: {0}})
    assert r.member_epoch == 3 and r.assignment == {t1: frozenset({0}), t2: frozenset({0, 1})}
    assert join(coord, topics, "m2", names=(), regex="(").error == ErrorCode.invalid_regular_expression


def test_offset_commit_epoch_checks():
    coord, _clock, topics = make()
    tid = topics.add("t", 2)
    join(coord, topics, "m1")
    group = coord.group(G)
    check = coord.validate_offset_commit
    assert check(group, "m1", 2, is_transactional=False, api_version=9) is None
    assert check(group, "m1", 3, is_transactional=False, api_version=9) == ErrorCode.stale_member_epoch
    assert check(group, "m1", 3, is_transactional=True, api_version=5) == ErrorCode.illegal_generation
    assert check(group, "x", 2, is_transactional=True, api_version=5) == ErrorCode.unknown_member_id
    assert check(group, "m1", 2, is_transactional=False, api_version=8) == ErrorCode.unsupported_version
    assert check(group, "", -1, is_transactional=False, api_version=9) == ErrorCode.unknown_member_id
    assert check(group, "", -1, is_transactional=True, api_version=3) is None  # pre-KIP-447 producer
    # KIP-1251: m2 joins, m1 keeps one partition (since epoch 2) and reaches epoch 3.
    join(coord, topics, "m2")
    r1 = hb(coord, topics, "m1", 2, owned={tid: {0, 1}})
    (kept,) = r1.assignment[tid]
    hb(coord, topics, "m1", 2, owned={tid: {kept}})
    assert group.members["m1"].member_epoch == 3
    stale = coord.stale_partitions
    assert stale(group, "m1", 2, [("t", kept)], is_transactional=False) == {}
    assert stale(group, "m1", 2, [("t", 1 - kept)], is_transactional=False) == {("t", 1 - kept): ErrorCode.stale_member_epoch}
    assert stale(group, "m1", 2, [("t", 1 - kept)], is_transactional=True) == {("t", 1 - kept): ErrorCode.illegal_generation}
    assert stale(group, "m1", 1, [("t", kept)], is_transactional=True) == {("t", kept): ErrorCode.illegal_generation}
    assert stale(group, "m1", 3, [("t", 1 - kept)], is_transactional=True) == {}


@pytest.mark.parametrize("bug, transactional", [
    (bugs.OFFSET_COMMIT_STALE_MEMBER_EPOCH_ACCEPTED, False),
    (bugs.TXN_OFFSET_COMMIT_MEMBER_EPOCH_UNCHECKED, True),
])
def test_seeded_offset_epoch_bugs(bug, transactional):
    coord, _clock, topics = make(SeededBugs(frozenset({bug})))
    topics.add("t", 1)
    join(coord, topics, "m1")
    group = coord.group(G)
    assert coord.validate_offset_commit(group, "m1", 7, is_transactional=transactional, api_version=9) is None
    assert coord.stale_partitions(group, "m1", 1, [("t", 0)], is_transactional=transactional) == {}


def test_assignment_interval_defers_the_next_target():
    """KIP-1263 (Kafka 4.3+): a second member joins at the current assignment epoch with no
    partitions; the new target comes once the interval since the last one has passed."""
    coord, clock, topics = make(assignment_interval_ms=1_000)
    tid = topics.add("t", 2)
    join(coord, topics, "m1")
    r2 = join(coord, topics, "m2")
    group = coord.group(G)
    assert (r2.member_epoch, r2.assignment, group.state) == (2, {}, ConsumerGroupState.ASSIGNING)
    assert hb(coord, topics, "m1", 2, owned={tid: {0, 1}}).assignment is None  # nothing to revoke yet
    clock.advance(1_000)
    r1 = hb(coord, topics, "m1", 2, owned={tid: {0, 1}})
    assert r1.member_epoch == 2 and len(r1.assignment[tid]) == 1 and group.assignment_epoch == 3


def _members(n: int, subscribed, current=None):
    return {f"m{i}": AssignmentMember(frozenset(subscribed), (current or {}).get(f"m{i}", {})) for i in range(n)}


def test_range_assignor_contiguous():
    t = uuid.uuid4()
    out = range_(_members(3, {t}), {t: 7})
    assert [sorted(out[f"m{i}"][t]) for i in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.lists(st.integers(1, 8), min_size=1, max_size=3))
def test_uniform_assignor_balanced_and_sticky(n, counts):
    topics = {uuid.UUID(int=i + 1): c for i, c in enumerate(counts)}
    out = uniform(_members(n, set(topics)), topics)
    sizes = [sum(len(ps) for ps in out[m].values()) for m in out]
    assert sum(sizes) == sum(counts) and max(sizes) - min(sizes) <= 1
    again = uniform(_members(n, set(topics), out), topics)
    assert again == out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["join", "hb", "ack", "leave", "tick"])),
                min_size=1, max_size=40))
def test_no_partition_has_two_owners(steps):
    """Random joins/heartbeats/acks/leaves/timeouts: a partition is never assigned to one
    member while another still holds it (KIP-848's revocation-before-reassignment)."""
    coord, clock, topics = make()
    tid = topics.add("t", 5)
    epochs: dict[str, int] = {}
    owned: dict[str, frozenset] = {}
    for who, action in steps:
        member = f"m{who}"
        if action == "join" and member not in epochs:
            r = join(coord, topics, member, rebalance=5_000)
        elif action in ("hb", "ack") and member in epochs:
            r = hb(coord, topics, member, epochs[member], owned={tid: owned.get(member, frozenset())})
        elif action == "leave" and member in epochs:
            r = hb(coord, topics, member, -1)
            epochs.pop(member)
            owned.pop(member, None)
            continue
        else:
            clock.advance(3_000)
            coord.tick(clock.now_ms())
            group = coord.group(G)
            for gone in [m for m in epochs if group is None or m not in group.members]:
                epochs.pop(gone)
                owned.pop(gone, None)
            continue
        if r.error != ErrorCode.none:
            epochs.pop(member, None)
            owned.pop(member, None)
            continue
        epochs[member] = r.member_epoch
        if r.assignment is not None:
            owned[member] = r.assignment.get(tid, frozenset())
        holders = [p for ps in owned.values() for p in ps]
        assert len(holders) == len(set(holders)), owned


def _coordinator():
    """A group coordinator whose consumer members outlive the offsets retention."""
    clock = ManualClock()
    config = BrokerConfig(consumer_group=ConsumerGroupConfig(assignment_interval_ms=0, session_timeout_ms=2**40))
    return GroupCoordinator([0], clock, config), clock, Topics()


def test_offsets_expire_only_when_no_member_subscribes():
    """A consumer group's offsets age from their commit; offsets of subscribed topics stay;
    an empty group left without offsets is deleted by the expiration job."""
    groups, clock, topics = _coordinator()
    topics.add("t", 1)
    topics.add("old", 1)
    r = groups.consumer.heartbeat(HeartbeatRequest(G, "m1", 0, rebalance_timeout_ms=1_000,
                                                   subscribed_topic_names=("t",), owned=()), topics)
    entries = [OffsetCommitEntry("t", 0, 5), OffsetCommitEntry("old", 0, 9)]
    assert groups.commit_offsets(G, r.member_epoch, "m1", entries) == [ErrorCode.none] * 2
    retention = groups.config.offsets_retention_minutes * 60_000
    clock.advance(retention)
    groups.cleanup_group_metadata(clock.now_ms())
    fetched = groups.fetch_offsets(G, [("t", [0]), ("old", [0])])
    assert [p.offset for _t, ps in fetched.topics for p in ps] == [5, -1]
    assert groups.consumer.heartbeat(HeartbeatRequest(G, "m1", -1), topics).error == ErrorCode.none
    groups.cleanup_group_metadata(clock.now_ms())
    assert groups.group_type(G) is None and not groups.offsets.has_offsets(G)


def test_group_types_share_one_namespace():
    """An empty classic group gives its id to a consumer member (offsets kept); a classic
    JoinGroup into a non-empty consumer group is refused; DeleteGroups deletes consumer groups."""
    groups, _clock, topics = _coordinator()
    topics.add("t", 1)
    assert groups.commit_offsets("g", -1, "", [OffsetCommitEntry("t", 0, 3)]) == [ErrorCode.none]
    assert groups.group_type("g") == "classic"
    r = groups.consumer.heartbeat(HeartbeatRequest("g", "m1", 0, rebalance_timeout_ms=1_000,
                                                   subscribed_topic_names=("t",), owned=()), topics)
    assert r.error == ErrorCode.none and groups.group_type("g") == "consumer"
    assert groups.fetch_offsets("g", [("t", [0])]).topics[0][1][0].offset == 3
    joined = groups.join_group("g", "", "consumer", [("range", b"")], 10_000, 10_000)
    assert joined.result.error == ErrorCode.inconsistent_group_protocol
    assert groups.delete_groups(["g"]) == [("g", ErrorCode.non_empty_group)]
    groups.consumer.heartbeat(HeartbeatRequest("g", "m1", -1), topics)
    assert groups.delete_groups(["g"]) == [("g", ErrorCode.none)]
    assert groups.group_type("g") is None and not groups.offsets.has_offsets("g")


def test_group_configs_override_session_timeout_and_heartbeat_interval():
    """consumer.session.timeout.ms / consumer.heartbeat.interval.ms set on the group win."""
    coord, clock, topics = make()
    topics.add("t", 1)
    coord.group_config = lambda gid: {"consumer.session.timeout.ms": 10_000,
                                      "consumer.heartbeat.interval.ms": 1_000} if gid == G else {}
    r = join(coord, topics, "m1")
    assert r.heartbeat_interval_ms == 1_000
    clock.advance(10_000)
    coord.tick(clock.now_ms())
    assert not coord.group(G).members
