"""The classic group coordinator: JoinGroup/SyncGroup/Heartbeat/LeaveGroup rebalances,
committed offsets, and the group admin APIs (Describe/List/DeleteGroups).

Semantics follow Kafka 4.x's group coordinator for classic groups. The model is pure:
no I/O, time only from the injected Clock, and every timer is explicit state on the
group or member it belongs to (`ClassicGroup.join_timer`, `.sync_timer`,
`.pending_members`, `ClassicGroupMember.heartbeat`). `tick(now_ms)` fires due timers;
every operation first fires the timers of its group that are already due (as if they
had fired on time) and again afterwards (timers scheduled with zero delay).

Requests that wait (JoinGroup during a rebalance, SyncGroup of a follower) get a
`Pending` object; the model completes it when the rebalance step finishes, and the
handler waits for `pending.done`. A parked request that Kafka would never answer
(superseded by a newer request of the same member, or left behind by a removed member)
is completed with `NO_RESPONSE`.

Consumer groups of the new protocol (KIP-848) live in `self.consumer`
(consumer_group.ConsumerGroups) and share the group-id namespace and the offsets store:
the (Txn)OffsetCommit and OffsetFetch checks of a consumer group are its member epochs.
An empty group of one protocol gives its id to the first member of the other (its offsets
stay); a non-empty one is refused (docs/consumer-groups.md).

Placement (NOT_COORDINATOR) is decided by the handlers through
`ReferenceState.coordinator_for`; the model coordinates every group it is given.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from kio.schema.errors import ErrorCode

from reference_impl.model.classic_group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    ClassicGroupMember,
    Deadline,
    GroupState,
    JoinedMember,
    JoinResult,
    Pending,
    Protocol,
    SyncResult,
)
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.broker_config import BrokerConfig
from reference_impl.model.clock import Clock
from reference_impl.model.consumer_group import CONSUMER_GROUP_TYPE, CONSUMER_PROTOCOL_TYPE, ConsumerGroups
from reference_impl.model.seeded_bugs import SeededBugs
from reference_impl.model.offset_store import NO_METADATA, INVALID_OFFSET, OffsetAndMetadata, OffsetStore
from reference_impl.model.java_hash import partition_for_key

# Kafka's classicGroupNewMemberJoinTimeoutMs: a new member's parked JoinGroup expires after this.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
OFFSETS_TOPIC = "__consumer_offsets"
CLASSIC_GROUP_TYPE = "classic"
KNOWN_GROUP_TYPES = ("classic", "consumer", "share", "streams")


class _NoResponse:
    """Marker result: Kafka never answers this parked request."""

    def __repr__(self) -> str:
        return "NO_RESPONSE"


NO_RESPONSE = _NoResponse()


# -- request/result shapes ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class MemberLeaveResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode
    members: tuple[MemberLeaveResult, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    partition: int
    offset: int
    leader_epoch: int  # -1 when unknown
    metadata: str
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    error: ErrorCode
    topics: tuple[tuple[str, tuple[PartitionOffset, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedMember, ...]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC_GROUP_TYPE


def _done(result) -> Pending:
    return Pending(result)


class GroupCoordinator:
    """All classic groups and committed offsets of the cluster."""

    def __init__(
        self,
        node_ids: list[int],
        clock: Clock,
        config: BrokerConfig,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        self.node_ids = list(node_ids)
        self.clock = clock
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets = OffsetStore()
        self._seq = itertools.count()
        self._new_uuid = id_factory or (lambda: str(uuid.uuid4()))
        self._next_cleanup_ms = clock.now_ms() + self._retention_check_interval_ms
        # Seam for the transaction model: called with the group id when a group is deleted
        # (DeleteGroups or offset expiration), e.g. to drop its pending transactional offsets.
        self.group_deleted_listeners: list[Callable[[str], None]] = []
        # Transactional producers on the modelled __consumer_offsets partitions (KIP-447):
        # (offsets partition, producer id) -> the producer's epoch there, as a partition's
        # producer state keeps it (TxnOffsetCommit appends and transaction markers set it).
        self._txn_producer_epochs: dict[tuple[int, int], int] = {}
        # Group types kept elsewhere (share groups): group id -> "share", or None.
        self.other_group_type: Callable[[str], str | None] = lambda _group_id: None
        self.consumer = ConsumerGroups(
            clock, config.consumer_group, config.seeded_bugs,
            other_group_type=self._non_consumer_type,
            drop_empty_classic=self._drop_empty_classic,
            id_factory=id_factory,
        )

    # -- group types (one namespace) -------------------------------------------------

    def group_type(self, group_id: str) -> str | None:
        """"classic", "consumer" or None for the groups this coordinator keeps."""
        if group_id in self.groups:
            return CLASSIC_GROUP_TYPE
        if self.consumer.group(group_id) is not None:
            return CONSUMER_GROUP_TYPE
        return None

    def _non_consumer_type(self, group_id: str) -> str | None:
        return CLASSIC_GROUP_TYPE if group_id in self.groups else self.other_group_type(group_id)

    def _drop_empty_classic(self, group_id: str) -> bool:
        """A consumer-protocol member takes over an empty classic group's id (Kafka's
        maybeDeleteEmptyClassicGroup): the group record goes, its offsets stay."""
        group = self.groups.get(group_id)
        if group is None or not group.is_in(GroupState.EMPTY):
            return False
        del self.groups[group_id]
        group.transition_to(GroupState.DEAD, self.clock.now_ms())
        return True

    # -- configuration -------------------------------------------------------------

    @property
    def seeded_bugs(self) -> SeededBugs:
        """Deliberate bugs of a reference:bug=NAME broker."""
        return self.config.seeded_bugs

    @property
    def _initial_delay_ms(self) -> int:
        return self.config.group_initial_rebalance_delay_ms

    @property
    def _retention_ms(self) -> int:
        return self.config.offsets_retention_minutes * 60_000

    @property
    def _retention_check_interval_ms(self) -> int:
        return self.config.offsets_retention_check_interval_ms

    @property
    def _metadata_max_bytes(self) -> int:
        return self.config.offset_metadata_max_bytes

    @property
    def _group_max_size(self) -> int:
        return self.config.group_max_size

    @property
    def offsets_topic_num_partitions(self) -> int:
        """offsets.topic.num.partitions: one setting for the group and transaction
        coordinators, which must agree on a group's __consumer_offsets partition."""
        return self.config.transaction.offsets_topic_num_partitions

    def offsets_partition_for(self, group_id: str) -> int:
        """The __consumer_offsets partition of a group: abs(Java hashCode) % partitions."""
        return partition_for_key(group_id, self.offsets_topic_num_partitions)

    # -- queries -------------------------------------------------------------------

    def group(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    # -- timers --------------------------------------------------------------------

    def _deadline(self, now: int, delay_ms: int) -> Deadline:
        return Deadline(now + max(int(delay_ms), 0), next(self._seq))

    def _schedule_heartbeat(self, member: ClassicGroupMember, now: int, timeout_ms: int | None = None) -> None:
        member.heartbeat = self._deadline(now, member.session_timeout_ms if timeout_ms is None else timeout_ms)

    def _schedule_join(self, group: ClassicGroup, now: int, delay_ms: int, kind: str, args: tuple[int, int] = (0, 0)) -> None:
        group.join_timer = self._deadline(now, delay_ms)
        group.join_timer_kind = kind
        group.join_timer_args = args

    def _schedule_sync(self, group: ClassicGroup, now: int) -> None:
        group.sync_timer = self._deadline(now, group.rebalance_timeout_ms())
        group.sync_timer_generation = group.generation_id

    def _next_due(self, group: ClassicGroup, now: int):
        best = None

        def consider(deadline: Deadline | None, action) -> None:
            nonlocal best
            if deadline is not None and deadline.at_ms <= now:
                key = (deadline.at_ms, deadline.seq)
                if best is None or key < best[0]:
                    best = (key, action)

        consider(group.join_timer, ("join",))
        consider(group.sync_timer, ("sync",))
        for member in group.members.values():
            consider(member.heartbeat, ("heartbeat", member.member_id))
        for member_id, deadline in group.pending_members.items():
            consider(deadline, ("pending", member_id))
        return best

    def _run_due(self, group: ClassicGroup, now: int) -> None:
        """Fire this group's due timers in deadline order, each at its own deadline."""
        for _ in range(100_000):
            due = self._next_due(group, now)
            if due is None:
                return
            (at_ms, _seq), action = due
            kind = action[0]
            if kind == "join":
                timer_kind, args = group.join_timer_kind, group.join_timer_args
                group.join_timer = None
                if timer_kind == "initial":
                    self._try_complete_initial_rebalance(group, at_ms, *args)
                else:
                    self._complete_join(group, at_ms)
            elif kind == "sync":
                generation = group.sync_timer_generation
                group.sync_timer = None
                self._expire_pending_sync(group, at_ms, generation)
            elif kind == "heartbeat":
                member = group.members.get(action[1])
                if member is not None:
                    member.heartbeat = None
                self._expire_heartbeat(group, action[1], at_ms)
            else:  # session timeout of a member that was told MEMBER_ID_REQUIRED
                self._expire_pending_member(group, action[1], at_ms)
        raise RuntimeError(f"group {group.group_id!r}: timers keep firing")

    def tick(self, now_ms: int) -> None:
        """Fire every due timer; run offset expiration every retention check interval."""
        for group in list(self.groups.values()):
            self._run_due(group, now_ms)
        self.consumer.tick(now_ms)
        if now_ms >= self._next_cleanup_ms:
            self._next_cleanup_ms = now_ms + self._retention_check_interval_ms
            self.cleanup_group_metadata(now_ms)

    def _begin(self, group_id: str) -> tuple[ClassicGroup | None, int]:
        now = self.clock.now_ms()
        group = self.groups.get(group_id)
        if group is not None:
            self._run_due(group, now)
            group = self.groups.get(group_id)
        return group, now

    # -- membership checks (shared with TxnOffsetCommit, KIP-447) --------------------

    @staticmethod
    def validate_member(group: ClassicGroup, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID as Kafka's ClassicGroup.validateMember."""
        if group_instance_id is not None:
            existing = group.static_member_id(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        if not group.has_member(member_id):
            return ErrorCode.unknown_member_id
        return None

    def validate_offset_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        *,
        is_transactional: bool = False,
        api_version: int = 0,
    ) -> ErrorCode | None:
        """Group-level checks of an (Txn)OffsetCommit; None when offsets may be written.

        A missing group is created as a simple (protocol-less, Empty) group when the
        generation is negative, as Kafka does for admin and manually assigned consumers.
        """
        if self.other_group_type(group_id) is not None:
            return ErrorCode.group_id_not_found  # a share group's id (ShareGroup.validateOffsetCommit)
        consumer_group = self.consumer.group(group_id)
        if consumer_group is not None:
            return self.consumer.validate_offset_commit(
                consumer_group, member_id, generation_id, group_instance_id,
                is_transactional=is_transactional, api_version=api_version)
        group, now = self._begin(group_id)
        if group is None:
            if generation_id < 0:
                group = self._create_group(group_id, now)
            elif not is_transactional and api_version >= 9:
                return ErrorCode.group_id_not_found
            else:
                return ErrorCode.illegal_generation
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return None
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self.validate_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            stale_ok = is_transactional and self.seeded_bugs.has(bugs.TXN_OFFSET_STALE_GENERATION_ACCEPTED)
            if generation_id != group.generation_id and not stale_ok:
                return ErrorCode.illegal_generation
        elif not is_transactional and not group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        if not is_transactional and group.is_in(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return None

    def validate_txn_offset_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        """TxnOffsetCommit's group checks (KIP-447 generation/member/instance fencing)."""
        return self.validate_offset_commit(
            group_id, generation_id, member_id, group_instance_id, is_transactional=True
        )

    def _stale_partitions(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                          entries: Sequence[OffsetCommitEntry], *,
                          is_transactional: bool) -> dict[tuple[str, int], ErrorCode]:
        """Per-partition epoch refusals of a consumer group (KIP-1251); none for classic groups."""
        consumer_group = self.consumer.group(group_id)
        if consumer_group is None:
            return {}
        return self.consumer.stale_partitions(
            consumer_group, member_id, generation_id, [(e.topic, e.partition) for e in entries], group_instance_id,
            is_transactional=is_transactional)

    def _create_group(self, group_id: str, now: int) -> ClassicGroup:
        group = ClassicGroup(group_id, state_timestamp_ms=now)
        self.groups[group_id] = group
        return group

    # -- JoinGroup -----------------------------------------------------------------

    def join_group(
        self,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols: Sequence[Protocol] | Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        *,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        api_version: int = 9,
        reason: str | None = None,
    ) -> Pending[JoinResult]:
        protocols = tuple(p if isinstance(p, Protocol) else Protocol(p[0], bytes(p[1])) for p in protocols)
        if not group_id:
            return _done(JoinResult(ErrorCode.invalid_group_id, member_id=member_id))
        if not (
            self.config.group_min_session_timeout_ms <= session_timeout_ms <= self.config.group_max_session_timeout_ms
        ):
            return _done(JoinResult(ErrorCode.invalid_session_timeout, member_id=member_id))
        if self.consumer.group(group_id) is not None and not self.consumer.drop_if_empty(group_id):
            # Kafka 4.x lets classic members into a consumer group (mixed groups); the
            # reference does not model them and refuses, as Kafka with group.consumer.migration.policy
            # disabled does (ConsumerGroupConfig.migration_policy, docs/consumer-groups.md).
            return _done(JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id))

        group, now = self._begin(group_id)
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        if group is None:
            if not is_unknown:
                return _done(JoinResult(ErrorCode.unknown_member_id, member_id=member_id))
            group = self._create_group(group_id, now)

        pending: Pending[JoinResult] = Pending()
        request = _JoinRequest(
            member_id, group_instance_id, protocol_type, protocols, session_timeout_ms,
            rebalance_timeout_ms, client_id, client_host, api_version,
        )
        if not self._accept_joining_member(group, member_id):
            self._drop_member(group, member_id)
            pending.complete(JoinResult(ErrorCode.group_max_size_reached))
        elif is_unknown:
            self._join_new_member(group, request, pending, now)
        else:
            self._join_existing_member(group, request, pending, now)
        self._run_due(group, now)
        return pending

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self._group_max_size
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return (group.has_member(member_id) and group.member(member_id).is_awaiting_join) or (
                group.num_awaiting_join() < limit
            )
        return group.has_member(member_id) or len(group.members) < limit

    def _join_new_member(self, group: ClassicGroup, req: "_JoinRequest", pending: Pending, now: int) -> None:
        if group.is_in(GroupState.DEAD):
            pending.complete(JoinResult(ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(req.protocol_type, [p.name for p in req.protocols]):
            pending.complete(JoinResult(ErrorCode.inconsistent_group_protocol))
            return
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        new_member_id = f"{prefix}-{self._new_uuid()}"
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is not None:
                self._update_static_member_and_rebalance(group, req, existing, new_member_id, pending, now)
            else:
                self._add_member_and_rebalance(group, req, new_member_id, pending, now)
        elif req.api_version >= 4:
            # KIP-394: the member must come back with the id it is given.
            group.pending_members[new_member_id] = self._deadline(now, req.session_timeout_ms)
            pending.complete(JoinResult(ErrorCode.member_id_required, member_id=new_member_id))
        else:
            self._add_member_and_rebalance(group, req, new_member_id, pending, now)

    def _join_existing_member(self, group: ClassicGroup, req: "_JoinRequest", pending: Pending, now: int) -> None:
        member_id = req.member_id
        if group.is_in(GroupState.DEAD):
            pending.complete(JoinResult(ErrorCode.coordinator_not_available, member_id=member_id))
            return
        if not group.supports_protocols(req.protocol_type, [p.name for p in req.protocols]):
            pending.complete(JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id))
            return
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:
                # A pending member is always dynamic; Kafka fails this request internally.
                pending.complete(JoinResult(ErrorCode.unknown_server_error))
                return
            self._add_member_and_rebalance(group, req, member_id, pending, now)
            return
        error = self.validate_member(group, member_id, req.group_instance_id)
        if error is not None:
            pending.complete(JoinResult(error, member_id=member_id))
            return
        member = group.member(member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, pending, now)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # The member lost the JoinGroup response of this generation: resend it.
                pending.complete(self._join_response(group, member_id, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, req, pending, now)
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                # A rejoining leader forces a rebalance (e.g. topic metadata changed).
                self._update_member_and_rebalance(group, member, req, pending, now)
            else:
                pending.complete(self._join_response(group, member_id, with_members=False))
        else:
            pending.complete(JoinResult(ErrorCode.unknown_member_id, member_id=member_id))

    def _join_response(self, group: ClassicGroup, member_id: str, *, with_members: bool,
                       leader: str | None = None, skip_assignment: bool = False) -> JoinResult:
        return JoinResult(
            ErrorCode.none,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=(group.leader_id if leader is None else leader) or "",
            skip_assignment=skip_assignment,
            members=group.current_members_for_leader() if with_members else (),
        )

    def _add_member_and_rebalance(self, group: ClassicGroup, req: "_JoinRequest", member_id: str,
                                  pending: Pending, now: int) -> None:
        member = ClassicGroupMember(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            awaiting_join=pending,
            is_new=True,
        )
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True  # lets the initial rebalance delay extend
        group.add(member)
        # A new member cannot heartbeat while its JoinGroup is parked: bound the wait instead.
        self._schedule_heartbeat(member, now, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance_or_complete_join(group, now)

    def _update_member_and_rebalance(self, group: ClassicGroup, member: ClassicGroupMember,
                                     req: "_JoinRequest", pending: Pending, now: int) -> None:
        if member.awaiting_join is not None and member.awaiting_join is not pending:
            member.awaiting_join.complete(NO_RESPONSE)  # superseded; Kafka never answers it
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, pending)
        self._maybe_prepare_rebalance_or_complete_join(group, now)

    def _update_static_member_and_rebalance(self, group: ClassicGroup, req: "_JoinRequest", old_member_id: str,
                                            new_member_id: str, pending: Pending, now: int) -> None:
        current_leader = group.leader_id
        member = group.replace_static_member(req.group_instance_id, old_member_id, new_member_id)
        self._schedule_heartbeat(member, now)
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, pending)
        if group.is_in(GroupState.STABLE):
            if (group.protocol_name or "") == group.select_protocol():
                # Same selected protocol: no rebalance, the member keeps its assignment.
                if req.api_version >= 9:
                    is_leader = group.is_leader(new_member_id)
                    result = self._join_response(group, new_member_id, with_members=is_leader,
                                                 skip_assignment=is_leader)
                else:
                    result = self._join_response(group, new_member_id, with_members=False,
                                                 leader=current_leader or "")
                member.awaiting_join = None
                pending.complete(result)
            else:
                self._maybe_prepare_rebalance_or_complete_join(group, now)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may already hold the old member id: assign again.
            self._prepare_rebalance(group, now)
        elif group.is_in(GroupState.EMPTY, GroupState.DEAD):
            member.awaiting_join = None
            pending.complete(JoinResult(ErrorCode.unknown_server_error))
        else:
            self._maybe_complete_join_phase(group, now)

    # -- rebalance steps -------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now)
        else:
            self._maybe_complete_join_phase(group, now)

    def _maybe_complete_join_phase(self, group: ClassicGroup, now: int) -> None:
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and group.previous_state is not GroupState.EMPTY  # the initial rebalance waits for its timer
            and group.has_all_members_joined()
        ):
            self._complete_join(group, now)

    def _prepare_rebalance(self, group: ClassicGroup, now: int) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
            self._propagate_assignment(group, ErrorCode.rebalance_in_progress, now)
        group.pending_sync_members.clear()
        group.sync_timer = None
        initial = group.is_in(GroupState.EMPTY)
        if initial:
            delay = self._initial_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_join(group, now, delay, "initial", (delay, remaining))
        group.transition_to(GroupState.PREPARING_REBALANCE, now)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group, now)
            else:
                self._schedule_join(group, now, group.rebalance_timeout_ms(), "complete")

    def _try_complete_initial_rebalance(self, group: ClassicGroup, now: int, delay_ms: int, remaining_ms: int) -> None:
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self._initial_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self._schedule_join(group, now, new_delay, "initial", (new_delay, new_remaining))
        else:
            self._complete_join(group, now)

    def _complete_join(self, group: ClassicGroup, now: int) -> None:
        group.join_timer = None
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self._drop_member(group, member.member_id)
        if group.is_in(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout for session expiries (at least
            # 1 ms, so a zero rebalance timeout cannot spin at one instant).
            self._schedule_join(group, now, max(group.rebalance_timeout_ms(), 1), "complete")
            return
        self._init_next_generation(group, now)
        if group.is_in(GroupState.EMPTY):
            return
        for member in group.members.values():
            result = self._join_response(group, member.member_id, with_members=group.is_leader(member.member_id))
            if member.awaiting_join is not None:
                member.awaiting_join.complete(result)
                member.awaiting_join = None
            self._schedule_heartbeat(member, now)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_sync(group, now)

    def _init_next_generation(self, group: ClassicGroup, now: int) -> None:
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.subscribed_topics = group.compute_subscribed_topics()
            group.transition_to(GroupState.COMPLETING_REBALANCE, now)
        else:
            group.protocol_name = None
            group.subscribed_topics = group.compute_subscribed_topics()
            group.transition_to(GroupState.EMPTY, now)
        group.pending_sync_members.clear()

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode, now: int) -> None:
        ok = error == ErrorCode.none
        for member in group.members.values():
            if member.awaiting_sync is not None:
                member.awaiting_sync.complete(SyncResult(
                    error,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                    assignment=member.assignment,
                ))
                member.awaiting_sync = None
                self._schedule_heartbeat(member, now)

    def _expire_pending_sync(self, group: ClassicGroup, now: int, generation: int) -> None:
        if generation != group.generation_id:
            return
        if group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync_members:
            for member_id in list(group.pending_sync_members):
                self._drop_member(group, member_id)
            self._prepare_rebalance(group, now)

    def _expire_pending_member(self, group: ClassicGroup, member_id: str, now: int) -> None:
        group.pending_members.pop(member_id, None)
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group, now)

    def _expire_heartbeat(self, group: ClassicGroup, member_id: str, now: int) -> None:
        if group.is_in(GroupState.DEAD):
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        self._remove_member_and_update_group(group, member, now)

    def _remove_member_and_update_group(self, group: ClassicGroup, member: ClassicGroupMember, now: int) -> None:
        if member.awaiting_join is not None:
            member.awaiting_join.complete(JoinResult(ErrorCode.unknown_member_id))
            member.awaiting_join = None
        self._drop_member(group, member.member_id)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, now)
        elif group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group, now)

    def _drop_member(self, group: ClassicGroup, member_id: str) -> None:
        """Remove a member (or pending member); requests it still has parked get no answer."""
        member = group.remove(member_id)
        if member is not None:
            member.heartbeat = None
            for parked in (member.awaiting_join, member.awaiting_sync):
                if parked is not None:
                    parked.complete(NO_RESPONSE)
            member.awaiting_join = member.awaiting_sync = None

    # -- SyncGroup -------------------------------------------------------------------

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Iterable[tuple[str, bytes]] = (),
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Pending[SyncResult]:
        if not group_id:
            return _done(SyncResult(ErrorCode.invalid_group_id))
        group, now = self._begin(group_id)
        if group is None or group.is_in(GroupState.EMPTY):
            return _done(SyncResult(ErrorCode.unknown_member_id))
        pending: Pending[SyncResult] = Pending()
        error = self._validate_sync(group, generation_id, member_id, group_instance_id, protocol_type, protocol_name)
        if error is not None:
            pending.complete(SyncResult(error))
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            pending.complete(SyncResult(ErrorCode.rebalance_in_progress))
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            member = group.member(member_id)
            if member.awaiting_sync is not None and member.awaiting_sync is not pending:
                member.awaiting_sync.complete(NO_RESPONSE)  # superseded
            member.awaiting_sync = pending
            group.pending_sync_members.discard(member_id)
            if group.is_leader(member_id):
                assignment = {mid: bytes(data) for mid, data in assignments}
                for mid in group.members:
                    assignment.setdefault(mid, b"")
                for mid, m in group.members.items():
                    m.assignment = assignment[mid]
                self._propagate_assignment(group, ErrorCode.none, now)
                group.transition_to(GroupState.STABLE, now)
        elif group.is_in(GroupState.STABLE):
            group.pending_sync_members.discard(member_id)
            member = group.member(member_id)
            pending.complete(SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
        self._run_due(group, now)
        return pending

    def _validate_sync(self, group: ClassicGroup, generation_id: int, member_id: str,
                       group_instance_id: str | None, protocol_type: str | None,
                       protocol_name: str | None) -> ErrorCode | None:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self.validate_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(protocol_name, group.protocol_name):
            return ErrorCode.inconsistent_group_protocol
        return None

    # -- Heartbeat -------------------------------------------------------------------

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None
    ) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        group, now = self._begin(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self.validate_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self._schedule_heartbeat(group.member(member_id), now)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- LeaveGroup ------------------------------------------------------------------

    def leave_group(self, group_id: str, members: Sequence[MemberIdentity]) -> LeaveResult:
        if not group_id:
            return LeaveResult(ErrorCode.invalid_group_id)
        group, now = self._begin(group_id)
        if group is None:
            return LeaveResult(ErrorCode.none, tuple(
                MemberLeaveResult(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id) for m in members
            ))
        if group.is_in(GroupState.DEAD):
            return LeaveResult(ErrorCode.coordinator_not_available)
        results: list[MemberLeaveResult] = []
        for identity in members:
            error = ErrorCode.none
            if identity.member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal by group.instance.id (KIP-345).
                target = (
                    group.static_member_id(identity.group_instance_id)
                    if identity.group_instance_id is not None else None
                )
                if target is not None:
                    self._remove_current_member(group, target)
                else:
                    error = ErrorCode.unknown_member_id
            elif group.is_pending_member(identity.member_id):
                group.remove(identity.member_id)
            else:
                error = self.validate_member(group, identity.member_id, identity.group_instance_id) or ErrorCode.none
                if error == ErrorCode.none:
                    self._remove_current_member(group, identity.member_id)
            results.append(MemberLeaveResult(identity.member_id, identity.group_instance_id, error))
        if any(r.error == ErrorCode.none for r in results):
            if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, now)
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group, now)
        self._run_due(group, now)
        return LeaveResult(ErrorCode.none, tuple(results))

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.member(member_id)
        if member.awaiting_join is not None:
            member.awaiting_join.complete(JoinResult(ErrorCode.unknown_member_id))
            member.awaiting_join = None
        self._drop_member(group, member_id)

    # -- offsets ---------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        entries: Sequence[OffsetCommitEntry],
        *,
        group_instance_id: str | None = None,
        retention_time_ms: int = -1,
        api_version: int = 9,
    ) -> list[ErrorCode]:
        """OffsetCommit for partitions already checked against the topic registry.

        Returns one error per entry, in order (a group-level error is repeated)."""
        error = self.validate_offset_commit(
            group_id, generation_id, member_id, group_instance_id, api_version=api_version
        )
        if error is not None:
            return [error] * len(entries)
        group, now = self._begin(group_id)
        if group is not None and group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE) \
                and group.has_member(member_id):
            # A classic member's commit also keeps its session alive.
            self._schedule_heartbeat(group.member(member_id), now)
        expire = None if retention_time_ms == -1 else now + retention_time_ms
        stale = self._stale_partitions(group_id, generation_id, member_id, group_instance_id, entries,
                                       is_transactional=False)
        errors: list[ErrorCode] = []
        for entry in entries:
            if (entry.topic, entry.partition) in stale:
                errors.append(stale[(entry.topic, entry.partition)])
                continue
            if entry.metadata is not None and len(entry.metadata) > self._metadata_max_bytes:
                errors.append(ErrorCode.offset_metadata_too_large)
                continue
            self.offsets.put(group_id, entry.topic, entry.partition, OffsetAndMetadata(
                committed_offset=entry.offset,
                leader_epoch=entry.leader_epoch if entry.leader_epoch >= 0 else None,
                metadata=NO_METADATA if entry.metadata is None else entry.metadata,
                commit_timestamp_ms=now,
                expire_timestamp_ms=expire,
            ))
            errors.append(ErrorCode.none)
        return errors

    def store_offset(self, group_id: str, topic: str, partition: int, value: OffsetAndMetadata) -> None:
        """Write a committed offset directly (e.g. a transactional offset whose commit completed)."""
        if group_id not in self.groups:
            self._create_group(group_id, self.clock.now_ms())
        self.offsets.put(group_id, topic, partition, value)

    def fetch_offsets(
        self,
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]] | None,
        *,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> OffsetFetchResult:
        """OffsetFetch for one group; `topics=None` asks for every committed partition.
        A consumer group checks the member id and epoch of v9+ (UNKNOWN_MEMBER_ID,
        STALE_MEMBER_EPOCH); a classic group ignores them, as Kafka's ClassicGroup does."""
        consumer_group = self.consumer.group(group_id)
        if consumer_group is not None:
            error = self.consumer.validate_offset_fetch(consumer_group, member_id, member_epoch)
            if error is not None:
                return OffsetFetchResult(error)
        group, _now = self._begin(group_id)
        exists = consumer_group is not None or (group is not None and not group.is_in(GroupState.DEAD))
        require_stable = require_stable and not self.seeded_bugs.has(bugs.REQUIRE_STABLE_IGNORED)
        if consumer_group is not None and member_id:
            require_stable = require_stable and not self.seeded_bugs.has(bugs.MEMBER_OFFSET_FETCH_IGNORES_REQUIRE_STABLE)
        missing = 0 if self.seeded_bugs.has(bugs.OFFSET_FETCH_MISSING_IS_ZERO) else INVALID_OFFSET

        def unstable(partition: int) -> PartitionOffset:
            return PartitionOffset(partition, INVALID_OFFSET, -1, NO_METADATA, ErrorCode.unstable_offset_commit)

        def committed(value: OffsetAndMetadata, partition: int) -> PartitionOffset:
            epoch = -1 if value.leader_epoch is None else value.leader_epoch
            return PartitionOffset(partition, value.committed_offset, epoch, value.metadata)

        out: list[tuple[str, tuple[PartitionOffset, ...]]] = []
        if topics is None:
            if not exists:
                return OffsetFetchResult(ErrorCode.none, ())
            for topic, partitions in self.offsets.group_offsets(group_id).items():
                out.append((topic, tuple(
                    unstable(p) if require_stable and self.offsets.has_pending(group_id, topic, p) else committed(v, p)
                    for p, v in partitions.items()
                )))
            return OffsetFetchResult(ErrorCode.none, tuple(out))
        for topic, partitions in topics:
            rows = []
            for p in partitions:
                value = self.offsets.get(group_id, topic, p) if exists else None
                if require_stable and self.offsets.has_pending(group_id, topic, p):
                    rows.append(unstable(p))
                elif value is None:
                    rows.append(PartitionOffset(p, missing, -1, NO_METADATA))
                else:
                    rows.append(committed(value, p))
            out.append((topic, tuple(rows)))
        return OffsetFetchResult(ErrorCode.none, tuple(out))

    # -- transactional offsets (KIP-447) ----------------------------------------------

    def txn_offset_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[OffsetCommitEntry],
        api_version: int = 5,
    ) -> list[ErrorCode]:
        """TxnOffsetCommit for partitions already checked against the topic registry.

        The offsets are stored pending under (group, producer id) until the transaction's
        marker (`complete_transactional_offsets`). Returns one error per entry, in order:
        a group-level error (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
        COORDINATOR_NOT_AVAILABLE) or INVALID_PRODUCER_EPOCH is repeated for every entry.
        Unlike OffsetCommit, the group state (CompletingRebalance) is not enforced and no
        member session is extended. `api_version` is accepted for symmetry; the fencing
        fields simply carry their defaults below v3.
        """
        del api_version  # same model behaviour for every version (see docstring)
        error = self.validate_txn_offset_commit(group_id, generation_id, member_id, group_instance_id)
        if error is not None:
            return [error] * len(offsets)
        now = self.clock.now_ms()
        stale = self._stale_partitions(group_id, generation_id, member_id, group_instance_id, offsets,
                                       is_transactional=True)
        errors = [
            stale.get((entry.topic, entry.partition))
            or (ErrorCode.offset_metadata_too_large
                if entry.metadata is not None and len(entry.metadata) > self._metadata_max_bytes
                else ErrorCode.none)
            for entry in offsets
        ]
        if ErrorCode.none not in errors:
            return errors  # nothing to append: Kafka writes no record, checks no epoch
        key = (self.offsets_partition_for(group_id), int(producer_id))
        current = self._txn_producer_epochs.get(key)
        stale_epoch_ok = self.seeded_bugs.has(bugs.TXN_OFFSET_STALE_PRODUCER_EPOCH_ACCEPTED)
        if current is not None and int(producer_epoch) < current and not stale_epoch_ok:
            # The append to the offsets partition fails on the producer's older epoch.
            return [ErrorCode.invalid_producer_epoch] * len(offsets)
        self._txn_producer_epochs[key] = int(producer_epoch)
        for entry, err in zip(offsets, errors):
            if err != ErrorCode.none:
                continue
            value = OffsetAndMetadata(
                committed_offset=entry.offset,
                leader_epoch=entry.leader_epoch if entry.leader_epoch >= 0 else None,
                metadata=NO_METADATA if entry.metadata is None else entry.metadata,
                commit_timestamp_ms=now,
            )
            self.offsets.put_pending(group_id, producer_id, entry.topic, entry.partition, value)
            if self.seeded_bugs.has(bugs.TXN_OFFSETS_VISIBLE_BEFORE_COMMIT):
                self.offsets.put(group_id, entry.topic, entry.partition, value)
        return errors

    def complete_transactional_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> list[tuple[str, int]]:
        """The transaction marker of `producer_id` reached the group's offsets partition.

        Commit materialises the producer's pending offsets of the group (a plain commit of
        the same partition written after the TxnOffsetCommit wins, as in Kafka); abort drops
        them. The marker's epoch becomes the producer's epoch on the offsets partition.
        Without pending offsets this is a no-op apart from the epoch. Returns the
        (topic, partition) pairs whose committed offset changed.
        """
        self._note_marker_epoch(self.offsets_partition_for(group_id), producer_id, producer_epoch)
        # As Kafka's replayEndTransactionMarker, the group is not (re)created here: if the
        # group was removed by the expiration job meanwhile (it only counts committed
        # offsets), the materialised offsets stay invisible to OffsetFetch until the group
        # exists again.
        if not committed and self.seeded_bugs.has(bugs.TXN_OFFSET_ABORT_DROPS_OTHER_PRODUCERS):
            for other in self.offsets.open_transactions(group_id) - {int(producer_id)}:
                self.offsets.complete_transaction(group_id, other, committed=False)  # the seeded bug
        materialised = self.offsets.complete_transaction(group_id, producer_id, committed)
        return [(topic, partition) for topic, partition, _value in materialised]

    def complete_partition_transaction(
        self, offsets_partition: int, producer_id: int, producer_epoch: int, committed: bool
    ) -> list[tuple[str, str, int]]:
        """A marker written on one __consumer_offsets partition: completes the producer's
        open transaction in every group placed there (what Kafka's marker does).
        Returns (group, topic, partition) for each materialised offset."""
        self._note_marker_epoch(offsets_partition, producer_id, producer_epoch)
        out = []
        for group_id in self.offsets.groups_with_open_transactions():
            if self.offsets_partition_for(group_id) != offsets_partition:
                continue
            if int(producer_id) not in self.offsets.open_transactions(group_id):
                continue
            for topic, partition in self.complete_transactional_offsets(group_id, producer_id, producer_epoch, committed):
                out.append((group_id, topic, partition))
        return out

    def _note_marker_epoch(self, offsets_partition: int, producer_id: int, producer_epoch: int) -> None:
        key = (int(offsets_partition), int(producer_id))
        current = self._txn_producer_epochs.get(key)
        if current is None or int(producer_epoch) > current:
            self._txn_producer_epochs[key] = int(producer_epoch)

    def has_ongoing_transaction(self, group_id: str, producer_id: int, producer_epoch: int) -> bool:
        """Has this producer (same epoch) already written transactional offsets to the
        group's offsets partition in its open transaction? Kafka then skips the
        transaction verification of a further TxnOffsetCommit."""
        partition = self.offsets_partition_for(group_id)
        if self._txn_producer_epochs.get((partition, int(producer_id))) != int(producer_epoch):
            return False
        return any(
            self.offsets_partition_for(g) == partition and int(producer_id) in self.offsets.open_transactions(g)
            for g in self.offsets.groups_with_open_transactions()
        )

    def pending_transactional_offsets(self, group_id: str, producer_id: int) -> dict[str, dict[int, int]]:
        """topic -> partition -> pending offset of one producer's open transaction (a copy)."""
        return {
            topic: {p: v.committed_offset for p, v in partitions.items()}
            for topic, partitions in self.offsets.pending_offsets(group_id, producer_id).items()
        }

    def open_transactions(self, group_id: str) -> frozenset[int]:
        """Producer ids whose open transaction committed offsets for the group."""
        return self.offsets.open_transactions(group_id)

    def groups_with_open_transactions(self) -> list[str]:
        """Groups holding pending transactional offsets (the transaction coordinator's
        marker completes those placed on the marker's offsets partition)."""
        return self.offsets.groups_with_open_transactions()

    def on_topic_deleted(self, topic: str) -> None:
        self.offsets.delete_topic(topic)

    def cleanup_group_metadata(self, now_ms: int) -> None:
        """Expire old offsets; delete Empty groups left without offsets."""
        for group_id, group in list(self.groups.items()):
            if self._cleanup_expired_offsets(group, now_ms) and group.is_in(GroupState.EMPTY):
                # Only the group record is tombstoned here (its committed offsets already
                # expired); pending transactional offsets survive, as in Kafka.
                self._delete_group(group_id, now_ms, delete_offsets=False)
        for group_id, consumer_group in list(self.consumer.groups.items()):
            # A consumer group's offsets age from their commit (ConsumerGroup's expiration
            # condition); offsets of topics its members subscribe to never expire.
            expired = self._expire_offsets(group_id, lambda o: o.commit_timestamp_ms, consumer_group.is_subscribed_to,
                                           now_ms)
            if expired and self.consumer.delete(group_id) == ErrorCode.none:
                self._delete_group(group_id, now_ms, delete_offsets=False)

    def _cleanup_expired_offsets(self, group: ClassicGroup, now: int) -> bool:
        group_id = group.group_id
        if not self.offsets.has_offsets(group_id):
            return True
        if group.protocol_type is not None:
            if group.is_in(GroupState.EMPTY):
                base = (lambda o: group.state_timestamp_ms) if group.state_timestamp_ms is not None else (
                    lambda o: o.commit_timestamp_ms)
            elif group.uses_consumer_protocol() and group.subscribed_topics is not None and group.is_in(GroupState.STABLE):
                base = lambda o: o.commit_timestamp_ms  # noqa: E731
            else:
                return False
        else:
            base = lambda o: o.commit_timestamp_ms  # noqa: E731
        return self._expire_offsets(group_id, base, group.is_subscribed_to, now)

    def _expire_offsets(self, group_id: str, base: Callable[[OffsetAndMetadata], int],
                        is_subscribed_to: Callable[[str], bool], now: int) -> bool:
        """Remove the group's expired offsets; True when none is left (nor pending)."""
        all_expired = True
        for topic, partition, value in self.offsets.entries(group_id):
            if is_subscribed_to(topic):
                all_expired = False
                continue
            if value.is_expired(now, base(value), self._retention_ms) and not self.offsets.has_pending(
                group_id, topic, partition
            ):
                self.offsets.remove(group_id, topic, partition)
            else:
                all_expired = False
        return all_expired and not self.offsets.has_open_transactions(group_id)

    # -- admin -----------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """None when the group does not exist (Kafka answers Dead / GROUP_ID_NOT_FOUND)."""
        group, _now = self._begin(group_id)
        if group is None:
            return None
        stable = group.is_in(GroupState.STABLE)
        members = tuple(
            DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata_for(group.protocol_name) if stable else b"",
                assignment=m.assignment,
            )
            for m in group.members.values()
        )
        return GroupDescription(
            group_id=group_id,
            state=group.state.label,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=members,
        )

    def list_groups(
        self,
        states_filter: Iterable[str] = (),
        types_filter: Iterable[str] = (),
        include: Callable[[str], bool] | None = None,
    ) -> list[ListedGroup]:
        states = {s.strip().lower() for s in states_filter}
        types = {_parse_group_type(t) for t in types_filter}
        out = []
        for group_id in list(self.groups):
            if include is not None and not include(group_id):
                continue
            group, _now = self._begin(group_id)
            if group is None:
                continue
            if states and group.state.label.lower() not in states:
                continue
            if types and CLASSIC_GROUP_TYPE not in types:
                continue
            out.append(ListedGroup(group_id, group.protocol_type or "", group.state.label))
        for group_id in list(self.consumer.groups):
            consumer_group = self.consumer.group(group_id)
            if consumer_group is None or (include is not None and not include(group_id)):
                continue
            state = consumer_group.state.value
            if (states and state.lower() not in states) or (types and CONSUMER_GROUP_TYPE not in types):
                continue
            out.append(ListedGroup(group_id, CONSUMER_PROTOCOL_TYPE, state, CONSUMER_GROUP_TYPE))
        return out

    def delete_groups(self, group_ids: Iterable[str]) -> list[tuple[str, ErrorCode]]:
        results = []
        for group_id in group_ids:
            group, now = self._begin(group_id)
            if self.consumer.group(group_id) is not None:
                error = self.consumer.delete(group_id)
                if error == ErrorCode.none:
                    self._delete_group(group_id, now)  # offsets and listeners, as for classic groups
                results.append((group_id, error))
            elif group is None or group.is_in(GroupState.DEAD):
                results.append((group_id, ErrorCode.group_id_not_found))
            elif group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE):
                results.append((group_id, ErrorCode.non_empty_group))
            else:
                self._delete_group(group_id, now)
                results.append((group_id, ErrorCode.none))
        return results

    def _delete_group(self, group_id: str, now: int, *, delete_offsets: bool = True) -> None:
        group = self.groups.pop(group_id, None)
        if delete_offsets:
            self.offsets.delete_group(group_id)  # committed and pending (offset tombstones)
        if group is not None:
            for member_id in list(group.members):
                self._drop_member(group, member_id)
            group.pending_members.clear()
            group.join_timer = group.sync_timer = None
            group.transition_to(GroupState.DEAD, now)
        for listener in self.group_deleted_listeners:
            listener(group_id)


@dataclass(frozen=True, slots=True)
class _JoinRequest:
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[Protocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    api_version: int


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def _parse_group_type(name: str) -> str:
    lowered = name.strip().lower()
    return lowered if lowered in KNOWN_GROUP_TYPES else "unknown"


__all__ = [
    "GroupCoordinator",
    "GroupDescription",
    "DescribedMember",
    "JoinResult",
    "JoinedMember",
    "LeaveResult",
    "ListedGroup",
    "MemberIdentity",
    "MemberLeaveResult",
    "NO_RESPONSE",
    "OFFSETS_TOPIC",
    "OffsetCommitEntry",
    "OffsetFetchResult",
    "PartitionOffset",
    "Pending",
    "Protocol",
    "SyncResult",
]
