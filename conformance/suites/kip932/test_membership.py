"""KIP-932 share-group membership on the wire: ShareGroupHeartbeat joins and leaves,
member ids and epochs, the heartbeat interval, the errors (including the ones Kafka adds),
SimpleAssignor coverage and balance over joins and leaves, group and assignment epochs and
the group states seen through ShareGroupDescribe, removal of a silent member, and the
group-id namespace shared with classic groups.

Assignments are checked by coverage and balance, never by exact placement: Kafka 4.1+'s
simple assignor balances (each partition gets ceil(members / partitions) members) and the
placement depends on Java hash-map order (docs/share-groups-kip-vs-kafka.md, finding 3).
Where Kafka and the KIP text disagree the test records the side the target follows as the
property ``follows:<topic>``.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any, Callable

import pytest

from clients import confluent, share, wire
from clients.errors import COORDINATOR_RETRIABLE
from clients.share import E, SHARE_GROUP_DESCRIBE, eventually, new_member_id, share_fetch
from conformance.suites import require_api
from conformance.suites.kip932.test_sessions import record, record_side, require_share_groups
from targets.reference_target import reference_target_config
from targets.target import NotSupportedByTarget, Target
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.server.broker_server import ThreadedReferenceCluster
from reference_impl.protocol.api_keys import ApiKey

CONSUMER_GROUP_DESCRIBE = ApiKey.CONSUMER_GROUP_DESCRIBE
GROUP_STATES = {"Empty", "Stable", "Dead"}
KAFKA_DEFAULT_HEARTBEAT_MS = 5_000  # group.share.heartbeat.interval.ms
# Removal after the session timeout is only checked where the timeout is short: Kafka's
# minimum share.session.timeout.ms is 45 s.
SHORT_SESSION_MS, SHORT_HEARTBEAT_MS = 3_000, 1_000
LONGEST_SESSION_WAIT_MS = 10_000
KAFKA_SHORT_SESSION_SPEC = (
    "kafka-native:broker.group.share.min.session.timeout.ms=2000:broker.group.share.session.timeout.ms=3000"
    ":broker.group.share.min.heartbeat.interval.ms=500:broker.group.share.heartbeat.interval.ms=1000"
)


# -- helpers ----------------------------------------------------------------------------------


def beat(node: RawClient, group: str, member: str, epoch: int, topics: list[str] | None = None) -> Any:
    """One ShareGroupHeartbeat; the retriable coordinator answers of a fresh Kafka retried."""
    deadline = time.monotonic() + 15
    while True:
        resp = share.heartbeat(node, group, member, epoch, topics)
        if resp.error_code not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            return resp
        time.sleep(0.2)


def coordinator(cc: ClusterClient, group: str) -> RawClient:
    return cc.coordinator_for(group, 0, wait_s=30)


class Member:
    """A share consumer's membership as its heartbeat loop keeps it."""

    def __init__(self, node: RawClient, group: str, topics: list[str]) -> None:
        self.node, self.group, self.topics = node, group, topics
        self.member_id = new_member_id()  # ShareGroupHeartbeat v1: the client makes its id
        self.epoch = 0
        self.assigned: dict[uuid.UUID, frozenset[int]] = {}
        self.last: Any = None

    def beat(self, topics: list[str] | None = None) -> Any:
        resp = beat(self.node, self.group, self.member_id, self.epoch, topics or (self.topics if self.epoch == 0 else None))
        assert resp.error_code == E.none, resp
        assert resp.member_id == self.member_id, resp
        assert resp.member_epoch >= self.epoch, f"member epoch went back from {self.epoch}: {resp}"
        self.epoch = int(resp.member_epoch)
        if resp.assignment is not None:
            self.assigned = {t.topic_id: frozenset(t.partitions) for t in resp.assignment.topic_partitions if t.partitions}
        self.last = resp
        return resp

    def leave(self) -> Any:
        return beat(self.node, self.group, self.member_id, -1)

    def partitions(self, tid: uuid.UUID) -> frozenset[int]:
        return self.assigned.get(tid, frozenset())


def beat_until(members: list[Member], predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        for m in members:
            m.beat()
        if predicate():
            return
        assert time.monotonic() < deadline, [(m.member_id, m.epoch, dict(m.assigned)) for m in members]
        time.sleep(0.1)


def new_topic(target: Target, cc: ClusterClient, unique, partitions: int) -> tuple[str, uuid.UUID]:
    topic = unique.topic()
    confluent.create_topic(target, topic, partitions)
    return topic, wire.topic_ids(cc, topic).topic_id


def sharing(members: list[Member], tid: uuid.UUID, partitions: int) -> dict[int, int]:
    """partition -> number of members it is assigned to."""
    return {p: sum(p in m.partitions(tid) for m in members) for p in range(partitions)}


def balanced(members: list[Member], tid: uuid.UUID, partitions: int) -> bool:
    """Kafka 4.1+'s balance: every partition has ceil(members / partitions) members and the
    members' partition counts differ by at most one (so no member is idle)."""
    want = -(-len(members) // partitions)
    counts = [len(m.partitions(tid)) for m in members]
    return set(sharing(members, tid, partitions).values()) == {want} and max(counts) - min(counts) <= 1 and min(counts) >= 1


def classic_join(node: RawClient, group: str, topic: str, member_id: str = "") -> Any:
    """JoinGroup of a classic consumer-protocol member, at most v5 (librdkafka's mock drops
    the connection on the flexible v6 request); follows MEMBER_ID_REQUIRED once."""
    req = wire.Req(node, wire.JOIN_GROUP, 5, lowest=4)
    protocol = req.part("JoinGroupRequestProtocol", name="range", metadata=wire._consumer_subscription(topic))
    for _ in range(2):
        resp = req.send(group_id=group, session_timeout=wire.ms(10_000), rebalance_timeout=wire.ms(10_000),
                        member_id=member_id, group_instance_id=None, protocol_type="consumer",
                        protocols=(protocol,))
        if resp.error_code != E.member_id_required:
            return resp
        member_id = resp.member_id
    return resp


def describe(node: RawClient, group: str) -> Any:
    (d,) = node.request(SHARE_GROUP_DESCRIBE, 1, group_ids=(group,), include_authorized_operations=False).groups
    return d


# -- joins, leaves, member ids and epochs ---------------------------------------------------------


@pytest.mark.requirement("KIP-932.HB.001", "KIP-932.HB.002", "KIP-932.GROUP.004", "KIP-932.HB.006")
def test_join_assignment_and_leave(target, unique, request):
    require_share_groups(target)
    with wire.cluster_client(target) as cc:
        topic, tid = new_topic(target, cc, unique, 2)
        group = unique.group()
        m = Member(coordinator(cc, group), group, [topic])
        first = m.beat()
        assert first.member_epoch > 0 and first.heartbeat_interval.total_seconds() > 0, first
        # Kafka assigns a partition only once its share-group state is initialised (finding 6).
        record(request, "join_response_assignment", None if first.assignment is None else
               sorted(p for t in first.assignment.topic_partitions for p in t.partitions))
        # Partitions arrive once their share-partition state is initialised (maybe not at once).
        beat_until([m], lambda: m.partitions(tid) == {0, 1})
        steady = m.beat()
        assert steady.assignment is None, f"an unchanged assignment is not sent again: {steady}"
        # (No ShareFetch step: Kafka's share-partition leaders take any member id, finding 23,
        # so a fetch with this id proves nothing about the coordinator.)
        left = m.leave()
        assert (left.error_code, left.member_id, left.member_epoch) == (E.none, m.member_id, -1), left
        gone = beat(m.node, group, m.member_id, m.epoch)
        assert gone.error_code == E.unknown_member_id, gone


@pytest.mark.requirement("KIP-932.HB.002", "KIP-932.HB.007")
def test_heartbeat_request_errors(target, unique, request):
    """An empty member id on a join is INVALID_REQUEST with v1 (the KIP has the coordinator
    assign ids; finding 1), as are an empty group id and a join without subscriptions."""
    require_share_groups(target)
    with wire.cluster_client(target) as cc:
        topic, _ = new_topic(target, cc, unique, 1)
        group = unique.group()
        coord = coordinator(cc, group)
        empty_id = beat(coord, group, "", 0, [topic])
        assert empty_id.error_code == E.invalid_request, empty_id
        record_side(request, "member-id-generated-by", "kafka")
        assert beat(coord, "", new_member_id(), 0, [topic]).error_code == E.invalid_request
        assert beat(coord, group, new_member_id(), 0, None).error_code == E.invalid_request
        assert beat(coord, group, new_member_id(), 0, []).error_code == E.invalid_request
        m = Member(coord, group, [topic])
        m.beat()
        assert beat(coord, group, new_member_id(), 1).error_code == E.unknown_member_id
        others = [n for n in sorted(cc.nodes) if cc.node(n) is not coord]
        if others:
            wrong = share.heartbeat(cc.node(others[0]), group, new_member_id(), 0, [topic])
            assert wrong.error_code == E.not_coordinator, wrong
        m.leave()


@pytest.mark.requirement("KIP-932.HB.007")
def test_wrong_member_epoch_is_fenced(target, unique, request):
    """FENCED_MEMBER_EPOCH is not in the KIP's error list (finding 7); Kafka answers it for
    an epoch the member never had and accepts the previous epoch (a lost response)."""
    require_share_groups(target)
    with wire.cluster_client(target) as cc:
        topic, tid = new_topic(target, cc, unique, 2)
        group = unique.group()
        coord = coordinator(cc, group)
        a = Member(coord, group, [topic])
        beat_until([a], lambda: a.partitions(tid) == {0, 1})
        fenced = beat(coord, group, a.member_id, a.epoch + 5)
        assert fenced.error_code == E.fenced_member_epoch, fenced
        record_side(request, "wrong-member-epoch-error", "kafka")
        assert a.beat().error_code == E.none  # the current epoch still works
        before = a.epoch
        b = Member(coord, group, [topic])
        beat_until([a, b], lambda: a.epoch > before and a.epoch == b.epoch and bool(b.partitions(tid)))
        previous = beat(coord, group, a.member_id, before)
        assert previous.error_code == E.none and previous.member_epoch == a.epoch, previous
        a.leave()
        b.leave()


# -- assignments ----------------------------------------------------------------------------------


def settle(members: list[Member], tid: uuid.UUID, partitions: int, timeout_s: float = 45.0, rounds: int = 3) -> None:
    """Heartbeat until the group is settled: one member epoch for all, every partition
    assigned, no member idle, and nothing changed for `rounds` rounds of heartbeats."""
    deadline = time.monotonic() + timeout_s
    last, same = None, 0
    while True:
        for m in members:
            m.beat()
        snapshot = tuple((m.epoch, m.partitions(tid)) for m in members)
        covered = all(sharing(members, tid, partitions).values()) and all(m.partitions(tid) for m in members[:partitions])
        same = same + 1 if snapshot == last and covered and len({m.epoch for m in members}) == 1 else 0
        if same >= rounds:
            return
        last = snapshot
        assert time.monotonic() < deadline, [(m.member_id, m.epoch, sorted(m.partitions(tid))) for m in members]
        time.sleep(0.1)


@pytest.mark.requirement("KIP-932.ASSIGN.001", "KIP-932.ASSIGN.004")
def test_assignment_covers_every_partition_over_joins_and_leaves(target, unique, request):
    require_share_groups(target)
    with wire.cluster_client(target) as cc:
        topic, tid = new_topic(target, cc, unique, 4)
        group = unique.group()
        coord = coordinator(cc, group)
        everything = frozenset(range(4))
        a = Member(coord, group, [topic])
        beat_until([a], lambda: a.partitions(tid) == everything)
        alone = a.epoch
        b = Member(coord, group, [topic])
        settle([a, b], tid, 4)
        assert a.epoch > alone and a.partitions(tid) | b.partitions(tid) == everything
        c, d = Member(coord, group, [topic]), Member(coord, group, [topic])
        four = [a, b, c, d]
        settle(four, tid, 4)
        record(request, "four_members_sharing", sharing(four, tid, 4))
        for m in (b, c, d):
            assert m.leave().error_code == E.none
        beat_until([a], lambda: a.partitions(tid) == everything)
        a.leave()


@pytest.mark.requirement("KIP-932.ASSIGN.002")
def test_more_members_than_partitions_leave_no_member_idle(target, unique, request):
    """The KIP's example: 8 members on 4 partitions; partitions are shared so that every
    member has at least one."""
    require_share_groups(target)
    with wire.cluster_client(target) as cc:
        topic, tid = new_topic(target, cc, unique, 4)
        group = unique.group()
        coord = coordinator(cc, group)
        eight = [Member(coord, group, [topic]) for _ in range(8)]
        settle(eight, tid, 4)
        assert all(m.partitions(tid) for m in eight), [sorted(m.partitions(tid)) for m in eight]
        record(request, "sharing", sharing(eight, tid, 4))
        for m in eight:
            m.leave()


@pytest.mark.requirement("KIP-932.ASSIGN.003")
def test_members_are_spread_evenly_over_partitions(target, unique, request):
    """Members per partition differ by at most one, and so do partitions per member: Kafka
    4.2+ balances by construction (each partition gets ceil(members / partitions)
    members); the KIP's hashing only aims at it (finding 3). 3 then 8 members on 4
    partitions: 1 member per partition, then 2 (the KIP's example)."""
    require_share_groups(target)
    with wire.cluster_client(target) as cc:
        topic, tid = new_topic(target, cc, unique, 4)
        group = unique.group()
        coord = coordinator(cc, group)
        spreads = {}
        members: list[Member] = []
        for size in (3, 8):
            members += [Member(coord, group, [topic]) for _ in range(size - len(members))]
            settle(members, tid, 4)
            spreads[size] = sharing(members, tid, 4)
        record(request, "members_per_partition", spreads)
        for size, spread in spreads.items():
            assert set(spread.values()) == {-(-size // 4)}, f"{size} members on 4 partitions: {spread}"
        assert balanced(members, tid, 4), [sorted(m.partitions(tid)) for m in members]
        for m in members:
            m.leave()


@pytest.mark.requirement("KIP-932.ASSIGN.007", "KIP-932.ASSIGN.002")
def test_joining_members_take_no_partition_from_existing_members(target, unique, request):
    """KIP-932.ASSIGN.007: the SimpleAssignor uses the current assignment. 4 members settled
    on 4 partitions, a fifth joins: it gets a partition (ASSIGN.002, no member idle) and
    every original member keeps at least one of its partitions (the KIP's hashing keeps a
    member's hash partition; an assignor that recomputes from scratch moves them). Kafka
    also takes nothing away on this join; the KIP's hashing may drop a round-robin extra
    (DIV-93222): whether all were kept is recorded. Three more joins one by one: whether an
    original member lost a partition it started with is recorded too."""
    require_share_groups(target)
    with wire.cluster_client(target) as cc:
        topic, tid = new_topic(target, cc, unique, 4)
        group = unique.group()
        coord = coordinator(cc, group)
        members = [Member(coord, group, [topic]) for _ in range(4)]
        settle(members, tid, 4)
        start = {m.member_id: m.partitions(tid) for m in members}
        members.append(Member(coord, group, [topic]))
        beat_until(members, lambda: all(m.partitions(tid) for m in members), 45)
        settle(members, tid, 4)
        after = {m.member_id: m.partitions(tid) for m in members[:4]}
        moved = {k: (sorted(start[k]), sorted(after[k])) for k in start if not start[k] & after[k]}
        assert not moved, f"original members kept none of their partitions when one member joined: {moved}"
        record_side(request, "join_keeps_every_partition",
                    "kafka" if all(start[k] <= after[k] for k in start) else "kip")
        for _ in range(3):
            members.append(Member(coord, group, [topic]))
            beat_until(members, lambda: all(m.partitions(tid) for m in members), 45)
            settle(members, tid, 4)
        lost = {m.member_id: (sorted(start[m.member_id]), sorted(m.partitions(tid)))
                for m in members[:4] if not start[m.member_id] <= m.partitions(tid)}
        record(request, "original_partitions_lost_over_three_joins", lost)
        record_side(request, "assignor_revokes_on_join", "kafka" if lost else "kip")
        for m in members:
            m.leave()


# -- epochs and states (ShareGroupDescribe) -------------------------------------------------------


def require_describe(target: Target) -> None:
    require_api(target.capabilities(), SHARE_GROUP_DESCRIBE, 1, "ShareGroupDescribe")


@pytest.mark.requirement("KIP-932.GROUP.005", "KIP-932.EPOCH.001", "KIP-932.EPOCH.002", "KIP-932.EPOCH.005",
                         "KIP-932.HB.001", "KIP-932.HB.005")
def test_group_epochs_and_states(target, unique):
    require_share_groups(target)
    require_describe(target)
    with wire.cluster_client(target) as cc:
        topic, tid = new_topic(target, cc, unique, 2)
        topic2, tid2 = new_topic(target, cc, unique, 1)
        group = unique.group()
        coord = coordinator(cc, group)
        probes: list[Any] = []

        def settled(members: list[Member], min_epoch: int = 0) -> Any:
            def check() -> Any:
                for m in members:
                    m.beat()
                d = describe(coord, group)
                probes.append(d)
                assert d.error_code == E.none, d
                assert d.group_epoch >= min_epoch and d.assignment_epoch == d.group_epoch, d
                assert {x.member_id for x in d.members} == {m.member_id for m in members}, d
                assert all(x.member_epoch == d.group_epoch for x in d.members), d
                return d
            return eventually(check, 30)

        a = Member(coord, group, [topic])
        a.beat()
        beat_until([a], lambda: a.partitions(tid) == {0, 1})
        one = settled([a])
        assert one.group_state == "Stable"
        b = Member(coord, group, [topic])
        b.beat()
        two = settled([a, b], one.group_epoch + 1)
        assert two.group_state == "Stable"
        assert b.leave().error_code == E.none
        back = settled([a], two.group_epoch + 1)
        # A changed subscription bumps the group epoch; the same list again does not.
        a.beat([topic, topic2])
        beat_until([a], lambda: a.partitions(tid2) == {0})
        changed = settled([a], back.group_epoch + 1)
        a.beat([topic, topic2])
        a.beat()
        same = settled([a])
        assert same.group_epoch == changed.group_epoch, (changed, same)
        described = {x.member_id: x for x in same.members}[a.member_id]
        assert sorted(described.subscribed_topic_names) == sorted([topic, topic2])
        assert a.leave().member_epoch == -1

        def empty() -> Any:
            d = describe(coord, group)
            probes.append(d)
            assert (d.error_code, d.group_state, tuple(d.members)) == (E.none, "Empty", ()), d
            return d

        eventually(empty)
        assert {d.group_state for d in probes} <= GROUP_STATES, {d.group_state for d in probes}
        assert all(d.assignment_epoch <= d.group_epoch for d in probes)


@pytest.mark.requirement("KIP-932.HB.004")
def test_heartbeat_interval_follows_the_group_config(target, unique):
    require_share_groups(target)
    with wire.cluster_client(target) as cc:
        topic, _ = new_topic(target, cc, unique, 1)
        group = unique.group()
        share.set_group_configs(cc, group, {"share.heartbeat.interval.ms": "8000"})
        m = Member(coordinator(cc, group), group, [topic])
        assert m.beat().heartbeat_interval.total_seconds() * 1000 == 8000
        other = unique.group()
        n = Member(coordinator(cc, other), other, [topic])
        default = int(target.spec.option("broker.group.share.heartbeat.interval.ms", str(KAFKA_DEFAULT_HEARTBEAT_MS)))
        assert n.beat().heartbeat_interval.total_seconds() * 1000 == default
        m.leave()
        n.leave()


# -- removal of silent members ----------------------------------------------------------------------


def short_session_target(target: Target):
    """A target whose share session timeout is short enough to wait for, or
    NotSupportedByTarget. The reference: an in-process cluster of the same size with a 3 s
    timeout (the `reference` target uses Kafka's 45 s). Kafka: the target itself, when
    started with a short group.share.session.timeout.ms."""
    if target.kind == "reference":
        config = dataclasses.replace(reference_target_config(), group_share_session_timeout_ms=SHORT_SESSION_MS,
                                     group_share_heartbeat_interval_ms=SHORT_HEARTBEAT_MS)
        return ThreadedReferenceCluster(brokers=len(target.node_ids), config=config), SHORT_SESSION_MS
    configured = target.spec.option("broker.group.share.session.timeout.ms")
    if configured is None or int(configured) > LONGEST_SESSION_WAIT_MS:
        raise NotSupportedByTarget(
            "removal after the share session timeout needs a timeout below Kafka's 45 s minimum; run with "
            f"--target {KAFKA_SHORT_SESSION_SPEC}")
    return None, int(configured)


@pytest.mark.requirement("KIP-932.HB.003", "KIP-932.EPOCH.001", "KIP-932.GROUP.009")
def test_silent_member_is_removed_after_the_session_timeout(target, unique, request):
    require_share_groups(target)
    cluster, session_ms = short_session_target(target)
    if cluster is not None:
        cluster.start()
    try:
        # The private reference cluster is plaintext; a Kafka target brings its own security.
        with (ClusterClient(cluster.bootstrap_servers) if cluster is not None else target.cluster_client()) as cc:
            topic = unique.topic()
            assert wire.create_topic(cc, topic, 2) == E.none
            deadline = time.monotonic() + 15
            while not wire.topic_ids(cc, topic).partitions and time.monotonic() < deadline:
                time.sleep(0.1)
            tid = wire.topic_ids(cc, topic).topic_id
            group = unique.group()
            coord = coordinator(cc, group)
            a, b = Member(coord, group, [topic]), Member(coord, group, [topic])
            beat_until([a, b], lambda: bool(a.partitions(tid)) and bool(b.partitions(tid)))
            with_both = a.epoch
            leader = cc.leader_for(topic, 0)
            assert share_fetch(leader, group, b.member_id, 0, [(tid, 0)]).error_code == E.none
            silent_since = time.monotonic()
            beat_until([a], lambda: a.partitions(tid) == {0, 1}, timeout_s=session_ms / 1000 + 20)
            assert time.monotonic() - silent_since >= session_ms / 1000 * 0.8
            assert a.epoch > with_both
            # No fencing at the share-partition leader: the removed member may still fetch.
            late = share_fetch(leader, group, b.member_id, 1, [(tid, 0)])
            record(request, "removed_member_fetch_error", int(late.error_code))
            gone = beat(coord, group, b.member_id, b.epoch)
            assert gone.error_code == E.unknown_member_id, gone
            again = beat(coord, group, b.member_id, 0, [topic])
            assert again.error_code == E.none and again.member_epoch > 0, again
            a.leave()
            beat(coord, group, b.member_id, -1)
    finally:
        if cluster is not None:
            cluster.stop()


# -- one group-id namespace -----------------------------------------------------------------------


@pytest.mark.requirement("KIP-932.GROUP.002")
def test_share_and_classic_groups_cannot_take_each_others_ids(target, unique, request):
    """A share heartbeat on a classic group: Kafka answers GROUP_ID_NOT_FOUND ("not a share
    group"), the KIP's text suggests INCONSISTENT_GROUP_PROTOCOL (finding 2); JoinGroup on a
    share group is INCONSISTENT_GROUP_PROTOCOL on both."""
    require_share_groups(target)
    with wire.cluster_client(target) as cc:
        topic, _ = new_topic(target, cc, unique, 1)
        classic = unique.group()
        coord = coordinator(cc, classic)
        joined = classic_join(coord, classic, topic)
        assert joined.error_code == E.none, joined
        refused = beat(coord, classic, new_member_id(), 0, [topic])
        assert refused.error_code in (E.group_id_not_found, E.inconsistent_group_protocol), refused
        record_side(request, "share-heartbeat-on-classic-group",
                    "kafka" if refused.error_code == E.group_id_not_found else "kip")
        assert classic_join(coord, classic, topic, joined.member_id).error_code == E.none
        share_group = unique.group()
        m = Member(coordinator(cc, share_group), share_group, [topic])
        m.beat()
        other_way = classic_join(m.node, share_group, topic)
        assert other_way.error_code == E.inconsistent_group_protocol, other_way
        assert m.beat().error_code == E.none
        m.leave()


@pytest.mark.requirement("KIP-932.GROUP.003")
def test_describe_of_the_other_group_type_finds_no_group(target, unique):
    require_share_groups(target)
    require_describe(target)
    with wire.cluster_client(target) as cc:
        topic, _ = new_topic(target, cc, unique, 1)
        classic = unique.group()
        coord = coordinator(cc, classic)
        assert classic_join(coord, classic, topic).error_code == E.none
        eventually(lambda: _assert_code(describe(coord, classic).error_code, E.group_id_not_found))
        share_group = unique.group()
        m = Member(coordinator(cc, share_group), share_group, [topic])
        m.beat()
        if target.capabilities().supports_api(CONSUMER_GROUP_DESCRIBE):
            (d,) = m.node.request(CONSUMER_GROUP_DESCRIBE, 0, group_ids=(share_group,),
                                  include_authorized_operations=False).groups
            assert d.error_code == E.group_id_not_found, d
        m.leave()


def _assert_code(got: int, want: int) -> None:
    assert got == want, f"error {got}, expected {want}"
