"""Per-group state of a classic (JoinGroup/SyncGroup) consumer group.

Pure data plus small invariant-keeping helpers; the rebalance protocol itself (what a
JoinGroup or a timer does) lives in `group_coordinator.py`. Time never enters here:
deadlines are plain integers set by the coordinator from its injected clock.

State machine (the transition table is `VALID_PREVIOUS_STATES`, checked on every move):

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                  ▲      │                                   │        │
      │                  │      └──── no member left ──▶ Empty      │        │
      │                  └──── member change / expiry ◀─────────────┘        │
      │                  ▲                                                   ▼
      │                  └─────── member change / expiry ◀────────────── Stable
    Dead ◀── any state (group deleted)
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode

from reference_impl.protocol import framing

CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def label(self) -> str:
        """The name Kafka puts on the wire (DescribeGroups, ListGroups)."""
        return self.value


# target state -> states it may be entered from (Kafka's ClassicGroupState table).
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalTransition(Exception):
    pass


T = TypeVar("T")


class Pending(Generic[T]):
    """A response the coordinator completes now or later (a parked JoinGroup/SyncGroup).

    The handler keeps the object and waits until `done`; the model sets `result` exactly once.
    """

    __slots__ = ("result",)

    def __init__(self, result: T | None = None) -> None:
        self.result = result

    @property
    def done(self) -> bool:
        return self.result is not None

    def complete(self, result: T) -> bool:
        if self.result is not None:
            return False
        self.result = result
        return True

    def __repr__(self) -> str:
        return f"Pending({self.result!r})"


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One entry of the leader's JoinGroup response member list."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class Deadline:
    """A timer: fires when the clock reaches `at_ms`; `seq` orders timers due together."""

    at_ms: int
    seq: int


@dataclass(eq=False, slots=True)
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    # Parked requests of this member, completed by the coordinator.
    awaiting_join: Pending[JoinResult] | None = None
    awaiting_sync: Pending[SyncResult] | None = None
    # A member added by a JoinGroup that has not yet seen a completed join phase.
    is_new: bool = False
    # Session timer (Kafka's heartbeat key): None while not scheduled.
    heartbeat: Deadline | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    @property
    def session_deadline_ms(self) -> int | None:
        return None if self.heartbeat is None else self.heartbeat.at_ms

    def has_satisfied_heartbeat(self) -> bool:
        # New members are expired even while their JoinGroup is parked; other members
        # waiting for a rebalance step count as alive.
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def protocol_names(self) -> list[str]:
        return [p.name for p in self.protocols]

    def matches(self, protocols: tuple[Protocol, ...]) -> bool:
        return tuple(protocols) == tuple(self.protocols)

    def metadata_for(self, protocol_name: str | None) -> bytes:
        for p in self.protocols:
            if p.name == protocol_name:
                return p.metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        for p in self.protocols:
            if p.name in candidates:
                return p.name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState | None = None
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    # member id -> member, in join order (the first member is the fallback leader).
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    # group.instance.id -> member id
    static_members: dict[str, str] = field(default_factory=dict)
    # Dynamic members told MEMBER_ID_REQUIRED that have not joined yet: id -> session timer.
    pending_members: dict[str, Deadline] = field(default_factory=dict)
    # Members that got the JoinGroup response of this generation but sent no SyncGroup yet.
    pending_sync_members: set[str] = field(default_factory=set)
    # protocol name -> number of members supporting it
    supported_protocols: dict[str, int] = field(default_factory=dict)
    new_member_added: bool = False
    subscribed_topics: frozenset[str] | None = None
    # Group timers (Kafka's join and sync keys).
    join_timer: Deadline | None = None
    join_timer_kind: str = ""  # "initial" (delayed first rebalance) or "complete"
    join_timer_args: tuple[int, int] = (0, 0)  # initial: (delay_ms, remaining_ms)
    sync_timer: Deadline | None = None
    sync_timer_generation: int = 0

    # -- state ---------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalTransition(
                f"group {self.group_id!r}: {self.state.label} -> {target.label} is not a valid transition"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    @property
    def is_simple(self) -> bool:
        """Created by an offset commit only: no protocol type, never had members."""
        return self.protocol_type is None and not self.members

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # -- membership ----------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> ClassicGroupMember:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def add(self, member: ClassicGroupMember) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(f"instance {member.group_instance_id!r} is already a member")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ValueError("member protocol type differs from the group's")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, +1)
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self,
        member: ClassicGroupMember,
        protocols: tuple[Protocol, ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        awaiting_join: Pending[JoinResult] | None,
    ) -> None:
        self._count_protocols(member, -1)
        member.protocols = tuple(protocols)
        self._count_protocols(member, +1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.awaiting_join = awaiting_join

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> ClassicGroupMember:
        """Give a static member a new member id; the old id's parked requests are fenced."""
        old = self.members.pop(old_member_id)
        if old.awaiting_join is not None:
            old.awaiting_join.complete(JoinResult(ErrorCode.fenced_instance_id, member_id=old_member_id))
            old.awaiting_join = None
        if old.awaiting_sync is not None:
            old.awaiting_sync.complete(SyncResult(ErrorCode.fenced_instance_id))
            old.awaiting_sync = None
        new = ClassicGroupMember(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return new

    def _count_protocols(self, member: ClassicGroupMember, delta: int) -> None:
        for name in member.protocol_names():
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + delta

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join() == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else pick a member that did; False if none did."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- protocols -------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n and n > 0}

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(name, 0) == n for name in names
        )

    def select_protocol(self) -> str:
        if not self.members:
            raise ValueError("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Most votes wins; ties go to the protocol voted for first (deterministic).
        return max(votes, key=lambda name: votes[name])

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Topics the consumer-protocol members subscribe to, or None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_protocol()

    def current_members_for_leader(self) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
            for m in self.members.values()
        )

    def assignments(self) -> dict[str, bytes]:
        return {mid: m.assignment for mid, m in self.members.items()}


_VERSION = struct.Struct(">h")


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription (version prefix, then the v0 prefix fields)."""
    if len(metadata) < _VERSION.size:
        return None
    try:
        sub, _ = framing.decode_entity(ConsumerProtocolSubscription, metadata, _VERSION.size)
    except Exception:
        return None
    return list(sub.topics)
