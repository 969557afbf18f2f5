"""Unit tests of the share group coordinator model (KIP-932 membership; no I/O, ManualClock).

Catalog ids: KIP-932.GROUP.001-005/007/008, HB.001-007, EPOCH.001-003/005-007,
ASSIGN.001/002/004-006, GREC.001.
"""

from __future__ import annotations

import itertools
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.model.broker_state import BrokerConfig
from reference_impl.model.clock import ManualClock
from reference_impl.model.share_assignor import ALGORITHM_KIP, SimpleAssignor
from reference_impl.model.share_coordinator import ShareCoordinator
from reference_impl.model.share_group import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    ShareGroupCoordinator,
)
from reference_impl.model.share_group_records import (
    VALID_PREVIOUS_STATES,
    CoordinatorRecord,
    IllegalShareGroupTransition,
    ShareGroup,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupState,
    ShareGroupTargetAssignmentMemberKey,
    replay_all,
)
from reference_impl.model.share_state_records import SharePartitionKey

G = "sg"


class Topics:
    """A minimal topics view: name -> (topic id, partitions)."""

    def __init__(self) -> None:
        self.topics: dict[str, SimpleNamespace] = {}
        self.created = itertools.count()

    def create(self, name: str, partitions: int) -> uuid.UUID:
        tid = uuid.uuid5(uuid.NAMESPACE_URL, f"{name}/{next(self.created)}")
        self.topics[name] = SimpleNamespace(topic_id=tid, partitions=[None] * partitions)
        return tid

    def add_partitions(self, name: str, total: int) -> None:
        self.topics[name].partitions = [None] * total

    def delete(self, name: str) -> None:
        del self.topics[name]

    def get(self, name):
        return self.topics.get(name)

    def name_for_id(self, tid):
        return next((n for n, t in self.topics.items() if t.topic_id == tid), None)


def make(config=None, **kw):
    clock = ManualClock()
    topics = Topics()
    topics.create("t", 4)
    coord = ShareGroupCoordinator([1], clock, config or BrokerConfig(), topics, **kw)
    return coord, clock, topics


def parts(result_or_assignment, topics: Topics, name="t") -> set[int]:
    assignment = getattr(result_or_assignment, "assignment", result_or_assignment)
    tid = topics.get(name).topic_id
    return {p for t, ps in (assignment or ()) for p in ps if t == tid}


def join(coord, member="m1", topics=("t",), group=G, **kw):
    return coord.heartbeat(group, member, 0, None, list(topics), **kw)


def settle(coord, members: dict[str, int], group=G) -> dict[str, object]:
    """Heartbeat every member (in order) until member epochs stop moving."""
    last = {}
    for _ in range(10):
        changed = False
        for m in list(members):
            r = coord.heartbeat(group, m, members[m])
            assert r.error == ErrorCode.none, (m, r)
            changed |= r.member_epoch != members[m]
            members[m] = r.member_epoch
            last[m] = r
        if not changed:
            return last
    raise AssertionError("did not settle")


def desc(coord, group=G):
    return coord.describe([group])[0]


# -- join, epochs, assignment ------------------------------------------------------------


def test_join_creates_group_epoch_1_and_empty_first_assignment():
    # HB.001, HB.002 (client-generated id echoed), GROUP.004, EPOCH.001
    coord, _clock, topics = make()
    r = join(coord, "client-uuid-1")
    assert r.error == ErrorCode.none
    assert r.member_id == "client-uuid-1"
    assert r.member_epoch == 1
    assert r.heartbeat_interval_ms == DEFAULT_HEARTBEAT_INTERVAL_MS
    assert r.assignment == ()  # share-partitions are still being initialised
    d = desc(coord)
    assert (d.state, d.group_epoch, d.assignment_epoch, d.assignor_name) == ("Stable", 1, 1, "simple")
    # next heartbeat: initialised partitions are assigned, with an epoch bump
    r2 = coord.heartbeat(G, "client-uuid-1", 1)
    assert r2.member_epoch == 2
    assert parts(r2, topics) == {0, 1, 2, 3}  # ASSIGN.001
    assert desc(coord).group_epoch == desc(coord).assignment_epoch == 2


def test_v0_coordinator_generated_member_id():
    coord, _c, _t = make(id_factory=lambda: "generated-1")
    r = coord.heartbeat(G, "", 0, None, ["t"], api_version=0)
    assert r.error == ErrorCode.none and r.member_id == "generated-1"
    # v1 (Kafka 4.1+): an empty member id is invalid
    r = coord.heartbeat(G, "", 0, None, ["t"])
    assert r.error == ErrorCode.invalid_request and r.error_message == "MemberId can't be empty."


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(group_id="", member_id="m", member_epoch=0, subscribed_topic_names=["t"]), "GroupId can't be empty."),
        (dict(group_id=G, member_id="m", member_epoch=0, rack_id=" ", subscribed_topic_names=["t"]),
         "RackId can't be empty."),
        (dict(group_id=G, member_id="m", member_epoch=0, subscribed_topic_names=None),
         "SubscribedTopicNames must be set in first request."),
        (dict(group_id=G, member_id="m", member_epoch=0, subscribed_topic_names=[]),
         "SubscribedTopicNames must be set in first request."),
        (dict(group_id=G, member_id="m", member_epoch=-2), "MemberEpoch is invalid."),
    ],
)
def test_invalid_requests(kwargs, message):
    # HB.007
    coord, _c, _t = make()
    r = coord.heartbeat(**kwargs)
    assert r.error == ErrorCode.invalid_request
    assert r.error_message == message
    assert coord.group(G) is None and coord.log == []


def test_unknown_group_and_unknown_member():
    coord, _c, _t = make()
    r = coord.heartbeat(G, "m1", 3)
    assert r.error == ErrorCode.group_id_not_found
    join(coord, "m1")
    r = coord.heartbeat(G, "ghost", 1)
    assert r.error == ErrorCode.unknown_member_id  # HB.007
    assert coord.heartbeat(G, "ghost", -1).error == ErrorCode.unknown_member_id
    assert coord.heartbeat("other", "m1", -1).error == ErrorCode.group_id_not_found


def test_fencing_rules():
    coord, _c, _t = make()
    join(coord, "m1")
    assert coord.heartbeat(G, "m1", 1).member_epoch == 2  # epoch 1 -> 2 (previous 1)
    r = coord.heartbeat(G, "m1", 5)
    assert r.error == ErrorCode.fenced_member_epoch  # greater than known
    # the previous epoch is accepted (lost response), anything older is fenced
    assert coord.heartbeat(G, "m1", 1).error == ErrorCode.none
    r = coord.heartbeat(G, "m1", 0, None, ["t"])
    assert r.error == ErrorCode.fenced_member_epoch
    # the member is still there; fencing removes nothing
    assert [m.member_id for m in desc(coord).members] == ["m1"]


def test_join_retry_with_epoch_zero_accepted_after_lost_response():
    coord, _c, _t = make()
    assert join(coord, "m1").member_epoch == 1
    r = join(coord, "m1")  # previous epoch of the member is 0
    assert r.error == ErrorCode.none
    # same subscription: the only bump (1 -> 2) comes from the now initialised partitions
    assert r.member_epoch == desc(coord).group_epoch == 2
    assert join(coord, "m1").error == ErrorCode.fenced_member_epoch  # previous epoch is 1 now


def test_leave_with_epoch_minus_one():
    coord, _c, _t = make()
    join(coord, "m1")
    r = coord.heartbeat(G, "m1", -1)
    assert (r.error, r.member_id, r.member_epoch, r.assignment) == (ErrorCode.none, "m1", -1, None)
    d = desc(coord)
    assert d.members == () and d.state == "Empty" and d.group_epoch == 2  # GROUP.005, EPOCH.001
    # re-join with the same id is a new member
    r = join(coord, "m1")
    assert r.member_epoch == 3


def test_group_epoch_bumps_on_membership_changes():
    # EPOCH.001
    coord, clock, _t = make()
    epochs = {"m1": join(coord, "m1").member_epoch}
    settle(coord, epochs)
    e0 = desc(coord).group_epoch
    epochs["m2"] = join(coord, "m2").member_epoch
    e1 = desc(coord).group_epoch
    assert e1 > e0
    assert coord.heartbeat(G, "m2", -1).error == ErrorCode.none
    del epochs["m2"]
    e2 = desc(coord).group_epoch
    assert e2 > e1
    epochs["m3"] = join(coord, "m3").member_epoch
    e3 = desc(coord).group_epoch
    clock.advance(DEFAULT_SESSION_TIMEOUT_MS - 1)
    coord.heartbeat(G, "m1", desc(coord).members[0].member_epoch)
    clock.advance(1)
    coord.tick()
    assert desc(coord).group_epoch == e3 + 1  # m3 timed out


def test_subscription_change_and_null_fields():
    # HB.005, EPOCH.002
    coord, _c, topics = make()
    tid2 = topics.create("t2", 2)
    epochs = {"m1": join(coord, "m1").member_epoch}
    settle(coord, epochs)
    e = desc(coord).group_epoch
    r = coord.heartbeat(G, "m1", epochs["m1"], None, None)
    assert desc(coord).group_epoch == e and r.assignment is None  # null: unchanged
    r = coord.heartbeat(G, "m1", epochs["m1"], None, ["t"])
    assert desc(coord).group_epoch == e  # same list: no bump...
    assert r.assignment is not None  # ...but a full request gets the assignment
    r = coord.heartbeat(G, "m1", epochs["m1"], None, ["t", "t2"])
    assert desc(coord).group_epoch == e + 1
    epochs["m1"] = r.member_epoch
    r = settle(coord, epochs)["m1"]
    member = desc(coord).members[0]
    assert member.subscribed_topic_names == ("t", "t2")
    assert {t for t, _ps in member.assignment} == {topics.get("t").topic_id, tid2}


def test_rack_and_client_changes_do_not_bump():
    coord, _c, _t = make()
    join(coord, "m1", client_id="c1", client_host="/1.2.3.4")
    e = desc(coord).group_epoch
    coord.heartbeat(G, "m1", 1, "rack-a", None, client_id="c1", client_host="/1.2.3.4")
    m = desc(coord).members[0]
    assert (m.rack_id, m.client_id, m.client_host) == ("rack-a", "c1", "/1.2.3.4")
    assert desc(coord).group_epoch in (e, e + 1)  # +1 only from share-partition initialisation
    before = desc(coord).group_epoch
    coord.heartbeat(G, "m1", desc(coord).members[0].member_epoch, "rack-b", None)
    assert desc(coord).group_epoch == before


def test_metadata_change_bumps_epoch_and_assigns_new_partitions():
    # EPOCH.003, HB.006
    coord, _c, topics = make()
    epochs = {"m1": join(coord, "m1").member_epoch}
    settle(coord, epochs)
    e = desc(coord).group_epoch
    r = coord.heartbeat(G, "m1", epochs["m1"])
    assert r.assignment is None  # steady state: not sent
    topics.add_partitions("t", 6)
    r = coord.heartbeat(G, "m1", epochs["m1"])
    assert desc(coord).group_epoch == e + 1  # metadata hash changed
    epochs["m1"] = r.member_epoch
    r = settle(coord, epochs)["m1"]
    assert parts(desc(coord).members[0].assignment, topics) == set(range(6))
    assert desc(coord).group_epoch == e + 2  # +1 again once partitions 4, 5 are initialised


def test_subscribing_before_the_topic_exists():
    coord, _c, topics = make()
    r = join(coord, "m1", topics=("later",))
    assert r.error == ErrorCode.none and r.assignment == ()
    e = desc(coord).group_epoch
    topics.create("later", 2)
    epochs = {"m1": r.member_epoch}
    settle(coord, epochs)
    assert desc(coord).group_epoch > e
    assert parts(desc(coord).members[0].assignment, topics, "later") == {0, 1}


def test_deleted_topic_bumps_once_and_is_revoked():
    coord, _c, topics = make()
    topics.create("u", 2)
    epochs = {"m1": join(coord, "m1", topics=("t", "u")).member_epoch}
    settle(coord, epochs)
    e = desc(coord).group_epoch
    topics.delete("u")
    settle(coord, epochs)
    assert desc(coord).group_epoch == e + 1
    assert parts(desc(coord).members[0].assignment, topics) == {0, 1, 2, 3}
    assert len(desc(coord).members[0].assignment) == 1
    topics.create("u", 1)  # re-created: a new topic id, initialised again
    settle(coord, epochs)
    assert len(desc(coord).members[0].assignment) == 2


def test_assignment_epoch_never_exceeds_group_epoch_and_members_catch_up():
    # EPOCH.005, EPOCH.006
    coord, _c, topics = make()
    epochs = {}
    for i in range(3):
        epochs[f"m{i}"] = join(coord, f"m{i}").member_epoch
        d = desc(coord)
        assert d.assignment_epoch <= d.group_epoch
    settle(coord, epochs)
    d = desc(coord)
    assert d.assignment_epoch == d.group_epoch
    assert all(m.member_epoch == d.assignment_epoch for m in d.members)
    covered = set().union(*(parts(m.assignment, topics) for m in d.members))
    assert covered == {0, 1, 2, 3}


def test_revocation_and_assignment_happen_without_a_handshake():
    # EPOCH.006: the joining member gets a partition before the old owner heartbeats again
    coord, _c, topics = make()
    epochs = {"m1": join(coord, "m1").member_epoch}
    settle(coord, epochs)
    assert parts(desc(coord).members[0].assignment, topics) == {0, 1, 2, 3}
    r2 = join(coord, "m2")
    got = parts(r2, topics)
    assert len(got) == 2
    # m1's target already excludes them; its current assignment changes on its next heartbeat
    r1 = coord.heartbeat(G, "m1", epochs["m1"])
    assert r1.error == ErrorCode.none and r1.member_epoch == r2.member_epoch
    assert parts(r1, topics) == {0, 1, 2, 3} - got


def test_eight_members_four_partitions_share():
    # ASSIGN.002
    coord, _c, topics = make()
    epochs = {f"m{i}": join(coord, f"m{i}").member_epoch for i in range(8)}
    settle(coord, epochs)
    d = desc(coord)
    assert d.state == "Stable"
    per_member = [parts(m.assignment, topics) for m in d.members]
    assert all(len(p) == 1 for p in per_member)
    for p in range(4):
        assert sum(p in s for s in per_member) == 2


def test_last_member_gets_everything():
    # ASSIGN.004
    coord, _c, topics = make()
    epochs = {f"m{i}": join(coord, f"m{i}").member_epoch for i in range(4)}
    settle(coord, epochs)
    for m in ("m0", "m1", "m2"):
        assert coord.heartbeat(G, m, -1).error == ErrorCode.none
        del epochs[m]
    settle(coord, epochs)
    assert parts(desc(coord).members[0].assignment, topics) == {0, 1, 2, 3}


def test_kip_algorithm_through_the_coordinator():
    coord, _c, topics = make(assignor=SimpleAssignor(ALGORITHM_KIP))
    epochs = {f"m{i}": join(coord, f"m{i}").member_epoch for i in range(3)}
    settle(coord, epochs)
    covered = set().union(*(parts(m.assignment, topics) for m in desc(coord).members))
    assert covered == {0, 1, 2, 3}


# -- session timeout, heartbeat interval, max size ------------------------------------------


def test_session_timeout_removes_silent_member_on_tick():
    # HB.003
    coord, clock, _t = make()
    r = join(coord, "m1")
    join(coord, "m2")
    start = clock.now_ms()
    assert coord.session_deadline_ms(G, "m1") == start + DEFAULT_SESSION_TIMEOUT_MS
    e = desc(coord).group_epoch
    for _ in range(11):  # m2 keeps heartbeating, m1 is silent
        clock.advance(4_000)
        coord.heartbeat(G, "m2", desc(coord).members[-1].member_epoch)
        coord.tick()
    e = desc(coord).group_epoch
    clock.advance(DEFAULT_SESSION_TIMEOUT_MS - 44_000 - 1)
    coord.tick()
    assert [m.member_id for m in desc(coord).members] == ["m1", "m2"]
    clock.advance(1)
    coord.tick()
    assert [m.member_id for m in desc(coord).members] == ["m2"]
    assert desc(coord).group_epoch > e
    assert coord.heartbeat(G, "m1", r.member_epoch).error == ErrorCode.unknown_member_id
    assert join(coord, "m1").error == ErrorCode.none  # GROUP.009: rejoin with epoch 0


def test_due_session_fires_before_a_late_heartbeat():
    coord, clock, _t = make()
    r = join(coord, "m1")
    clock.advance(DEFAULT_SESSION_TIMEOUT_MS)
    assert coord.heartbeat(G, "m1", r.member_epoch).error == ErrorCode.unknown_member_id


def test_heartbeat_interval_and_session_timeout_configs():
    # HB.004
    overrides = {}
    coord, clock, _t = make(
        BrokerConfig(group_share_heartbeat_interval_ms=7000, group_share_session_timeout_ms=50000),
        group_config=lambda gid: overrides.get(gid),
    )
    assert join(coord, "m1").heartbeat_interval_ms == 7000
    assert coord.session_deadline_ms(G, "m1") == clock.now_ms() + 50000
    overrides[G] = {"share.heartbeat.interval.ms": "8000", "share.session.timeout.ms": "46000"}
    r = coord.heartbeat(G, "m1", 1)
    assert r.heartbeat_interval_ms == 8000
    assert coord.session_deadline_ms(G, "m1") == clock.now_ms() + 46000
    coord2, _c, _t = make(BrokerConfig(group_share_heartbeat_interval_ms=6000))
    assert join(coord2, "m1").heartbeat_interval_ms == 6000


def test_group_max_size():
    # HB.007
    coord, _c, _t = make(BrokerConfig(group_share_max_size=2))
    assert join(coord, "m1").error == ErrorCode.none
    assert join(coord, "m2").error == ErrorCode.none
    r = join(coord, "m3")
    assert r.error == ErrorCode.group_max_size_reached
    assert coord.heartbeat(G, "m2", desc(coord).members[1].member_epoch).error == ErrorCode.none
    assert len(desc(coord).members) == 2


# -- namespace with classic / consumer groups ------------------------------------------------


def test_shared_namespace_with_consumer_groups():
    # GROUP.002, GROUP.003
    classic = {"cg": "classic", "kip848": "consumer"}
    coord, _c, _t = make(other_group_type=classic.get)
    for gid in ("cg", "kip848"):
        r = coord.heartbeat(gid, "m1", 0, None, ["t"])
        assert r.error == ErrorCode.group_id_not_found
        assert r.error_message == f"Group {gid} is not a share group."
        d = desc(coord, gid)
        assert (d.error, d.error_message) == (ErrorCode.group_id_not_found, f"Group {gid} is not a share group.")
    assert coord.group("cg") is None
    d = desc(coord, "absent")
    assert (d.error, d.error_message) == (ErrorCode.group_id_not_found, "Group absent not found.")
    assert coord.describe([""])[0].error == ErrorCode.invalid_group_id
    # the reverse direction: the classic coordinator asks this one
    join(coord, "m1")
    assert coord.group_type(G) == "share" and coord.group_type("cg") is None


def test_list_groups_reports_share_type_and_states():
    # GROUP.001, GROUP.005
    coord, _c, _t = make()
    join(coord, "m1", group="a")
    join(coord, "m1", group="b")
    coord.heartbeat("b", "m1", -1)
    listed = {g.group_id: g for g in coord.list_groups()}
    assert {(g.group_type, g.protocol_type) for g in listed.values()} == {("share", "share")}
    assert (listed["a"].state, listed["b"].state) == ("Stable", "Empty")
    assert [g.group_id for g in coord.list_groups(["empty"])] == ["b"]


# -- states ------------------------------------------------------------------------------


def test_state_transition_table():
    # GROUP.005: only Empty, Stable, Dead exist
    assert {s.label for s in ShareGroupState} == {"Empty", "Stable", "Dead"}
    g = ShareGroup("x")
    g.transition_to(ShareGroupState.STABLE)
    g.transition_to(ShareGroupState.EMPTY)
    g.transition_to(ShareGroupState.DEAD)
    with pytest.raises(IllegalShareGroupTransition):
        g.transition_to(ShareGroupState.STABLE)
    assert VALID_PREVIOUS_STATES[ShareGroupState.DEAD] == {ShareGroupState.EMPTY, ShareGroupState.STABLE}


def test_empty_group_is_not_expired_and_delete_groups():
    # GROUP.006 (no automatic expiry), GREC.001 (deletion leaves no trace)
    coord, clock, _t = make()
    join(coord, "m1")
    assert coord.delete_groups([G]) == [(G, ErrorCode.non_empty_group)]
    coord.heartbeat(G, "m1", -1)
    clock.advance(30 * 24 * 3600 * 1000)
    coord.tick()
    assert desc(coord).state == "Empty"
    group = coord.group(G)
    assert coord.delete_groups([G, "nope"]) == [(G, ErrorCode.none), ("nope", ErrorCode.group_id_not_found)]
    assert group.state is ShareGroupState.DEAD
    assert desc(coord).error == ErrorCode.group_id_not_found
    r = join(coord, "m1")
    assert r.member_epoch == 1 and desc(coord).group_epoch == 1
    assert replay_all(coord.log).snapshot() == coord.store.snapshot()


def test_no_static_membership():
    # GROUP.007: no instance id anywhere in the API
    coord, _c, _t = make()
    with pytest.raises(TypeError):
        coord.heartbeat(G, "m1", 0, None, ["t"], group_instance_id="i")  # type: ignore[call-arg]
    join(coord, "m1")
    assert not hasattr(desc(coord).members[0], "group_instance_id")


# -- share-partition initialisation -----------------------------------------------------------


def test_manual_initialization_gates_assignment():
    # ASSIGN.005
    coord, clock, topics = make(auto_initialize=False)
    r = join(coord, "m1")
    assert r.initialize is not None and r.initialize.state_epoch == 1
    assert dict(r.initialize.topics) == {topics.get("t").topic_id: (0, 1, 2, 3)}
    r = coord.heartbeat(G, "m1", 1)
    assert r.assignment is None and r.initialize is None  # still initializing: not re-requested
    assert coord.pending_initialization(G) == {topics.get("t").topic_id: frozenset(range(4))}
    # the share coordinator failed: the partitions are asked for again
    coord.fail_initialization(G, dict(coord.pending_initialization(G)))
    r = coord.heartbeat(G, "m1", 1)
    assert r.initialize is not None
    # retry interval: an initialisation still pending after 30 s is requested again
    clock.advance(30_000)
    r = coord.heartbeat(G, "m1", 1)
    assert r.initialize is not None
    coord.complete_initialization(G, {topics.get("t").topic_id: [0, 1]})
    r = coord.heartbeat(G, "m1", 1)
    assert r.member_epoch == 2 and parts(r, topics) == {0, 1}
    coord.complete_initialization(G, {topics.get("t").topic_id: [2, 3]})
    r = coord.heartbeat(G, "m1", 2)
    assert r.member_epoch == 3 and parts(r, topics) == {0, 1, 2, 3}
    assert coord.initialized_partitions(G) == {topics.get("t").topic_id: frozenset(range(4))}


# -- durable records ----------------------------------------------------------------------


def test_records_written_on_join_and_leave():
    coord, _c, _t = make()
    join(coord, "m1")
    types = [r.record_type for r in coord.log]
    assert types[:5] == [10, 11, 13, 12, 14] and 15 in types
    n = len(coord.log)
    coord.heartbeat(G, "m1", -1)
    leave = coord.log[n:]
    assert [(type(r.key).__name__, r.is_tombstone) for r in leave] == [
        ("ShareGroupCurrentMemberAssignmentKey", True),
        ("ShareGroupTargetAssignmentMemberKey", True),
        ("ShareGroupMemberMetadataKey", True),
        ("ShareGroupMetadataKey", False),
    ]
    assert isinstance(leave[0], CoordinatorRecord)


def test_failed_heartbeats_write_nothing():
    coord, _c, _t = make(BrokerConfig(group_share_max_size=1))
    join(coord, "m1")
    n = len(coord.log)
    assert join(coord, "m2").error == ErrorCode.group_max_size_reached
    assert coord.heartbeat(G, "m1", 9).error == ErrorCode.fenced_member_epoch
    assert len(coord.log) == n


def test_rebuilt_coordinator_reaches_the_same_state():
    # GROUP.008, EPOCH.007, GREC.001
    coord, clock, topics = make()
    epochs = {f"m{i}": join(coord, f"m{i}", client_id=f"c{i}").member_epoch for i in range(3)}
    settle(coord, epochs)
    coord.heartbeat(G, "m1", -1)
    del epochs["m1"]
    settle(coord, epochs)
    join(coord, "m1", group="other")
    before = coord.describe([G, "other"])
    clock.advance(1000)
    rebuilt = ShareGroupCoordinator.from_records(list(coord.log), [1], clock, BrokerConfig(), topics)
    assert rebuilt.store.snapshot() == coord.store.snapshot()
    assert rebuilt.describe([G, "other"]) == before
    # Kafka does not bump the group epoch on load; members carry on without rejoining
    for m, e in epochs.items():
        r = rebuilt.heartbeat(G, m, e)
        assert r.error == ErrorCode.none and r.member_epoch == e
    assert rebuilt.describe([G])[0].group_epoch == before[0].group_epoch
    # session timers were re-armed at load time
    assert rebuilt.session_deadline_ms("other", "m1") == clock.now_ms() + DEFAULT_SESSION_TIMEOUT_MS
    clock.advance(DEFAULT_SESSION_TIMEOUT_MS)
    rebuilt.tick()
    assert rebuilt.describe(["other"])[0].members == ()


def test_replay_member_records_in_isolation():
    coord, _c, _t = make()
    join(coord, "m1")
    coord.heartbeat(G, "m1", 1)
    store = replay_all(coord.log)
    group = store.get(G)
    member = group.members["m1"]
    assert member.member_epoch == 2 and member.previous_member_epoch == 1
    assert group.assignment_epoch == 2 and group.target_assignment["m1"] == member.assigned_partitions
    keys = {type(r.key) for r in coord.log}
    assert {ShareGroupMetadataKey, ShareGroupMemberMetadataKey, ShareGroupTargetAssignmentMemberKey,
            ShareGroupCurrentMemberAssignmentKey} <= keys


def test_now_ms_argument_overrides_the_clock():
    coord, clock, _t = make()
    t0 = clock.now_ms()
    join(coord, "m1", now_ms=t0 + 5)
    assert coord.session_deadline_ms(G, "m1") == t0 + 5 + DEFAULT_SESSION_TIMEOUT_MS
    coord.tick(t0 + 5 + DEFAULT_SESSION_TIMEOUT_MS)
    assert desc(coord).members == ()


def test_many_groups_independent():
    coord, _c, _t = make()
    ids = itertools.count()
    for g in ("a", "b", "c"):
        for _ in range(2):
            assert join(coord, f"m{next(ids)}", group=g).error == ErrorCode.none
    assert {d.group_id: len(d.members) for d in coord.describe(["a", "b", "c"])} == {"a": 2, "b": 2, "c": 2}


# -- the share coordinator as persister; share-group administration (KIP-932.ADMIN.*) --------


def make_with_persister(**kw):
    coord, clock, topics = make()
    persister = ShareCoordinator(clock)
    resets: list[tuple[str, uuid.UUID]] = []
    coord.persister = persister
    coord.on_state_reset = lambda group, tid: resets.append((group, tid))
    for name, value in kw.items():
        setattr(coord, name, value)
    return coord, clock, topics, persister, resets


def stored(persister, tid, p, group=G):
    return persister.state(SharePartitionKey(group, tid, p))


def test_first_assignment_initialises_share_partition_state_through_the_persister():
    coord, _clock, topics, persister, _ = make_with_persister()
    tid = topics.get("t").topic_id
    first = join(coord)
    assert parts(first, topics) == set()  # as in Kafka: assigned once initialised
    for p in range(4):
        state = stored(persister, tid, p)
        assert (state.start_offset, state.state_epoch) == (-1, first.member_epoch), state
    again = coord.heartbeat(G, "m1", first.member_epoch)
    assert parts(again, topics) == {0, 1, 2, 3}


def test_partitions_whose_initialisation_failed_are_not_assigned():
    coord, _clock, topics, persister, _ = make_with_persister()
    refused = SimpleNamespace(error=ErrorCode.fenced_state_epoch)
    coord.persister = SimpleNamespace(initialize=lambda *a, **k: refused)
    first = join(coord)
    again = coord.heartbeat(G, "m1", first.member_epoch)
    assert parts(again, topics) == set()
    assert coord.initialized_partitions(G) == {}
    assert coord.pending_initialization(G) == {}


def test_alter_offsets_needs_an_empty_share_group_and_writes_the_start_offset():
    coord, _clock, topics, persister, resets = make_with_persister(other_group_type=lambda g: "classic" if g == "cg" else None)
    tid = topics.get("t").topic_id
    assert join(coord).error == ErrorCode.none
    busy = coord.alter_offsets(G, {"t": [(0, 5)]})
    assert (busy.error, busy.message, busy.topics) == (ErrorCode.non_empty_group, "The group is not empty.", ())
    classic = coord.alter_offsets("cg", {"t": [(0, 5)]})
    assert (classic.error, classic.message) == (ErrorCode.group_id_not_found, "Group cg is not a share group.")
    coord.heartbeat(G, "m1", -1)
    done = coord.alter_offsets(G, {"t": [(0, 5), (9, 1)], "gone": [(0, 1)]})
    assert done.error == ErrorCode.none
    assert [(t.topic_name, t.topic_id, t.partitions) for t in done.topics] == [
        ("gone", None, ((0, ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."),)),
        ("t", tid, ((0, ErrorCode.none, None), (9, ErrorCode.unknown_topic_or_partition,
                                                 "This server does not host this topic-partition."))),
    ]
    state = stored(persister, tid, 0)
    assert (state.start_offset, state.state_batches, state.delivery_complete_count) == (5, (), 0)
    assert stored(persister, tid, 1).start_offset == -1  # untouched
    assert resets == [(G, tid)]


def test_alter_offsets_creates_an_unknown_share_group():
    coord, _clock, topics, persister, _ = make_with_persister()
    tid = topics.get("t").topic_id
    assert coord.alter_offsets("new", {"t": [(2, 7)]}).error == ErrorCode.none
    assert coord.group("new").state is ShareGroupState.EMPTY
    assert coord.offsets_topics("new") == {tid: ("t", frozenset({2}))}
    assert stored(persister, tid, 2, group="new").start_offset == 7


def test_delete_offsets_deletes_whole_topics_of_an_empty_group():
    coord, _clock, topics, persister, resets = make_with_persister()
    tid = topics.get("t").topic_id
    topics.create("u", 1)
    unknown = coord.delete_offsets("nope", ["t"])
    assert (unknown.error, unknown.message) == (ErrorCode.group_id_not_found, "Group nope not found.")
    assert join(coord).error == ErrorCode.none
    assert coord.delete_offsets(G, ["t"]).error == ErrorCode.non_empty_group
    coord.heartbeat(G, "m1", -1)
    result = coord.delete_offsets(G, ["t", "t", "u", "gone"])
    assert [(t.topic_name, t.topic_id, t.error, t.message) for t in result.topics] == [
        ("t", tid, ErrorCode.none, None),
        ("u", None, ErrorCode.unknown_topic_or_partition, "There is no offset information to delete."),
        ("gone", None, ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."),
    ]
    assert all(stored(persister, tid, p) is None for p in range(4))
    assert coord.offsets_topics(G) == {}
    assert resets == [(G, tid)]


def test_delete_groups_deletes_the_share_partition_state():
    coord, _clock, topics, persister, resets = make_with_persister()
    tid = topics.get("t").topic_id
    assert join(coord).error == ErrorCode.none
    assert coord.delete_groups([G]) == [(G, ErrorCode.non_empty_group)]
    coord.heartbeat(G, "m1", -1)
    assert coord.delete_groups([G]) == [(G, ErrorCode.none)]
    assert all(stored(persister, tid, p) is None for p in range(4))
    assert coord.group(G) is None and resets == [(G, tid)]
    assert join(coord).error == ErrorCode.none  # a new group initialises its state afresh
    assert stored(persister, tid, 0).start_offset == -1
