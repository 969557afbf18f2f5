"""Consumer groups of the new protocol (KIP-848): ConsumerGroupHeartbeat membership, member
epochs, the group and target assignment epochs, server-side assignment, reconciliation
with revocation before reassignment, static membership, session and rebalance timeouts,
ConsumerGroupDescribe, and the member-epoch checks of OffsetCommit/OffsetFetch/TxnOffsetCommit.

Semantics follow Kafka 4.x's group coordinator (GroupMetadataManager.consumerGroupHeartbeat,
modern/consumer/ConsumerGroup, ConsumerGroupMember, CurrentAssignmentBuilder). The model is
pure: no I/O, time only from the injected Clock; every timer is explicit state
(`ConsumerGroupMember.session` / `.rebalance`), fired by `tick` or before an operation.

Heartbeat, step by step (Kafka's order):

1. request validation (`request_error`, also run by the handler before placement) ->
   INVALID_REQUEST / UNSUPPORTED_ASSIGNOR / INVALID_REGULAR_EXPRESSION;
2. epoch -1 / -2: leave (`_leave`), the static member's -2 only marks it as leaving
   temporarily: it keeps its partitions until its session expires or its instance id
   rejoins with a new member id;
3. the group: epoch 0 creates it; an empty classic group of that id is replaced (its
   offsets stay); another group type or a non-empty classic group -> GROUP_ID_NOT_FOUND
   (online upgrade is not modelled, docs/consumer-groups.md);
4. a new member of a full group -> GROUP_MAX_SIZE_REACHED (group.consumer.max.size);
5. the member: unknown with epoch != 0 -> UNKNOWN_MEMBER_ID; a static instance id held by a
   member that did not leave with -2 -> UNRELEASED_INSTANCE_ID; a static member's id that
   does not match -> FENCED_INSTANCE_ID; an epoch above the member's, or below it unless it
   is the previous epoch with owned partitions inside the assignment -> FENCED_MEMBER_EPOCH;
6. the group epoch is bumped when the member's subscription (names, regex, server assignor;
   a new member's starts empty) or the subscribed topics' metadata changed;
7. group epoch > assignment epoch -> a new target assignment (consumer_assignor), at most
   once per assignment interval (KIP-1263); meanwhile members reconcile to the last one;
8. reconciliation (`reconcile`, the table `_RECONCILE`): a partition the member must give
   up is kept "pending revocation" until a heartbeat's owned partitions no longer list it
   (state UNREVOKED_PARTITIONS, rebalance timeout armed); only then does the member move to
   the next epoch; a partition is given to its new owner only once no other member holds it
   (else UNRELEASED_PARTITIONS).

Group state (`ConsumerGroupState`) is derived as Kafka's maybeUpdateGroupState does, and each
change is checked against `VALID_PREVIOUS_STATES`.
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Protocol, Sequence

from kio.schema.errors import ErrorCode

from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.clock import Clock
from reference_impl.model.consumer_assignor import ASSIGNORS, DEFAULT_ASSIGNOR, AssignmentMember, TopicId
from reference_impl.model.group_description import GroupDescription
from reference_impl.model.seeded_bugs import SeededBugs

CONSUMER_GROUP_TYPE = "consumer"
CONSUMER_PROTOCOL_TYPE = "consumer"
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# ConsumerGroupHeartbeat v1 (KIP-1082): the client generates its member id.
CLIENT_GENERATED_MEMBER_ID_VERSION = 1
# Dynamic group configs (IncrementalAlterConfigs on the GROUP resource) overriding the broker's.
GROUP_SESSION_TIMEOUT_CONFIG = "consumer.session.timeout.ms"
GROUP_HEARTBEAT_INTERVAL_CONFIG = "consumer.heartbeat.interval.ms"
MIGRATION_POLICY_DISABLED = "disabled"  # ConsumerGroupMigrationPolicy.DISABLED's name

# topic id -> partitions
Assignment = dict[TopicId, frozenset[int]]
# (topic id, partitions) pairs as a heartbeat carries them
OwnedPartitions = tuple[tuple[TopicId, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """group.consumer.* broker settings (Kafka 4.x names and defaults)."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors, first = default
    # group.consumer.assignment.interval.ms (KIP-1263, Kafka 4.3+): a new target assignment is
    # computed at most this often; meanwhile members reconcile towards the last one. 1000 ms
    # is what Kafka 4.4.0 shows (a second member's partitions arrive ~1 s after it joins).
    assignment_interval_ms: int = 1_000

    @property
    def migration_policy(self) -> str:
        """group.consumer.migration.policy as the model follows it: only empty groups change
        protocol (no mixed groups, no online upgrade; docs/consumer-groups.md), Kafka's
        `disabled` (ConsumerGroupMigrationPolicy). Fixed, not a setting: the model has no other
        path, whereas Kafka 4.x defaults to bidirectional."""
        return MIGRATION_POLICY_DISABLED


class MemberState(enum.Enum):
    """ConsumerGroupMember's MemberState."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


# Which states a group may come from (every derived state is reachable from every live
# one; only Dead is final and only an Empty group dies, by DeleteGroups or expiration).
_LIVE = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.ASSIGNING,
                   ConsumerGroupState.RECONCILING, ConsumerGroupState.STABLE})
VALID_PREVIOUS_STATES: dict[ConsumerGroupState, frozenset[ConsumerGroupState]] = {
    **{s: _LIVE for s in _LIVE},
    ConsumerGroupState.DEAD: frozenset({ConsumerGroupState.EMPTY}),
}


class IllegalTransition(RuntimeError):
    pass


# -- requests and results ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: OwnedPartitions | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: not sent (unchanged)


@dataclass(frozen=True, slots=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Assignment
    target_assignment: Assignment


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription(GroupDescription[DescribedConsumerMember]):
    """One group of a ConsumerGroupDescribe answer."""


class TopicView(Protocol):
    topic_id: TopicId
    partitions: Sequence[object]


class TopicsView(Protocol):
    """The cluster's topics as the coordinator reads them (topics.TopicRegistry)."""

    def get(self, name: str | None) -> TopicView | None:
        """The topic of that name, or None."""

    def names(self) -> list[str]:
        """Every topic name."""


class _Error(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


# -- members and groups -------------------------------------------------------------------


@dataclass(slots=True)
class Deadline:
    at_ms: int
    epoch: int = 0  # rebalance timeout: the epoch the member must leave in time


@dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251 (Kafka 4.3+): the member epoch at which it got each partition it holds
    # (assigned or pending revocation); offset commits with an older epoch are accepted
    # for a partition held since then.
    assignment_epochs: dict[tuple[TopicId, int], int] = field(default_factory=dict)
    session: Deadline | None = None
    rebalance: Deadline | None = None

    def subscription(self) -> tuple:
        """What bumps the group epoch when it changes."""
        return (tuple(sorted(self.subscribed_topic_names)), self.subscribed_topic_regex, self.server_assignor)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch


# KAFKA-20268 (Kafka 4.3+): a new group starts at epoch 1 with an empty target assignment,
# so the first computed assignment (and the first member's epoch) is 2.
INITIAL_GROUP_EPOCH = 1


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = INITIAL_GROUP_EPOCH
    assignment_epoch: int = INITIAL_GROUP_EPOCH
    assignment_timestamp_ms: int | None = None  # when the target was last computed
    state: ConsumerGroupState = ConsumerGroupState.EMPTY
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # Subscribed topics' metadata at the last epoch bump: name -> (topic id, partitions).
    metadata: dict[str, tuple[TopicId, int]] = field(default_factory=dict)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def is_subscribed_to(self, topic: str) -> bool:
        """Does a member subscribe to the topic (its offsets then never expire)?"""
        return bool(self.members) and topic in self.metadata

    def partition_epoch(self, topic_id: TopicId, partition: int) -> int:
        """The epoch of the member holding the partition (assigned or pending revocation),
        -1 when free (Kafka's ConsumerGroup.currentPartitionEpoch)."""
        for m in self.members.values():
            if partition in m.assigned.get(topic_id, ()) or partition in m.pending_revocation.get(topic_id, ()):
                return m.member_epoch
        return -1

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members name (ties: by name), else the default."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        return min(counts, key=lambda name: (-counts[name], name))

    def update_state(self) -> None:
        """Kafka's maybeUpdateGroupState, checked against VALID_PREVIOUS_STATES."""
        if not self.members:
            new = ConsumerGroupState.EMPTY
        elif self.group_epoch > self.assignment_epoch:
            new = ConsumerGroupState.ASSIGNING
        elif any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            new = ConsumerGroupState.RECONCILING
        else:
            new = ConsumerGroupState.STABLE
        self.transition_to(new)

    def transition_to(self, target: ConsumerGroupState) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalTransition(f"group {self.group_id!r}: {self.state.value} -> {target.value}")
        self.state = target


# -- reconciliation (CurrentAssignmentBuilder) ----------------------------------------------


def _owns_any(owned: OwnedPartitions | None, partitions: Assignment) -> bool:
    """Does the member still report one of these partitions? Unknown (None) counts as yes."""
    if owned is None:
        return True
    return any(p in partitions.get(topic_id, ()) for topic_id, ps in owned for p in ps)


def _next_assignment(member: ConsumerGroupMember, epoch: int, target_epoch: int, target: Assignment,
                     partition_epoch: Callable[[TopicId, int], int], owned: OwnedPartitions | None,
                     seeded: SeededBugs) -> ConsumerGroupMember:
    """One step towards the target: revoke first, then assign what is free."""
    assigned: Assignment = {}
    revoking: Assignment = {}
    adding: Assignment = {}
    unreleased = False
    ignore_owners = seeded.has(bugs.CONSUMER_GROUP_NO_REVOCATION_BEFORE_REASSIGN)
    for topic_id in set(target) | set(member.assigned):
        want = target.get(topic_id, frozenset())
        have = member.assigned.get(topic_id, frozenset())
        keep = have & want
        free = {p for p in want - keep if ignore_owners or partition_epoch(topic_id, p) == -1}
        unreleased = unreleased or len(free) < len(want - keep)
        if keep:
            assigned[topic_id] = keep
        if have - keep:
            revoking[topic_id] = frozenset(have - keep)
        if free:
            adding[topic_id] = frozenset(free)
    if revoking and _owns_any(owned, revoking):
        return replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                       pending_revocation=revoking, **_epochs(member, epoch))
    for topic_id, partitions in adding.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return replace(member, state=state, assigned=assigned, pending_revocation={}, **_epochs(member, target_epoch))


def _epochs(member: ConsumerGroupMember, epoch: int) -> dict[str, int]:
    if epoch == member.member_epoch:
        return {"member_epoch": epoch, "previous_member_epoch": member.previous_member_epoch}
    return {"member_epoch": epoch, "previous_member_epoch": member.member_epoch}


def _from_stable(member, target_epoch, target, partition_epoch, owned, seeded):
    if member.member_epoch == target_epoch:
        return member
    return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned, seeded)


def _from_unrevoked(member, target_epoch, target, partition_epoch, owned, seeded):
    if _owns_any(owned, member.pending_revocation):
        return member  # still waiting for the member to give the partitions up
    return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned, seeded)


def _from_unreleased(member, target_epoch, target, partition_epoch, owned, seeded):
    return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned, seeded)


# The reconciliation transition table: the step taken from each member state.
_RECONCILE = {
    MemberState.STABLE: _from_stable,
    MemberState.UNREVOKED_PARTITIONS: _from_unrevoked,
    MemberState.UNRELEASED_PARTITIONS: _from_unreleased,
}


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
              partition_epoch: Callable[[TopicId, int], int], owned: OwnedPartitions | None,
              seeded: SeededBugs = bugs.NO_BUGS) -> ConsumerGroupMember:
    """The member after one heartbeat's reconciliation (a new object when it changed)."""
    if member.is_reconciled_to(target_epoch):
        return member
    updated = _RECONCILE[member.state](member, target_epoch, target, partition_epoch, owned, seeded)
    if updated is member:
        return member
    held = {(t, p) for part in (updated.assigned, updated.pending_revocation) for t, ps in part.items() for p in ps}
    updated.assignment_epochs = {tp: member.assignment_epochs.get(tp, updated.member_epoch) for tp in held}
    return updated


# -- request validation -----------------------------------------------------------------------


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


def request_error(req: HeartbeatRequest, api_version: int, assignors: Sequence[str]) -> tuple[ErrorCode, str | None] | None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (run before placement)."""
    if _blank(req.group_id) or not req.group_id:
        return ErrorCode.invalid_request, "GroupId can't be empty."
    if _blank(req.instance_id):
        return ErrorCode.invalid_request, "InstanceId can't be empty."
    if _blank(req.rack_id):
        return ErrorCode.invalid_request, "RackId can't be empty."
    if api_version >= CLIENT_GENERATED_MEMBER_ID_VERSION and not req.member_id.strip():
        return ErrorCode.invalid_request, "MemberId can't be empty."
    epoch = req.member_epoch
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not req.member_id.strip():
            return ErrorCode.invalid_request, "MemberId can't be empty."
    elif epoch == JOIN_GROUP_MEMBER_EPOCH:
        if req.rebalance_timeout_ms == -1:
            return ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request."
        if req.owned is None or req.owned:
            return ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            return ErrorCode.invalid_request, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not req.member_id.strip():
            return ErrorCode.invalid_request, "MemberId can't be empty."
        if req.instance_id is None:
            return ErrorCode.invalid_request, "InstanceId can't be null."
    else:
        return ErrorCode.invalid_request, "MemberEpoch is invalid."
    if req.server_assignor is not None and req.server_assignor not in assignors:
        return ErrorCode.unsupported_assignor, (
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: {', '.join(assignors)}.")
    if req.subscribed_topic_regex is not None:
        try:
            re.compile(req.subscribed_topic_regex)
        except re.error as exc:
            return ErrorCode.invalid_regular_expression, f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular expression: {exc}."
    return None


# -- the coordinator ----------------------------------------------------------------------------


class ConsumerGroups:
    """All consumer groups of the cluster (the group coordinator owns it; placement is the
    handlers' business). `other_group_type(group_id)` names a group of another kind holding
    the id ("classic", "share"), `drop_empty_classic(group_id)` replaces an empty classic group."""

    def __init__(
        self,
        clock: Clock,
        config: ConsumerGroupConfig,
        seeded: SeededBugs = bugs.NO_BUGS,
        *,
        other_group_type: Callable[[str], str | None] = lambda _gid: None,
        drop_empty_classic: Callable[[str], bool] = lambda _gid: False,
        group_config: Callable[[str], Mapping[str, object]] = lambda _gid: {},
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        self.clock = clock
        self.config = config
        self.seeded = seeded
        self.groups: dict[str, ConsumerGroup] = {}
        self.other_group_type = other_group_type
        self.drop_empty_classic = drop_empty_classic
        self.group_config = group_config
        self._new_id = id_factory or (lambda: str(uuid.uuid4()))

    # -- queries ----------------------------------------------------------------------

    def group(self, group_id: str) -> ConsumerGroup | None:
        self._run_due(self.clock.now_ms())
        return self.groups.get(group_id)

    def session_timeout_ms(self, group_id: str) -> int:
        return int(self.group_config(group_id).get(GROUP_SESSION_TIMEOUT_CONFIG, self.config.session_timeout_ms))

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return int(self.group_config(group_id).get(GROUP_HEARTBEAT_INTERVAL_CONFIG, self.config.heartbeat_interval_ms))

    @property
    def default_assignor(self) -> str:
        return self.config.assignors[0] if self.config.assignors else DEFAULT_ASSIGNOR

    # -- timers ------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        self._run_due(now_ms)

    def _run_due(self, now_ms: int) -> None:
        """Fire due session and rebalance timeouts in deadline order."""
        while True:
            due = [
                (d.at_ms, kind, g.group_id, m.member_id)
                for g in self.groups.values() for m in g.members.values()
                for kind, d in (("session", m.session), ("rebalance", m.rebalance))
                if d is not None and d.at_ms <= now_ms
            ]
            if not due:
                return
            at_ms, kind, group_id, member_id = min(due)
            group = self.groups[group_id]
            member = group.members[member_id]
            if kind == "session":
                member.session = None
                self._fence(group, member)
            else:
                deadline, member.rebalance = member.rebalance, None
                ignored = self.seeded.has(bugs.CONSUMER_GROUP_REBALANCE_TIMEOUT_IGNORED)
                if deadline is not None and member.member_epoch == deadline.epoch and not ignored:
                    self._fence(group, member)

    # -- heartbeat ---------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest, topics: TopicsView, api_version: int = 1) -> HeartbeatResult:
        now = self.clock.now_ms()
        self._run_due(now)
        invalid = request_error(req, api_version, self.config.assignors)
        if invalid is not None:
            return HeartbeatResult(invalid[0], invalid[1])
        try:
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(req)
            return self._heartbeat(req, topics, now)
        except _Error as exc:
            return HeartbeatResult(exc.error, exc.message)

    def _group_for(self, group_id: str, create: bool) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        other = self.other_group_type(group_id)
        if other == "share" and create and self.seeded.has(bugs.CONSUMER_GROUP_TAKES_SHARE_GROUP_ID):
            other = None
        if other is not None and not (create and other == "classic" and self.drop_empty_classic(group_id)):
            raise _Error(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if not create:
            raise _Error(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        group = ConsumerGroup(group_id)
        self.groups[group_id] = group
        return group

    def _heartbeat(self, req: HeartbeatRequest, topics: TopicsView, now: int) -> HeartbeatResult:
        joining = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        existed = req.group_id in self.groups
        group = self._group_for(req.group_id, joining)
        try:
            return self._heartbeat_in(group, req, topics, now)
        except _Error:
            if not existed and not group.members:
                del self.groups[req.group_id]  # Kafka writes no record for a failed request
            raise

    def _heartbeat_in(self, group: ConsumerGroup, req: HeartbeatRequest, topics: TopicsView, now: int) -> HeartbeatResult:
        member_id = req.member_id or self._new_id()  # v0: the coordinator names a new member
        if len(group.members) >= self.config.max_size and member_id not in group.members:
            raise _Error(ErrorCode.group_max_size_reached,
                         f"The consumer group has reached its maximum capacity of {self.config.max_size} members.")
        member, replaced = self._member_for(group, req, member_id)
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(req.subscribed_topic_names) if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(req.subscribed_topic_regex or None) if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            client_id=req.client_id,
            client_host=req.client_host,
        )
        if replaced is not None:
            self._replace_static(group, replaced, updated)
        group.members[member_id] = updated
        # A new member starts from an empty subscription: joining without topics bumps nothing.
        bump = updated.subscription() != member.subscription()
        metadata = self._subscribed_metadata(group, topics)
        if metadata != group.metadata:
            group.metadata = metadata
            bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch and self._may_assign(group, now):
            self._compute_target(group, now)
        target = group.target.get(member_id, {})
        before = updated
        updated = reconcile(updated, group.assignment_epoch, target, group.partition_epoch, req.owned, self.seeded)
        self._arm_rebalance_timeout(updated, before, now)
        updated.session = Deadline(now + self.session_timeout_ms(group.group_id))
        group.members[member_id] = updated
        group.update_state()
        # Kafka sends the assignment on a full request (a join, or a client resending every
        # field after an error) and whenever the assigned partitions changed.
        full = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH or (
            req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None and req.owned is not None)
        send = full or updated.assigned != member.assigned
        return HeartbeatResult(
            ErrorCode.none,
            member_id=member_id,
            member_epoch=updated.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(group.group_id),
            assignment=dict(updated.assigned) if send else None,
        )

    def _member_for(self, group: ConsumerGroup, req: HeartbeatRequest,
                    member_id: str) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """The member the heartbeat is about, and the static member it replaces (if any)."""
        joining = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        if req.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise _Error(ErrorCode.unknown_member_id,
                                 f"Member {member_id} is not a member of group {group.group_id}.")
                return ConsumerGroupMember(member_id), None
            self._check_epoch(member, req)
            return member, None
        existing = group.static_member(req.instance_id)
        if joining:
            if existing is None:
                return group.members.get(member_id) or ConsumerGroupMember(member_id), None
            taken = self.seeded.has(bugs.CONSUMER_GROUP_ACTIVE_INSTANCE_ID_TAKEN)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and not taken:
                raise _Error(ErrorCode.unreleased_instance_id,
                             f"Static member {member_id} with instance id {req.instance_id} cannot join the group "
                             f"because the instance id is owned by {existing.member_id} member.")
            # The new member takes the old one's place, partitions included, at epoch 0.
            return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0,
                           assignment_epochs=dict.fromkeys(existing.assignment_epochs, 0),
                           session=None, rebalance=None), existing
        if existing is None:
            raise _Error(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise _Error(ErrorCode.fenced_instance_id,
                         f"Static member {member_id} with instance id {req.instance_id} was fenced by member "
                         f"{existing.member_id}.")
        self._check_epoch(existing, req)
        return existing, None

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, req: HeartbeatRequest) -> None:
        """FENCED_MEMBER_EPOCH unless the epoch is the member's, or its previous one with owned
        partitions inside the assignment (the response with the new epoch was lost)."""
        got, have = req.member_epoch, member.member_epoch
        if got > have:
            raise _Error(ErrorCode.fenced_member_epoch,
                         f"The consumer group member has a greater member epoch ({got}) than the one known by "
                         f"the group coordinator ({have}). The member must abandon all its partitions and rejoin.")
        if got < have and (got != member.previous_member_epoch or not _subset(req.owned, member.assigned)):
            raise _Error(ErrorCode.fenced_member_epoch,
                         f"The consumer group member has a smaller member epoch ({got}) than the one known by "
                         f"the group coordinator ({have}). The member must abandon all its partitions and rejoin.")

    def _replace_static(self, group: ConsumerGroup, old: ConsumerGroupMember, new: ConsumerGroupMember) -> None:
        del group.members[old.member_id]
        group.target[new.member_id] = group.target.pop(old.member_id, {})

    def _arm_rebalance_timeout(self, updated: ConsumerGroupMember, before: ConsumerGroupMember, now: int) -> None:
        """Armed when the member starts waiting for a revocation, cancelled when it is done."""
        if updated.state is MemberState.UNREVOKED_PARTITIONS:
            if before.state is not MemberState.UNREVOKED_PARTITIONS or updated.member_epoch != before.member_epoch \
                    or updated.rebalance is None:
                updated.rebalance = Deadline(now + max(updated.rebalance_timeout_ms, 0), updated.member_epoch)
        else:
            updated.rebalance = None

    def _resolve(self, member: ConsumerGroupMember, topics: TopicsView) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            pattern = re.compile(member.subscribed_topic_regex)
            # Internal topics too: Kafka 4.4 assigns __consumer_offsets to a regex naming it
            # (franz-go's Test848RegexBrokerResolves passes on kafka-native 4.4.0).
            names.update(n for n in topics.names() if pattern.fullmatch(n))
        return names

    def _subscribed_metadata(self, group: ConsumerGroup, topics: TopicsView) -> dict[str, tuple[TopicId, int]]:
        out: dict[str, tuple[TopicId, int]] = {}
        for member in group.members.values():
            for name in self._resolve(member, topics):
                topic = topics.get(name)
                if topic is not None:
                    out[name] = (topic.topic_id, len(topic.partitions))
        return out

    def _may_assign(self, group: ConsumerGroup, now: int) -> bool:
        """KIP-1263's batching: at most one target computation per assignment interval."""
        last = group.assignment_timestamp_ms
        return last is None or now >= last + self.config.assignment_interval_ms

    def _compute_target(self, group: ConsumerGroup, now: int) -> None:
        assignor = ASSIGNORS[group.preferred_assignor(self.default_assignor)]
        by_name = group.metadata
        specs = {}
        for member_id, member in group.members.items():
            subscribed = set(member.subscribed_topic_names)
            if member.subscribed_topic_regex:
                pattern = re.compile(member.subscribed_topic_regex)
                subscribed.update(n for n in by_name if pattern.fullmatch(n))
            specs[member_id] = AssignmentMember(
                frozenset(by_name[n][0] for n in subscribed if n in by_name), group.target.get(member_id, {}))
        result = assignor(specs, {tid: count for tid, count in by_name.values()})
        group.target = {m: {t: ps for t, ps in result.get(m, {}).items() if ps} for m in group.members}
        group.assignment_epoch = group.group_epoch
        group.assignment_timestamp_ms = now

    # -- leave and fencing -------------------------------------------------------------------

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self._group_for(req.group_id, False)
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise _Error(ErrorCode.unknown_member_id,
                             f"Member {req.member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                raise _Error(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                raise _Error(ErrorCode.fenced_instance_id,
                             f"Static member {req.member_id} with instance id {req.instance_id} was fenced by "
                             f"member {member.member_id}.")
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # Leaves temporarily: keeps its partitions (and its session timer).
                member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
                member.pending_revocation = {}
                member.rebalance = None
                group.update_state()
                return HeartbeatResult(ErrorCode.none, member_id=member.member_id,
                                       member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        self._fence(group, member)
        return HeartbeatResult(ErrorCode.none, member_id=req.member_id, member_epoch=req.member_epoch)

    def _fence(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """Remove the member; the group epoch is bumped, so the next heartbeat reassigns."""
        group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        member.session = member.rebalance = None
        group.group_epoch += 1
        group.update_state()

    # -- offsets (ConsumerGroup.validateOffsetCommit / validateOffsetFetch) ---------------------

    def validate_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                               instance_id: str | None = None, *, is_transactional: bool,
                               api_version: int) -> ErrorCode | None:
        """The group-level checks: UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION (OffsetCommit below
        v9), an epoch above the member's. An older epoch is judged per partition
        (`stale_partitions`)."""
        if self._unchecked_member(group, member_id, member_epoch, instance_id, is_transactional):
            return None
        member = group.members.get(member_id)
        if member is None:
            if is_transactional and self.seeded.has(bugs.TXN_OFFSET_COMMIT_UNKNOWN_MEMBER_ACCEPTED):
                return None
            return ErrorCode.unknown_member_id
        if not is_transactional and api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch > member.member_epoch and not self._epoch_unchecked(is_transactional):
            return _stale(is_transactional)
        return None

    def stale_partitions(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                         partitions: Sequence[tuple[str, int]], instance_id: str | None = None, *,
                         is_transactional: bool) -> dict[tuple[str, int], ErrorCode]:
        """KIP-1251 (Kafka 4.3+): with an epoch older than the member's, a partition is
        accepted only if the member has held it since that epoch or earlier; the others are
        STALE_MEMBER_EPOCH (OffsetCommit) or ILLEGAL_GENERATION (TxnOffsetCommit, as Kafka's
        OffsetMetadataManager maps it). Call after `validate_offset_commit` passed."""
        if self._unchecked_member(group, member_id, member_epoch, instance_id, is_transactional):
            return {}
        member = group.members.get(member_id)
        if member is None:
            return {}  # only a seeded bug lets an unknown member pass validate_offset_commit
        if is_transactional and self.seeded.has(bugs.TXN_OFFSET_COMMIT_REVOKING_PARTITION_REFUSED):
            revoking = {(t, p): ErrorCode.illegal_generation for t, p in partitions
                        if p in member.pending_revocation.get(_topic_id(group, t), ())}
            if revoking:
                return revoking
        if member_epoch >= member.member_epoch or self._epoch_unchecked(is_transactional):
            return {}
        refused = {}
        for topic, partition in partitions:
            since = member.assignment_epochs.get((_topic_id(group, topic), partition))
            if since is None or since > member_epoch:
                refused[(topic, partition)] = _stale(is_transactional)
        return refused

    @staticmethod
    def _unchecked_member(group: ConsumerGroup, member_id: str, member_epoch: int, instance_id: str | None,
                          is_transactional: bool) -> bool:
        if member_epoch < 0 and not group.members:
            return True  # admin client or manual assignment on an empty group
        # A producer older than KIP-447 sends no group metadata (KIP-848.FENCE.003).
        return is_transactional and member_epoch < 0 and not member_id and instance_id is None

    def _epoch_unchecked(self, is_transactional: bool) -> bool:
        """The seeded bugs that skip the member-epoch check."""
        bug = bugs.TXN_OFFSET_COMMIT_MEMBER_EPOCH_UNCHECKED if is_transactional \
            else bugs.OFFSET_COMMIT_STALE_MEMBER_EPOCH_ACCEPTED
        return self.seeded.has(bug)

    @staticmethod
    def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        if member_id is None and member_epoch < 0:
            return None  # admin client or a client that does not say
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

    # -- administration -----------------------------------------------------------------------

    def describe(self, group_id: str) -> ConsumerGroupDescription:
        group = self.group(group_id)
        if group is None:
            message = (f"Group {group_id} is not a consumer group." if self.other_group_type(group_id)
                       else f"Group {group_id} not found.")
            return ConsumerGroupDescription(group_id, ErrorCode.group_id_not_found, message)
        return ConsumerGroupDescription(
            group_id,
            state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.preferred_assignor(self.default_assignor),
            members=tuple(
                DescribedConsumerMember(
                    member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                    member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names, subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=dict(m.assigned), target_assignment=dict(group.target.get(m.member_id, {})),
                )
                for m in group.members.values()
            ),
        )

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups: NON_EMPTY_GROUP unless Empty (offsets are the caller's business)."""
        group = self.group(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        group.transition_to(ConsumerGroupState.DEAD)
        del self.groups[group_id]
        return ErrorCode.none

    def drop_if_empty(self, group_id: str) -> bool:
        """An empty consumer group gives its id up (a classic JoinGroup takes it over, Kafka's
        maybeDeleteEmptyConsumerGroup); its offsets stay."""
        group = self.groups.get(group_id)
        if group is None:
            return False
        if group.members and self.seeded.has(bugs.CLASSIC_JOIN_TAKES_CONSUMER_GROUP):
            del self.groups[group_id]  # members and all: the declared migration policy is ignored
            return True
        return self.delete(group_id) == ErrorCode.none


def _topic_id(group: ConsumerGroup, topic: str) -> TopicId | None:
    return group.metadata.get(topic, (None, 0))[0]


def _stale(is_transactional: bool) -> ErrorCode:
    return ErrorCode.illegal_generation if is_transactional else ErrorCode.stale_member_epoch


def _subset(owned: OwnedPartitions | None, assigned: Mapping[TopicId, frozenset[int]]) -> bool:
    if owned is None:
        return False
    return all(p in assigned.get(topic_id, ()) for topic_id, ps in owned for p in ps)
