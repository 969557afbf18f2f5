"""Unit tests of the classic group coordinator model (no I/O, ManualClock)."""

from __future__ import annotations

import itertools
import struct

import pytest
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode

from reference_impl.model.broker_state import BrokerConfig
from reference_impl.model.classic_group import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupState,
    IllegalTransition,
    Protocol,
)
from reference_impl.model.clock import ManualClock
from reference_impl.model.group_coordinator import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    NO_RESPONSE,
    GroupCoordinator,
    MemberIdentity,
    OffsetCommitEntry,
)
from reference_impl.protocol import framing

SESSION = 10_000
REBALANCE = 30_000
G = "g1"


def subscription(*topics: str) -> bytes:
    body = framing.encode_entity(ConsumerProtocolSubscription(topics=tuple(topics), user_data=None))
    return struct.pack(">h", 0) + body


RANGE = (Protocol("range", subscription("t")),)


def make(**config) -> tuple[GroupCoordinator, ManualClock]:
    clock = ManualClock()
    ids = itertools.count(1)
    coord = GroupCoordinator([1], clock, BrokerConfig(**config), id_factory=lambda: f"id{next(ids)}")
    return coord, clock


def join(coord, member_id="", *, protocols=RANGE, instance=None, version=9, session=SESSION,
         rebalance=REBALANCE, client="c", ptype="consumer", group=G):
    return coord.join_group(group, member_id, ptype, protocols, session, rebalance,
                            group_instance_id=instance, client_id=client, client_host="/127.0.0.1",
                            api_version=version)


def join_new(coord, **kw):
    """Two-step join (KIP-394): returns the parked or completed Pending of the second step."""
    first = join(coord, **kw)
    assert first.result.error == ErrorCode.member_id_required
    member_id = first.result.member_id
    return member_id, join(coord, member_id, **kw)


def stable_group_of(coord, n: int) -> list[str]:
    """A Stable group of n dynamic members; returns member ids (first is the leader)."""
    ids = []
    parked = []
    for _ in range(n):
        mid, p = join_new(coord)
        ids.append(mid)
        parked.append((mid, p))
        if len(ids) > 1:
            # Everyone else must rejoin for the new generation.
            for other in ids[:-1]:
                parked.append((other, join(coord, other)))
    for _, p in parked[-n:]:
        assert p.done and p.result.error == ErrorCode.none
    gen = coord.group(G).generation_id
    leader = coord.group(G).leader_id
    followers = [m for m in ids if m != leader]
    pend = [coord.sync_group(G, gen, m) for m in followers]
    assignment = [(m, m.encode()) for m in ids]
    lead = coord.sync_group(G, gen, leader, assignment)
    assert lead.result.error == ErrorCode.none
    for p in pend:
        assert p.done and p.result.error == ErrorCode.none
    assert coord.group(G).state is GroupState.STABLE
    return [leader] + followers


# -- transition table ------------------------------------------------------------------


@pytest.mark.parametrize("source", list(GroupState))
@pytest.mark.parametrize("target", list(GroupState))
def test_transition_table(source: GroupState, target: GroupState) -> None:
    group = ClassicGroup("g", state=source)
    allowed = source in VALID_PREVIOUS_STATES[target]
    if allowed:
        group.transition_to(target, 5)
        assert group.state is target and group.previous_state is source and group.state_timestamp_ms == 5
    else:
        with pytest.raises(IllegalTransition):
            group.transition_to(target, 5)
        assert group.state is source


def test_transition_table_matches_kafka() -> None:
    E, P, C, S, D = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
                     GroupState.STABLE, GroupState.DEAD)
    assert VALID_PREVIOUS_STATES == {E: {P}, P: {E, S, C}, C: {P}, S: {C}, D: {E, P, C, S, D}}


# -- join / sync -----------------------------------------------------------------------


def test_first_join_requires_member_id_v4_plus() -> None:
    coord, _ = make()
    first = join(coord, client="cli")
    assert first.done
    assert first.result.error == ErrorCode.member_id_required
    assert first.result.member_id == "cli-id1"
    group = coord.group(G)
    assert group.state is GroupState.EMPTY and group.is_pending_member("cli-id1")


def test_join_v3_adds_member_directly() -> None:
    coord, _ = make()
    p = join(coord, version=3)
    assert p.done and p.result.error == ErrorCode.none
    assert p.result.generation_id == 1 and p.result.leader == p.result.member_id
    assert coord.group(G).state is GroupState.COMPLETING_REBALANCE


def test_single_member_full_cycle() -> None:
    coord, _ = make()
    mid, p = join_new(coord)
    assert p.done  # initial delay 0: the join phase completes at once
    r = p.result
    assert (r.error, r.generation_id, r.protocol_type, r.protocol_name, r.leader, r.member_id) == (
        ErrorCode.none, 1, "consumer", "range", mid, mid)
    assert [m.member_id for m in r.members] == [mid]
    group = coord.group(G)
    assert group.state is GroupState.COMPLETING_REBALANCE and group.pending_sync_members == {mid}
    s = coord.sync_group(G, 1, mid, [(mid, b"A")], protocol_type="consumer", protocol_name="range")
    assert s.result.error == ErrorCode.none and s.result.assignment == b"A"
    assert s.result.protocol_type == "consumer" and s.result.protocol_name == "range"
    assert group.state is GroupState.STABLE and not group.pending_sync_members
    assert coord.heartbeat(G, 1, mid) == ErrorCode.none


def test_second_member_triggers_rebalance_and_waits_for_all() -> None:
    coord, _ = make()
    a, pa = join_new(coord)
    coord.sync_group(G, 1, a, [(a, b"A")])
    b, pb = join_new(coord)
    group = coord.group(G)
    assert not pb.done and group.state is GroupState.PREPARING_REBALANCE
    assert coord.heartbeat(G, 1, a) == ErrorCode.rebalance_in_progress
    assert coord.sync_group(G, 1, a).result.error == ErrorCode.rebalance_in_progress
    pa2 = join(coord, a)
    assert pa2.done and pb.done
    assert pa2.result.generation_id == pb.result.generation_id == 2
    assert pa2.result.leader == a and len(pa2.result.members) == 2 and pb.result.members == ()
    # Follower waits for the leader's assignment.
    sb = coord.sync_group(G, 2, b)
    assert not sb.done
    sa = coord.sync_group(G, 2, a, [(a, b"A2"), (b, b"B2")])
    assert sa.result.assignment == b"A2"
    assert sb.done and sb.result.error == ErrorCode.none and sb.result.assignment == b"B2"
    assert group.state is GroupState.STABLE


def test_missing_assignment_is_empty_and_unknown_ids_ignored() -> None:
    coord, _ = make()
    a, b = stable_group_of(coord, 2)
    assert coord.group(G).member(b).assignment == b.encode()
    # Leader rejoins -> rebalance; assigns nothing to b.
    join(coord, a)
    join(coord, b)
    gen = coord.group(G).generation_id
    sb = coord.sync_group(G, gen, b)
    coord.sync_group(G, gen, a, [(a, b"x"), ("ghost", b"y")])
    assert sb.result.assignment == b""


def test_follower_rejoin_in_stable_gets_current_generation_without_rebalance() -> None:
    coord, _ = make()
    a, b = stable_group_of(coord, 2)
    gen = coord.group(G).generation_id
    p = join(coord, b)
    assert p.done and p.result.generation_id == gen and p.result.members == ()
    assert coord.group(G).state is GroupState.STABLE


def test_leader_rejoin_in_stable_forces_rebalance() -> None:
    coord, _ = make()
    a, b = stable_group_of(coord, 2)
    p = join(coord, a)
    assert not p.done and coord.group(G).state is GroupState.PREPARING_REBALANCE


def test_changed_metadata_rejoin_forces_rebalance() -> None:
    coord, _ = make()
    a, b = stable_group_of(coord, 2)
    p = join(coord, b, protocols=(Protocol("range", subscription("t", "u")),))
    assert not p.done and coord.group(G).state is GroupState.PREPARING_REBALANCE


def test_completing_rebalance_rejoin_with_same_metadata_resends_response() -> None:
    coord, _ = make()
    a, p = join_new(coord)
    again = join(coord, a)
    assert again.done and again.result.generation_id == 1 and len(again.result.members) == 1
    assert coord.group(G).state is GroupState.COMPLETING_REBALANCE


def test_rebalance_during_completing_fails_waiting_syncs() -> None:
    coord, _ = make()
    a, b = stable_group_of(coord, 2)
    join(coord, a)
    join(coord, b)
    gen = coord.group(G).generation_id
    sb = coord.sync_group(G, gen, b)
    assert not sb.done
    c, pc = join_new(coord)  # new member during CompletingRebalance
    assert sb.done and sb.result.error == ErrorCode.rebalance_in_progress
    assert coord.group(G).state is GroupState.PREPARING_REBALANCE


def test_join_errors() -> None:
    coord, _ = make()
    assert join(coord, group="").result.error == ErrorCode.invalid_group_id
    assert join(coord, session=5_999).result.error == ErrorCode.invalid_session_timeout
    assert join(coord, session=1_800_001).result.error == ErrorCode.invalid_session_timeout
    assert coord.group(G) is None
    # Known member id but no group.
    r = join(coord, "someone").result
    assert r.error == ErrorCode.unknown_member_id and r.member_id == "someone"
    # Empty protocol type / no protocols on an empty group.
    assert join(coord, ptype="").result.error == ErrorCode.inconsistent_group_protocol
    assert join(coord, protocols=()).result.error == ErrorCode.inconsistent_group_protocol
    a, b = stable_group_of(coord, 2)
    assert join(coord, ptype="connect").result.error == ErrorCode.inconsistent_group_protocol
    other = (Protocol("roundrobin", b""),)
    assert join(coord, protocols=other).result.error == ErrorCode.inconsistent_group_protocol
    assert join(coord, b, protocols=other).result.error == ErrorCode.inconsistent_group_protocol
    # Known group, unknown member id.
    assert join(coord, "nobody").result.error == ErrorCode.unknown_member_id


def test_protocol_selection_by_votes() -> None:
    coord, _ = make()
    rr_first = (Protocol("roundrobin", b"r"), Protocol("range", b"g"))
    range_first = (Protocol("range", b"g"), Protocol("roundrobin", b"r"))
    a, _ = join_new(coord, protocols=range_first)
    b, _ = join_new(coord, protocols=rr_first)
    join(coord, a, protocols=range_first)
    c, pc = join_new(coord, protocols=rr_first)
    pa = join(coord, a, protocols=range_first)
    pb = join(coord, b, protocols=rr_first)
    assert pa.done and pb.done and pc.done
    # Candidates are supported by all; each member votes its first candidate: 2 x roundrobin.
    assert {p.result.protocol_name for p in (pa, pb, pc)} == {"roundrobin"}
    assert pa.result.leader == a
    assert {m.metadata for m in pa.result.members} == {b"r"}
    assert pb.result.members == pc.result.members == ()


def test_sync_errors() -> None:
    coord, _ = make()
    assert coord.sync_group("", 1, "m").result.error == ErrorCode.invalid_group_id
    assert coord.sync_group(G, 1, "m").result.error == ErrorCode.unknown_member_id  # no group
    a, b = stable_group_of(coord, 2)
    gen = coord.group(G).generation_id
    assert coord.sync_group(G, gen, "ghost").result.error == ErrorCode.unknown_member_id
    assert coord.sync_group(G, gen + 1, a).result.error == ErrorCode.illegal_generation
    assert coord.sync_group(G, gen, a, protocol_type="connect").result.error == ErrorCode.inconsistent_group_protocol
    assert coord.sync_group(G, gen, a, protocol_name="sticky").result.error == ErrorCode.inconsistent_group_protocol
    ok = coord.sync_group(G, gen, b, protocol_type="consumer", protocol_name="range").result
    assert ok.error == ErrorCode.none and ok.assignment == b.encode()


def test_heartbeat_errors() -> None:
    coord, _ = make()
    assert coord.heartbeat("", 0, "m") == ErrorCode.invalid_group_id
    assert coord.heartbeat(G, 0, "m") == ErrorCode.unknown_member_id
    a, b = stable_group_of(coord, 2)
    gen = coord.group(G).generation_id
    assert coord.heartbeat(G, gen, "ghost") == ErrorCode.unknown_member_id
    assert coord.heartbeat(G, gen - 1, a) == ErrorCode.illegal_generation
    assert coord.heartbeat(G, gen, a) == ErrorCode.none


# -- timers ----------------------------------------------------------------------------


def test_session_timeout_expiry_removes_member_and_rebalances() -> None:
    coord, clock = make()
    a, b = stable_group_of(coord, 2)
    group = coord.group(G)
    gen = group.generation_id
    assert group.member(b).session_deadline_ms == clock.now_ms() + SESSION
    for step in (SESSION // 2, SESSION // 2 - 1):
        clock.advance(step)
        assert coord.heartbeat(G, gen, a) == ErrorCode.none
        coord.tick(clock.now_ms())
    assert group.has_member(b) and group.state is GroupState.STABLE
    clock.advance(1)
    coord.tick(clock.now_ms())
    assert not group.has_member(b)
    assert group.state is GroupState.PREPARING_REBALANCE
    assert coord.heartbeat(G, gen, a) == ErrorCode.rebalance_in_progress
    p = join(coord, a)
    assert p.done and p.result.generation_id == gen + 1 and len(p.result.members) == 1


def test_heartbeat_after_deadline_sees_expiry_without_tick() -> None:
    coord, clock = make()
    (a,) = stable_group_of(coord, 1)
    clock.advance(SESSION)
    assert coord.heartbeat(G, 1, a) == ErrorCode.unknown_member_id
    assert coord.group(G).state is GroupState.EMPTY and coord.group(G).generation_id == 2


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    coord, clock = make()
    a, b, c = stable_group_of(coord, 3)
    gen = coord.group(G).generation_id
    pa = join(coord, a)  # leader rejoin starts a rebalance
    pb = join(coord, b)
    assert not pa.done
    # c keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins.
    for _ in range(5):
        clock.advance(REBALANCE // 5)
        coord.heartbeat(G, gen, c)
        coord.tick(clock.now_ms())
    assert pa.done and pb.done
    assert pa.result.generation_id == gen + 1
    assert {m.member_id for m in pa.result.members} == {a, b}
    assert not coord.group(G).has_member(c)
    assert coord.heartbeat(G, gen, c) == ErrorCode.unknown_member_id


def test_pending_sync_expiry_removes_silent_members() -> None:
    coord, clock = make()
    a, b = stable_group_of(coord, 2)
    join(coord, a), join(coord, b)
    gen = coord.group(G).generation_id
    coord.sync_group(G, gen, a, [(a, b"1"), (b, b"2")])  # b never syncs
    # Keep b's session alive so only the sync timer can remove it.
    for step in [5_000] * 5 + [4_999]:
        clock.advance(step)
        assert coord.heartbeat(G, gen, a) == coord.heartbeat(G, gen, b) == ErrorCode.none
        coord.tick(clock.now_ms())
    assert coord.group(G).has_member(b)
    clock.advance(1)
    coord.tick(clock.now_ms())
    assert not coord.group(G).has_member(b)
    assert coord.group(G).state is GroupState.PREPARING_REBALANCE


def test_initial_rebalance_delay_and_extension() -> None:
    coord, clock = make(group_initial_rebalance_delay_ms=3_000)
    a, pa = join_new(coord)
    assert not pa.done and coord.group(G).state is GroupState.PREPARING_REBALANCE
    clock.advance(2_000)
    b, pb = join_new(coord)  # a new member extends the delay
    clock.advance(1_000)
    coord.tick(clock.now_ms())
    assert not pa.done
    clock.advance(3_000)
    coord.tick(clock.now_ms())
    assert pa.done and pb.done and pa.result.generation_id == 1 and len(pa.result.members) == 2


def test_new_member_join_timeout() -> None:
    coord, clock = make()
    a, b = stable_group_of(coord, 2)
    c, pc = join_new(coord)  # parks: a and b must rejoin
    assert not pc.done
    # a and b keep heartbeating but never rejoin; c's parked join expires first? No: the
    # rebalance timeout (30 s) completes the join without a and b.
    clock.advance(REBALANCE)
    coord.tick(clock.now_ms())
    assert pc.done and pc.result.error == ErrorCode.none and pc.result.leader == c
    # A new member whose rebalance never completes is dropped after the join timeout.
    coord2, clock2 = make()
    x, y = stable_group_of(coord2, 2)
    z_first = join(coord2)
    z = z_first.result.member_id
    pz = join(coord2, z, rebalance=NEW_MEMBER_JOIN_TIMEOUT_MS * 2)
    gen2 = coord2.group(G).generation_id
    while clock2.now_ms() - 1_700_000_000_000 < NEW_MEMBER_JOIN_TIMEOUT_MS:
        clock2.advance(5_000)
        coord2.heartbeat(G, gen2, x)
        coord2.heartbeat(G, gen2, y)
        coord2.tick(clock2.now_ms())
    assert pz.done and pz.result.error == ErrorCode.unknown_member_id
    assert not coord2.group(G).has_member(z)


def test_pending_member_expires_after_session_timeout() -> None:
    coord, clock = make()
    first = join(coord)
    mid = first.result.member_id
    clock.advance(SESSION)
    coord.tick(clock.now_ms())
    assert not coord.group(G).is_pending_member(mid)
    # Rejoining with the expired id is now an unknown member.
    assert join(coord, mid).result.error == ErrorCode.unknown_member_id


# -- static membership -----------------------------------------------------------------


def test_static_member_join_and_fencing() -> None:
    coord, clock = make()
    p = join(coord, instance="inst-a")  # static members skip MEMBER_ID_REQUIRED
    assert p.done and p.result.error == ErrorCode.none
    old = p.result.member_id
    assert old.startswith("inst-a-")
    coord.sync_group(G, 1, old, [(old, b"A")], group_instance_id="inst-a")
    assert coord.group(G).state is GroupState.STABLE
    # Same instance restarts with an unknown member id: replaced without a rebalance.
    p2 = join(coord, instance="inst-a", version=8)
    assert p2.done and p2.result.error == ErrorCode.none
    new = p2.result.member_id
    assert new != old and p2.result.generation_id == 1
    assert p2.result.leader == old  # pre-v9: the old leader id, so it does not reassign
    group = coord.group(G)
    assert group.state is GroupState.STABLE and group.static_member_id("inst-a") == new
    assert group.member(new).assignment == b"A"
    # The old incarnation is fenced everywhere.
    assert coord.heartbeat(G, 1, old, "inst-a") == ErrorCode.fenced_instance_id
    assert coord.sync_group(G, 1, old, group_instance_id="inst-a").result.error == ErrorCode.fenced_instance_id
    assert join(coord, old, instance="inst-a").result.error == ErrorCode.fenced_instance_id
    errs = coord.commit_offsets(G, 1, old, [OffsetCommitEntry("t", 0, 5)], group_instance_id="inst-a")
    assert errs == [ErrorCode.fenced_instance_id]
    assert coord.validate_txn_offset_commit(G, 1, old, "inst-a") == ErrorCode.fenced_instance_id
    assert coord.heartbeat(G, 1, new, "inst-a") == ErrorCode.none
    # Unknown instance id.
    assert coord.heartbeat(G, 1, new, "inst-zzz") == ErrorCode.unknown_member_id


def test_static_leader_rejoin_v9_skips_assignment() -> None:
    coord, _ = make()
    p = join(coord, instance="i")
    old = p.result.member_id
    coord.sync_group(G, 1, old, [(old, b"A")])
    p2 = join(coord, instance="i", version=9)
    r = p2.result
    assert r.skip_assignment and r.leader == r.member_id and len(r.members) == 1


def test_static_member_replaced_while_parked_is_fenced() -> None:
    coord, _ = make()
    a, pa = join_new(coord)
    coord.sync_group(G, 1, a, [(a, b"")])
    ps = join(coord, instance="s")  # static member joins -> rebalance, parked
    assert not ps.done
    join(coord, instance="s")  # another incarnation replaces it
    assert ps.done and ps.result.error == ErrorCode.fenced_instance_id


def test_static_member_survives_rebalance_timeout() -> None:
    coord, clock = make()
    ps = join(coord, instance="s", session=60_000)
    s = ps.result.member_id
    a, pa = join_new(coord)  # rebalance; static member s does not rejoin
    clock.advance(REBALANCE)
    coord.tick(clock.now_ms())
    assert pa.done
    group = coord.group(G)
    assert group.has_member(s) and group.has_member(a)  # static members are not dropped here
    assert group.generation_id == 2


# -- leave -----------------------------------------------------------------------------


def test_leave_group_batch() -> None:
    coord, _ = make()
    p = join(coord, instance="s")
    s = p.result.member_id
    coord.sync_group(G, 1, s, [(s, b"")])
    a, pa = join_new(coord)
    join(coord, s, instance="s")
    pending = join(coord).result.member_id  # MEMBER_ID_REQUIRED, not yet joined
    r = coord.leave_group(G, [
        MemberIdentity("", "s"),  # by instance id only (admin removal)
        MemberIdentity("ghost"),
        MemberIdentity(pending),
        MemberIdentity("", "nope"),
        MemberIdentity(a, "wrong-instance"),
    ])
    assert r.error == ErrorCode.none
    assert [m.error for m in r.members] == [
        ErrorCode.none, ErrorCode.unknown_member_id, ErrorCode.none, ErrorCode.unknown_member_id,
        ErrorCode.unknown_member_id,
    ]
    group = coord.group(G)
    assert not group.has_member(s) and not group.is_pending_member(pending)
    assert group.state is GroupState.PREPARING_REBALANCE
    # The remaining member rejoins alone and leads the next generation.
    again = join(coord, a)
    assert again.done and again.result.leader == a and [m.member_id for m in again.result.members] == [a]
    assert coord.leave_group("", []).error == ErrorCode.invalid_group_id
    missing = coord.leave_group("nope", [MemberIdentity("x")])
    assert missing.error == ErrorCode.none and missing.members[0].error == ErrorCode.unknown_member_id


def test_last_member_leaving_empties_group() -> None:
    coord, _ = make()
    (a,) = stable_group_of(coord, 1)
    assert coord.leave_group(G, [MemberIdentity(a)]).members[0].error == ErrorCode.none
    group = coord.group(G)
    assert group.state is GroupState.EMPTY and group.generation_id == 2 and group.protocol_name is None
    assert group.protocol_type == "consumer"


def test_leave_completes_others_parked_sync_never() -> None:
    coord, _ = make()
    a, b = stable_group_of(coord, 2)
    join(coord, a), join(coord, b)
    gen = coord.group(G).generation_id
    sb = coord.sync_group(G, gen, b)
    coord.leave_group(G, [MemberIdentity(b)])
    assert sb.result is NO_RESPONSE  # Kafka never answers a removed member's parked sync


# -- offsets ---------------------------------------------------------------------------


def test_commit_generation_checks() -> None:
    coord, _ = make()
    entry = [OffsetCommitEntry("t", 0, 10, 3, "meta")]
    # Group-managed commit to a missing group.
    assert coord.commit_offsets("nog", 1, "m", entry, api_version=8) == [ErrorCode.illegal_generation]
    assert coord.commit_offsets("nog", 1, "m", entry, api_version=9) == [ErrorCode.group_id_not_found]
    assert coord.group("nog") is None
    a, b = stable_group_of(coord, 2)
    gen = coord.group(G).generation_id
    assert coord.commit_offsets(G, gen, a, entry) == [ErrorCode.none]
    assert coord.commit_offsets(G, gen - 1, a, entry) == [ErrorCode.illegal_generation]
    assert coord.commit_offsets(G, gen, "ghost", entry) == [ErrorCode.unknown_member_id]
    assert coord.commit_offsets(G, -1, "", entry) == [ErrorCode.unknown_member_id]  # simple commit, busy group
    assert coord.commit_offsets(G, -1, a, entry) == [ErrorCode.illegal_generation]
    # CompletingRebalance: REBALANCE_IN_PROGRESS for current members.
    join(coord, a), join(coord, b)
    assert coord.group(G).state is GroupState.COMPLETING_REBALANCE
    assert coord.commit_offsets(G, gen + 1, a, entry) == [ErrorCode.rebalance_in_progress]
    # PreparingRebalance: the old generation may still commit.
    coord2, _ = make()
    x, y = stable_group_of(coord2, 2)
    g2 = coord2.group(G).generation_id
    join(coord2, x)
    assert coord2.group(G).state is GroupState.PREPARING_REBALANCE
    assert coord2.commit_offsets(G, g2, y, entry) == [ErrorCode.none]
    # Transactional commits skip the CompletingRebalance check.
    assert coord.validate_txn_offset_commit(G, gen + 1, a, None) is None
    assert coord.validate_txn_offset_commit("nog", 3, "m", None) == ErrorCode.illegal_generation


def test_simple_commit_creates_empty_group_and_fetch() -> None:
    coord, clock = make()
    errs = coord.commit_offsets("simple", -1, "", [
        OffsetCommitEntry("t", 0, 10, 4, "hello"),
        OffsetCommitEntry("t", 1, 20, -1, None),
        OffsetCommitEntry("u", 0, 5, -1, "x" * 4097),
    ])
    assert errs == [ErrorCode.none, ErrorCode.none, ErrorCode.offset_metadata_too_large]
    group = coord.group("simple")
    assert group is not None and group.state is GroupState.EMPTY and group.protocol_type is None
    r = coord.fetch_offsets("simple", [("t", [0, 1, 2]), ("u", [0])])
    assert r.error == ErrorCode.none
    (t_name, t_parts), (u_name, u_parts) = r.topics
    assert [(p.partition, p.offset, p.leader_epoch, p.metadata) for p in t_parts] == [
        (0, 10, 4, "hello"), (1, 20, -1, ""), (2, -1, -1, "")]
    assert [(p.offset, p.error) for p in u_parts] == [(-1, ErrorCode.none)]
    everything = coord.fetch_offsets("simple", None)
    assert [(t, [p.partition for p in ps]) for t, ps in everything.topics] == [("t", [0, 1])]
    assert coord.fetch_offsets("absent", None).topics == ()
    absent = coord.fetch_offsets("absent", [("t", [0])])
    assert absent.topics[0][1][0].offset == -1


def test_require_stable_uses_pending_transactional_hook() -> None:
    coord, _ = make()
    coord.commit_offsets("g", -1, "", [OffsetCommitEntry("t", 0, 7), OffsetCommitEntry("t", 1, 8)])
    coord.offsets.pending_transactional_offsets = lambda g, t, p: (g, t, p) == ("g", "t", 1)
    r = coord.fetch_offsets("g", [("t", [0, 1])], require_stable=True)
    assert [(p.offset, p.error) for p in r.topics[0][1]] == [
        (7, ErrorCode.none), (-1, ErrorCode.unstable_offset_commit)]
    r = coord.fetch_offsets("g", [("t", [0, 1])], require_stable=False)
    assert [p.offset for p in r.topics[0][1]] == [7, 8]
    r = coord.fetch_offsets("g", None, require_stable=True)
    assert [p.error for p in r.topics[0][1]] == [ErrorCode.none, ErrorCode.unstable_offset_commit]


def test_offset_retention_and_group_cleanup() -> None:
    coord, clock = make(offsets_retention_minutes=1)
    coord.commit_offsets("s", -1, "", [OffsetCommitEntry("t", 0, 1)], retention_time_ms=5_000)
    coord.commit_offsets("s", -1, "", [OffsetCommitEntry("t", 1, 1)])
    clock.advance(5_000)
    coord.cleanup_group_metadata(clock.now_ms())
    assert coord.offsets.get("s", "t", 0) is None  # per-commit retention_time (v2-v4)
    assert coord.offsets.get("s", "t", 1) is not None
    clock.advance(55_000)
    coord.cleanup_group_metadata(clock.now_ms())
    assert coord.offsets.get("s", "t", 1) is None
    assert coord.group("s") is None  # empty group without offsets is deleted
    # Stable consumer groups keep offsets of subscribed topics.
    a, b = stable_group_of(coord, 2)
    gen = coord.group(G).generation_id
    coord.commit_offsets(G, gen, a, [OffsetCommitEntry("t", 0, 1), OffsetCommitEntry("other", 0, 1)])
    for _ in range(13):
        clock.advance(5_000)
        coord.heartbeat(G, gen, a), coord.heartbeat(G, gen, b)
    coord.cleanup_group_metadata(clock.now_ms())
    assert coord.offsets.get(G, "t", 0) is not None
    assert coord.offsets.get(G, "other", 0) is None


def test_periodic_cleanup_runs_from_tick() -> None:
    coord, clock = make(offsets_retention_minutes=1)
    coord.commit_offsets("s", -1, "", [OffsetCommitEntry("t", 0, 1)])
    clock.advance(60_000)
    coord.tick(clock.now_ms())
    assert coord.group("s") is not None  # not yet at the 10-minute check interval
    clock.advance(540_000)
    coord.tick(clock.now_ms())
    assert coord.group("s") is None


def test_commit_keeps_session_alive() -> None:
    coord, clock = make()
    (a,) = stable_group_of(coord, 1)
    for _ in range(4):
        clock.advance(SESSION // 2)
        assert coord.commit_offsets(G, 1, a, [OffsetCommitEntry("t", 0, 1)]) == [ErrorCode.none]
    assert coord.group(G).has_member(a)


# -- admin -----------------------------------------------------------------------------


def test_describe_list_delete() -> None:
    coord, _ = make()
    assert coord.describe_group(G) is None
    a, b = stable_group_of(coord, 2)
    d = coord.describe_group(G)
    assert (d.state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.client_id, m.client_host, m.assignment) for m in d.members] == [
        (a, "c", "/127.0.0.1", a.encode()), (b, "c", "/127.0.0.1", b.encode())]
    assert all(m.metadata == RANGE[0].metadata for m in d.members)
    join(coord, a)
    d = coord.describe_group(G)
    assert d.state == "PreparingRebalance" and d.protocol_data == "" and all(m.metadata == b"" for m in d.members)
    coord.commit_offsets("simple", -1, "", [OffsetCommitEntry("t", 0, 1)])
    listed = {g.group_id: g for g in coord.list_groups()}
    assert listed[G].state == "PreparingRebalance" and listed[G].protocol_type == "consumer"
    assert listed["simple"].protocol_type == "" and listed["simple"].group_type == "classic"
    assert [g.group_id for g in coord.list_groups(states_filter=["empty "])] == ["simple"]
    assert [g.group_id for g in coord.list_groups(states_filter=["PREPARINGREBALANCE"])] == [G]
    assert coord.list_groups(types_filter=["consumer"]) == []
    assert len(coord.list_groups(types_filter=["Classic"])) == 2
    assert coord.list_groups(types_filter=["bogus"]) == []
    assert [g.group_id for g in coord.list_groups(include=lambda gid: gid == "simple")] == ["simple"]
    res = dict(coord.delete_groups([G, "simple", "missing"]))
    assert res == {G: ErrorCode.non_empty_group, "simple": ErrorCode.none, "missing": ErrorCode.group_id_not_found}
    assert coord.group("simple") is None and coord.fetch_offsets("simple", None).topics == ()


def test_zero_rebalance_timeout_with_absent_static_member_terminates() -> None:
    coord, clock = make()
    ps = join(coord, instance="s", rebalance=0)
    s = ps.result.member_id
    join(coord, version=3, rebalance=0)  # a dynamic member starts a rebalance s never joins
    clock.advance(SESSION * 3)
    coord.tick(clock.now_ms())
    group = coord.group(G)
    assert not group.has_member(s)  # the absent static member's session expired eventually
