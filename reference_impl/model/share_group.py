"""The share group coordinator (KIP-932): ShareGroupHeartbeat membership, epochs,
server-side assignment, session timeouts, ShareGroupDescribe, and durable records.

Semantics follow Kafka 4.2's group coordinator (GroupMetadataManager.shareGroupHeartbeat,
ShareGroup, ShareGroupMember, ShareGroupAssignmentBuilder, SimpleAssignor). The model is
pure: no I/O, time only from the injected Clock (or the `now_ms` an operation is given).

Every change is expressed as durable records (`share_group_records`) that are appended to
`self.log` and applied through `replay`, exactly as Kafka writes and replays its
__consumer_offsets records; `ShareGroupCoordinator.from_records` rebuilds an equal state.
The only non-durable state is the per-member session timer (`_sessions`), re-armed on load.

Heartbeat, step by step (Kafka 4.2 order):

1. request validation -> INVALID_REQUEST (empty member id or group id, blank rack id,
   epoch 0 without subscriptions, epoch < -1);
2. the group: a group of another type with this id -> GROUP_ID_NOT_FOUND ("Group g is not
   a share group."); a missing group with epoch != 0 -> GROUP_ID_NOT_FOUND;
3. epoch -1: leave (UNKNOWN_MEMBER_ID when not a member);
4. a new member of a full group -> GROUP_MAX_SIZE_REACHED (`group.share.max.size`);
5. an unknown member with epoch != 0 -> UNKNOWN_MEMBER_ID; an epoch above the member's,
   or below it and not its previous epoch -> FENCED_MEMBER_EPOCH;
6. the group epoch is bumped when the member is new or changed its subscriptions, when
   the subscribed topics' metadata changed (metadata hash), or when initialised
   share-partitions are not yet in the target assignment;
7. if the group epoch is above the assignment epoch a new target assignment is computed
   (SimpleAssignor) and the assignment epoch becomes the group epoch;
8. the member jumps straight to the target (no revocation handshake in share groups):
   member epoch := assignment epoch, assigned partitions := its target (filtered to its
   subscriptions);
9. partitions of subscribed topics whose share-group state is not initialised are
   recorded as initializing; after the response is built they are initialised through the
   `persister` (InitializeShareGroupState, as Kafka does), or - without one - returned as
   an `InitializeRequest` or completed by the coordinator itself (`auto_initialize`). As
   in Kafka the first response has an empty assignment and the next heartbeat brings the
   partitions with a bumped epoch.

Administration (Alter/DeleteShareGroupOffsets, DeleteGroups) writes and deletes
share-partition state through the persister too; see docs/share-admin.md.

Placement (NOT_COORDINATOR) is the handlers' business, as for classic groups.
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from kio.schema.errors import ErrorCode

from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.broker_config import BrokerConfig
from reference_impl.model.clock import Clock
from reference_impl.model.group_description import GroupDescription
from reference_impl.model.seeded_bugs import SeededBugs
from reference_impl.model.share_assignor import MemberSpec, SimpleAssignor
from reference_impl.model.share_group_records import (
    VALID_PREVIOUS_STATES,
    CoordinatorRecord,
    ShareGroup,
    ShareGroupMember,
    ShareGroupState,
    ShareGroupStore,
    TopicId,
    TopicPartitions,
    current_assignment_record,
    current_assignment_tombstone,
    freeze_partitions,
    group_epoch_record,
    group_epoch_tombstone,
    member_metadata_record,
    member_metadata_tombstone,
    replay,
    state_partition_metadata_record,
    state_partition_metadata_tombstone,
    target_assignment_epoch_record,
    target_assignment_epoch_tombstone,
    target_assignment_member_record,
    target_assignment_member_tombstone,
)

SHARE_GROUP_TYPE = "share"
SHARE_PROTOCOL_TYPE = "share"
LEAVE_GROUP_MEMBER_EPOCH = -1
JOIN_GROUP_MEMBER_EPOCH = 0

# Broker configs (Kafka 4.2 names and defaults).
_DEFAULTS = BrokerConfig()
DEFAULT_SESSION_TIMEOUT_MS = _DEFAULTS.group_share_session_timeout_ms  # group.share.session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = _DEFAULTS.group_share_heartbeat_interval_ms  # group.share.heartbeat.interval.ms
DEFAULT_MAX_SIZE = _DEFAULTS.group_share_max_size  # group.share.max.size
DEFAULT_INITIALIZE_RETRY_INTERVAL_MS = _DEFAULTS.group_share_initialize_retry_interval_ms
# Group configs overriding them per group.
GROUP_SESSION_TIMEOUT_CONFIG = "share.session.timeout.ms"
GROUP_HEARTBEAT_INTERVAL_CONFIG = "share.heartbeat.interval.ms"



# -- results -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitializeRequest:
    """Share-partitions whose state the share coordinator must initialise
    (InitializeShareGroupState with state epoch = group epoch, start offset -1)."""

    group_id: str
    state_epoch: int
    topics: TopicPartitions


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None  # None: unchanged / not sent
    error_message: str | None = None
    initialize: InitializeRequest | None = None  # only without auto_initialize


@dataclass(frozen=True, slots=True)
class DescribedShareMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: TopicPartitions


@dataclass(frozen=True, slots=True)
class ShareGroupDescription(GroupDescription[DescribedShareMember]):
    """One group of a ShareGroupDescribe answer."""


@dataclass(frozen=True, slots=True)
class ListedShareGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = SHARE_GROUP_TYPE


@dataclass(slots=True)
class Deadline:
    at_ms: int
    seq: int


class TopicView(Protocol):
    """A topic as the share group coordinator reads it (topics.Topic)."""

    topic_id: TopicId
    partitions: Sequence[object]


class TopicsView(Protocol):
    """The cluster's topics as the share group coordinator reads them (topics.TopicRegistry)."""

    def get(self, name: str) -> TopicView | None:
        """The topic of that name, or None."""

    def name_for_id(self, topic_id: TopicId) -> str | None:
        """The name of the topic with that id, or None."""


class _Error(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


# -- the coordinator ------------------------------------------------------------------------


class ShareGroupCoordinator:
    """All share groups of the cluster (placement is decided by the handlers)."""

    def __init__(
        self,
        node_ids: Sequence[int],
        clock: Clock,
        config: BrokerConfig,
        topics_view: TopicsView,
        *,
        other_group_type: Callable[[str], str | None] | None = None,
        group_config: Callable[[str], Mapping[str, Any] | None] | None = None,
        assignor: SimpleAssignor | None = None,
        auto_initialize: bool = True,
        id_factory: Callable[[], str] | None = None,
        persister: Any = None,
        on_state_reset: Callable[[str, TopicId], None] | None = None,
    ) -> None:
        self.node_ids = list(node_ids)
        self.clock = clock
        self.config = config
        self.topics_view = topics_view
        # Seam for the shared group namespace: returns "classic"/"consumer"/... when the
        # id is used by a group the classic/consumer coordinator owns, else None.
        self.other_group_type = other_group_type
        self.group_config = group_config
        self.assignor = assignor or SimpleAssignor()
        self.auto_initialize = auto_initialize
        # The share coordinator (Kafka's Persister): when set, share-partition state is
        # initialised (InitializeShareGroupState), reset and deleted through it, as Kafka's
        # group coordinator does; `auto_initialize` only matters without one.
        self.persister = persister
        # The share-partition leaders drop their in-memory state of (group, topic) after an
        # admin reset or delete, so the next fetch reloads it from the persister.
        self.on_state_reset = on_state_reset
        self._new_uuid = id_factory or (lambda: str(uuid.uuid4()))
        self.store = ShareGroupStore()
        self.log: list[CoordinatorRecord] = []  # every record written, in order
        self._sessions: dict[tuple[str, str], Deadline] = {}
        self._seq = itertools.count()

    @classmethod
    def from_records(
        cls, records: Iterable[CoordinatorRecord], node_ids, clock, config, topics_view, **kwargs
    ) -> "ShareGroupCoordinator":
        """A coordinator that loaded the given record log (fail-over): same groups,
        members, epochs and assignments; session timers re-armed for every member."""
        coordinator = cls(node_ids, clock, config, topics_view, **kwargs)
        now = clock.now_ms()
        for record in records:
            coordinator.log.append(record)
            replay(coordinator.store, record, now)
        for group in coordinator.store.groups.values():
            for member_id in group.members:
                coordinator._schedule_session(group.group_id, member_id, now)
        return coordinator

    def reload(self, owns: Callable[[str], bool]) -> None:
        """A coordinator that crashed comes back (or its __consumer_offsets partitions fail
        over): the groups for which `owns(group_id)` is true are dropped from memory and
        rebuilt by replaying their records, as Kafka's GroupCoordinatorShard replays the
        partition on election; member session timers are re-armed (they are not durable)."""
        now = self.clock.now_ms()
        for gid in [g for g in self.store.groups if owns(g)]:
            del self.store.groups[gid]
        for key in [k for k in self._sessions if owns(k[0])]:
            del self._sessions[key]
        for record in self.log:
            if owns(record.key.group_id):
                replay(self.store, record, now)
        for gid in [g for g in self.store.groups if owns(g)]:
            for member_id in self.store.groups[gid].members:
                self._schedule_session(gid, member_id, now)

    # -- configuration -------------------------------------------------------------

    def _group_override(self, group_id: str, name: str) -> int | None:
        if self.group_config is None:
            return None
        configs = self.group_config(group_id) or {}
        value = configs.get(name)
        return None if value is None else int(value)

    def session_timeout_ms(self, group_id: str) -> int:
        override = self._group_override(group_id, GROUP_SESSION_TIMEOUT_CONFIG)
        return override if override is not None else self.config.group_share_session_timeout_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        override = self._group_override(group_id, GROUP_HEARTBEAT_INTERVAL_CONFIG)
        return override if override is not None else self.config.group_share_heartbeat_interval_ms

    @property
    def max_size(self) -> int:
        return self.config.group_share_max_size

    @property
    def seeded_bugs(self) -> SeededBugs:
        """Deliberate bugs of a reference:bug=NAME broker."""
        return self.config.seeded_bugs

    # -- queries -------------------------------------------------------------------

    def group(self, group_id: str) -> ShareGroup | None:
        return self.store.get(group_id)

    def group_type(self, group_id: str) -> str | None:
        """"share" when this coordinator owns the id (hook for the classic coordinator:
        JoinGroup on a share group id answers INCONSISTENT_GROUP_PROTOCOL in Kafka)."""
        return SHARE_GROUP_TYPE if group_id in self.store.groups else None

    def session_deadline_ms(self, group_id: str, member_id: str) -> int | None:
        deadline = self._sessions.get((group_id, member_id))
        return None if deadline is None else deadline.at_ms

    def initialized_partitions(self, group_id: str) -> dict[TopicId, frozenset[int]]:
        group = self.store.get(group_id)
        return {} if group is None else {t: ps for t, (_n, ps) in group.initialized.items()}

    def pending_initialization(self, group_id: str) -> dict[TopicId, frozenset[int]]:
        group = self.store.get(group_id)
        return {} if group is None else {t: v.partitions for t, v in group.initializing.items()}

    # -- topics --------------------------------------------------------------------

    def _resolve(self, name: str) -> tuple[TopicId, int] | None:
        topic = self.topics_view.get(name)
        if topic is None:
            return None
        return topic.topic_id, len(topic.partitions)

    def _metadata_hash(self, names: Iterable[str]) -> int:
        """Kafka's group metadata hash: over the subscribed topics that exist."""
        parts = []
        for name in sorted(set(names)):
            resolved = self._resolve(name)
            if resolved is not None:
                parts.append(f"{name}\x00{resolved[0]}\x00{resolved[1]}")
        if not parts:
            return 0
        digest = hashlib.sha256("\x01".join(parts).encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    def _topic_ids(self, names: Iterable[str]) -> set[TopicId]:
        out = set()
        for name in names:
            resolved = self._resolve(name)
            if resolved is not None:
                out.add(resolved[0])
        return out

    # -- records -------------------------------------------------------------------

    def _apply(self, records: list[CoordinatorRecord], now: int) -> None:
        for record in records:
            self.log.append(record)
            replay(self.store, record, now)

    # -- timers --------------------------------------------------------------------

    def _schedule_session(self, group_id: str, member_id: str, now: int) -> None:
        self._sessions[(group_id, member_id)] = Deadline(now + self.session_timeout_ms(group_id), next(self._seq))

    def _cancel_session(self, group_id: str, member_id: str) -> None:
        self._sessions.pop((group_id, member_id), None)

    def _run_due(self, group_id: str | None, now: int) -> None:
        while True:
            due = [
                (d.at_ms, d.seq, key) for key, d in self._sessions.items()
                if d.at_ms <= now and (group_id is None or key[0] == group_id)
            ]
            if not due:
                return
            at_ms, _seq, (gid, member_id) = min(due)
            self._sessions.pop((gid, member_id), None)
            group = self.store.get(gid)
            if group is not None and member_id in group.members:
                self._fence(group, member_id, at_ms)

    def tick(self, now_ms: int | None = None) -> None:
        """Fire every due session timeout (the member is removed, the group epoch bumped)."""
        self._run_due(None, self.clock.now_ms() if now_ms is None else now_ms)

    def _fence(self, group: ShareGroup, member_id: str, now: int) -> None:
        gid = group.group_id
        names = set()
        for m in group.members.values():
            if m.member_id != member_id:
                names.update(m.subscribed_topic_names)
        self._apply(
            [
                current_assignment_tombstone(gid, member_id),
                target_assignment_member_tombstone(gid, member_id),
                member_metadata_tombstone(gid, member_id),
                group_epoch_record(gid, group.group_epoch + 1, self._metadata_hash(names)),
            ],
            now,
        )
        self._cancel_session(gid, member_id)

    # -- ShareGroupHeartbeat ---------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None = None,
        subscribed_topic_names: Sequence[str] | None = None,
        now_ms: int | None = None,
        *,
        client_id: str = "",
        client_host: str = "",
        api_version: int = 1,
    ) -> HeartbeatResult:
        now = self.clock.now_ms() if now_ms is None else now_ms
        try:
            if api_version == 0 and member_epoch == JOIN_GROUP_MEMBER_EPOCH and not member_id:
                # KIP-932 text / 4.0 early access (v0): the coordinator generates the id.
                member_id = self._new_uuid()
            self._validate(group_id, member_id, member_epoch, rack_id, subscribed_topic_names)
            self._check_namespace(group_id)
            self._run_due(group_id, now)
            if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(group_id, member_id, now)
            return self._heartbeat(
                group_id, member_id, member_epoch, rack_id,
                None if subscribed_topic_names is None else tuple(subscribed_topic_names),
                client_id, client_host, now,
            )
        except _Error as e:
            return HeartbeatResult(e.error, error_message=e.message)

    @staticmethod
    def _validate(group_id, member_id, member_epoch, rack_id, subscribed_topic_names) -> None:
        def blank(value: str | None) -> bool:
            return value is not None and not value.strip()

        if member_id is None or blank(member_id):
            raise _Error(ErrorCode.invalid_request, "MemberId can't be empty.")
        if group_id is None or blank(group_id):
            raise _Error(ErrorCode.invalid_request, "GroupId can't be empty.")
        if blank(rack_id):
            raise _Error(ErrorCode.invalid_request, "RackId can't be empty.")
        if member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if not subscribed_topic_names:
                raise _Error(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
        elif member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
            raise _Error(ErrorCode.invalid_request, "MemberEpoch is invalid.")

    def _check_namespace(self, group_id: str) -> None:
        if group_id in self.store.groups or self.other_group_type is None:
            return
        other = self.other_group_type(group_id)
        if other is not None and other != SHARE_GROUP_TYPE:
            raise _Error(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")

    def _leave(self, group_id: str, member_id: str, now: int) -> HeartbeatResult:
        group = self.store.get(group_id)
        if group is None:
            raise _Error(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        if member_id not in group.members:
            raise _Error(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
        self._fence(group, member_id, now)
        return HeartbeatResult(ErrorCode.none, member_id, LEAVE_GROUP_MEMBER_EPOCH, 0, None)

    def _heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed: tuple[str, ...] | None,
        client_id: str,
        client_host: str,
        now: int,
    ) -> HeartbeatResult:
        group = self.store.get(group_id)
        if group is None and member_epoch != JOIN_GROUP_MEMBER_EPOCH:
            raise _Error(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
        existing = None if group is None else group.members.get(member_id)
        if group is not None and existing is None and len(group.members) >= self.max_size \
                and not self.seeded_bugs.has(bugs.SHARE_GROUP_SIZE_UNBOUNDED):
            raise _Error(
                ErrorCode.group_max_size_reached,
                f"The share group has reached its maximum capacity of {self.max_size} members.",
            )
        if existing is None:
            if member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                raise _Error(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
            old = ShareGroupMember(member_id)  # epoch 0, previous epoch -1
        else:
            old = existing
        if (member_epoch > old.member_epoch or (
            member_epoch < old.member_epoch and member_epoch != old.previous_member_epoch
        )) and not self.seeded_bugs.has(bugs.SHARE_STALE_MEMBER_EPOCH_ACCEPTED):
            raise _Error(
                ErrorCode.fenced_member_epoch,
                f"The share group member has a {'greater' if member_epoch > old.member_epoch else 'smaller'} "
                f"member epoch ({member_epoch}) than the one known by the group coordinator "
                f"({old.member_epoch}). The member must abandon all its partitions and rejoin.",
            )

        old_assigned = freeze_partitions(old.assigned_partitions)  # `old` may be live state

        # 1. the member and the group epoch
        updated = ShareGroupMember(
            member_id,
            member_epoch=old.member_epoch,
            previous_member_epoch=old.previous_member_epoch,
            state=old.state,
            rack_id=rack_id if rack_id is not None else old.rack_id,
            client_id=client_id,
            client_host=client_host,
            subscribed_topic_names=subscribed if subscribed is not None else old.subscribed_topic_names,
            assigned_partitions=dict(old.assigned_partitions),
        )
        records: list[CoordinatorRecord] = []
        if existing is None or _metadata_of(updated) != _metadata_of(old):
            records.append(member_metadata_record(group_id, updated))
        subscription_changed = set(updated.subscribed_topic_names) != set(old.subscribed_topic_names)
        subscription_changed &= not self.seeded_bugs.has(bugs.SHARE_GROUP_EPOCH_NOT_BUMPED)
        bump = subscription_changed or (group is not None and self._initialized_assignment_pending(group))

        others = [m for m in (group.members.values() if group else ()) if m.member_id != member_id]
        all_names = set(updated.subscribed_topic_names)
        for m in others:
            all_names.update(m.subscribed_topic_names)
        group_epoch = group.group_epoch if group else 0
        metadata_hash = self._metadata_hash(all_names)
        if metadata_hash != (group.metadata_hash if group else 0):
            bump = True
        if bump:
            group_epoch += 1
            records.append(group_epoch_record(group_id, group_epoch, metadata_hash))

        # 2. the target assignment
        assignment_epoch = group.assignment_epoch if group else 0
        if group_epoch > assignment_epoch:
            ordered = [updated if m.member_id == member_id else m for m in (group.members.values() if group else ())]
            if existing is None:
                ordered.append(updated)
            targets = self._compute_targets(group, ordered)
            for m in ordered:
                old_target = group.target_assignment.get(m.member_id) if group else None
                if old_target != targets[m.member_id]:
                    records.append(target_assignment_member_record(group_id, m.member_id, targets[m.member_id]))
            records.append(target_assignment_epoch_record(group_id, group_epoch))
            target, target_epoch = targets[member_id], group_epoch
        else:
            target, target_epoch = group.target_assignment.get(member_id, {}), assignment_epoch

        # 3. reconcile (share members converge at once)
        subscribed_ids = self._topic_ids(updated.subscribed_topic_names)
        filtered = {t: ps for t, ps in target.items() if t in subscribed_ids and ps}
        if target_epoch != updated.member_epoch:
            updated.previous_member_epoch = updated.member_epoch
            updated.member_epoch = target_epoch
            updated.assigned_partitions = filtered
        elif subscription_changed:
            updated.assigned_partitions = filtered
        if existing is None or _assignment_of(updated) != _assignment_of(old):
            records.append(current_assignment_record(group_id, updated))

        # 4. share-partition state initialisation
        initialize = self._maybe_initialize(group_id, group, group_epoch, all_names, records, now)

        self._apply(records, now)
        self._schedule_session(group_id, member_id, now)

        member = self.store.get(group_id).members[member_id]
        send_assignment = (
            member_epoch == JOIN_GROUP_MEMBER_EPOCH
            or subscribed is not None
            or freeze_partitions(member.assigned_partitions) != old_assigned
        )
        result = HeartbeatResult(
            ErrorCode.none,
            member_id,
            member.member_epoch,
            self.heartbeat_interval_ms(group_id),
            freeze_partitions(member.assigned_partitions) if send_assignment else None,
            None,
            None if self.auto_initialize or self.persister is not None else initialize,
        )
        if initialize is not None and self.persister is not None:
            self._initialize_state(initialize, now)
        elif initialize is not None and self.auto_initialize:
            self.complete_initialization(group_id, dict(initialize.topics), now_ms=now)
        return result

    def _initialize_state(self, request: InitializeRequest, now: int) -> None:
        """InitializeShareGroupState (start offset -1, state epoch = group epoch) for the
        partitions being initialised; those the persister accepted become assignable."""
        done: dict[TopicId, set[int]] = {}
        failed: dict[TopicId, set[int]] = {}
        for topic_id, partitions in dict(request.topics).items():
            for p in sorted(partitions):
                result = self.persister.initialize(request.group_id, topic_id, p, request.state_epoch, -1, now_ms=now)
                (done if result.error == ErrorCode.none else failed).setdefault(topic_id, set()).add(p)
        if done:
            self.complete_initialization(request.group_id, done, now_ms=now)
        if failed:
            self.fail_initialization(request.group_id, failed, now_ms=now)

    def _compute_targets(self, group: ShareGroup | None, members: list[ShareGroupMember]):
        names = sorted(set().union(*(m.subscribed_topic_names for m in members)) if members else ())
        partition_counts: dict[TopicId, int] = {}
        ids_by_name: dict[str, TopicId] = {}
        for name in names:
            resolved = self._resolve(name)
            if resolved is not None:
                ids_by_name[name] = resolved[0]
                partition_counts[resolved[0]] = resolved[1]
        specs = {
            m.member_id: MemberSpec(
                frozenset(ids_by_name[n] for n in m.subscribed_topic_names if n in ids_by_name),
                (group.target_assignment.get(m.member_id, {})
                 if group and not self.seeded_bugs.has(bugs.SHARE_ASSIGNOR_NOT_STICKY) else {}),
            )
            for m in members
        }
        assignable = group.is_assignable if group is not None else (lambda _t, _p: False)
        return self.assignor.assign(specs, partition_counts, assignable)

    def _initialized_assignment_pending(self, group: ShareGroup) -> bool:
        """Kafka's initializedAssignmentPending: initialised partitions of subscribed topics
        that the target assignment does not cover yet."""
        if group.is_empty or not group.initialized:
            return False
        names = group.subscribed_topic_names()
        if not names:
            return False
        assigned: dict[TopicId, set[int]] = {}
        for target in group.target_assignment.values():
            for t, ps in target.items():
                assigned.setdefault(t, set()).update(ps)
        for t, (name, partitions) in group.initialized.items():
            resolved = self._resolve(name) if name in names else None
            if resolved is None or resolved[0] != t:
                continue  # not subscribed, or the topic was deleted (and maybe re-created)
            if assigned.get(t, set()) != {p for p in partitions if p < resolved[1]}:
                return True
        return False

    def _maybe_initialize(
        self, group_id: str, group: ShareGroup | None, group_epoch: int, names: set[str], records, now: int
    ) -> InitializeRequest | None:
        retry_ms = self.config.group_share_initialize_retry_interval_ms
        initializing = dict(group.initializing) if group else {}
        initialized = dict(group.initialized) if group else {}
        deleting = dict(group.deleting) if group else {}
        change: dict[TopicId, tuple[str, frozenset[int]]] = {}
        for name in sorted(names):
            resolved = self._resolve(name)
            if resolved is None:
                continue
            topic_id, count = resolved
            missing = set(range(count)) - set(initialized.get(topic_id, ("", frozenset()))[1])
            pending = initializing.get(topic_id)
            if pending is not None and now - pending.since_ms < retry_ms:
                missing -= set(pending.partitions)
            if missing:
                change[topic_id] = (name, frozenset(missing))
        if not change:
            return None
        combined = {t: (v.name, set(v.partitions)) for t, v in initializing.items()}
        for t, (name, ps) in change.items():
            combined.setdefault(t, (name, set()))[1].update(ps)
        for t in change:
            deleting.pop(t, None)
        records.append(state_partition_metadata_record(
            group_id, combined, {t: (n, ps) for t, (n, ps) in initialized.items()}, deleting,
        ))
        return InitializeRequest(group_id, group_epoch, freeze_partitions({t: ps for t, (_n, ps) in change.items()}))

    # -- share-partition state (wired to the share coordinator by the lead) ---------------

    def complete_initialization(
        self, group_id: str, topics: Mapping[TopicId, Iterable[int]], now_ms: int | None = None
    ) -> None:
        """InitializeShareGroupState succeeded: the partitions become initialised (assignable)."""
        self._move_initializing(group_id, topics, initialized=True, now_ms=now_ms)

    def fail_initialization(
        self, group_id: str, topics: Mapping[TopicId, Iterable[int]], now_ms: int | None = None
    ) -> None:
        """InitializeShareGroupState failed: the partitions stop initializing (retried later)."""
        self._move_initializing(group_id, topics, initialized=False, now_ms=now_ms)

    def _move_initializing(self, group_id, topics, *, initialized: bool, now_ms: int | None) -> None:
        now = self.clock.now_ms() if now_ms is None else now_ms
        group = self.store.get(group_id)
        if group is None:
            return
        initializing = {t: (v.name, set(v.partitions)) for t, v in group.initializing.items()}
        done = {t: (n, set(ps)) for t, (n, ps) in group.initialized.items()}
        for t, ps in topics.items():
            ps = set(ps)
            name = initializing.get(t, (None, set()))[0] or done.get(t, (None, set()))[0]
            if name is None:
                name = self._name_of(t) or ""
            if t in initializing:
                initializing[t][1].difference_update(ps)
                if not initializing[t][1]:
                    del initializing[t]
            if initialized:
                done.setdefault(t, (name, set()))[1].update(ps)
        self._apply([state_partition_metadata_record(group_id, initializing, done, dict(group.deleting))], now)

    def _name_of(self, topic_id: TopicId) -> str | None:
        return self.topics_view.name_for_id(topic_id)

    # -- ShareGroupDescribe / ListGroups / DeleteGroups ---------------------------------

    def describe(self, group_ids: Iterable[str], now_ms: int | None = None) -> list[ShareGroupDescription]:
        now = self.clock.now_ms() if now_ms is None else now_ms
        out = []
        for group_id in group_ids:
            if not group_id:
                out.append(ShareGroupDescription(group_id or "", ErrorCode.invalid_group_id))
                continue
            self._run_due(group_id, now)
            group = self.store.get(group_id)
            if group is None:
                other = self.other_group_type(group_id) if self.other_group_type else None
                message = (
                    f"Group {group_id} is not a share group." if other not in (None, SHARE_GROUP_TYPE)
                    else f"Group {group_id} not found."
                )
                out.append(ShareGroupDescription(group_id, ErrorCode.group_id_not_found, message))
                continue
            out.append(ShareGroupDescription(
                group_id=group_id,
                state=group.state.label,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=self.assignor.name,
                members=tuple(
                    DescribedShareMember(
                        m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                        tuple(m.subscribed_topic_names), freeze_partitions(m.assigned_partitions),
                    )
                    for m in group.members.values()
                ),
            ))
        return out

    def list_groups(self, states_filter: Iterable[str] = (), now_ms: int | None = None) -> list[ListedShareGroup]:
        now = self.clock.now_ms() if now_ms is None else now_ms
        self._run_due(None, now)
        states = {s.strip().lower() for s in states_filter}
        return [
            ListedShareGroup(g.group_id, SHARE_PROTOCOL_TYPE, g.state.label)
            for g in self.store.groups.values()
            if not states or g.state.label.lower() in states
        ]

    def delete_groups(self, group_ids: Iterable[str], now_ms: int | None = None) -> list[tuple[str, ErrorCode]]:
        """DeleteGroups for share groups: only Empty groups; tombstones every group record
        and deletes the group's share-partition state from the persister
        (DeleteShareGroupState), as Kafka's group coordinator does."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        out = []
        for group_id in group_ids:
            self._run_due(group_id, now)
            group = self.store.get(group_id)
            if group is None:
                out.append((group_id, ErrorCode.group_id_not_found))
            elif not group.is_empty:
                out.append((group_id, ErrorCode.non_empty_group))
            else:
                stateful = self._stateful_partitions(group)
                self._apply([
                    target_assignment_epoch_tombstone(group_id),
                    state_partition_metadata_tombstone(group_id),
                    group_epoch_tombstone(group_id),
                ], now)
                for topic_id, partitions in stateful.items():
                    self._delete_state(group_id, topic_id, partitions, now)
                out.append((group_id, ErrorCode.none))
        return out

    # -- Describe/Alter/DeleteShareGroupOffsets ------------------------------------------

    def offsets_topics(self, group_id: str) -> dict[TopicId, tuple[str, frozenset[int]]]:
        """The share-partitions DescribeShareGroupOffsets reports when no topics are named:
        the initialised ones (nothing for an unknown or non-share group, as in Kafka)."""
        group = self.store.get(group_id)
        return {} if group is None else dict(group.initialized)

    def _admin_check(self, group_id: str, now: int) -> ShareGroup | None:
        """Alter/DeleteShareGroupOffsets need a share group (or no group) without members."""
        self._check_namespace(group_id)
        self._run_due(group_id, now)
        group = self.store.get(group_id)
        if group is not None and not group.is_empty:
            raise _Error(ErrorCode.non_empty_group, "The group is not empty.")
        return group

    def alter_offsets(
        self, group_id: str, topics: Mapping[str, Sequence[tuple[int, int]]], now_ms: int | None = None
    ) -> OffsetsAdminResult:
        """AlterShareGroupOffsets: the new start offset of each named share-partition is
        written through the persister (InitializeShareGroupState: no in-flight batches, so
        in-flight state is discarded) and the partitions become initialised. Kafka accepts
        any offset (also past the end, or -1 = uninitialised) and creates a missing share
        group (Empty)."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        try:
            group = self._admin_check(group_id, now)
        except _Error as e:
            return OffsetsAdminResult(e.error, e.message)
        results: list[TopicOffsetsResult] = []
        accepted: dict[TopicId, tuple[str, dict[int, int]]] = {}
        for name, partitions in topics.items():
            resolved = self._resolve(name)
            if resolved is None:
                results.append(TopicOffsetsResult(name, None, tuple(
                    (p, ErrorCode.unknown_topic_or_partition, UNKNOWN_PARTITION_MESSAGE) for p, _o in partitions)))
                continue
            topic_id, count = resolved
            answers = []
            for p, offset in partitions:
                if 0 <= p < count:
                    accepted.setdefault(topic_id, (name, {}))[1][p] = offset
                    answers.append((p, ErrorCode.none, None))
                else:
                    answers.append((p, ErrorCode.unknown_topic_or_partition, UNKNOWN_PARTITION_MESSAGE))
            results.append(TopicOffsetsResult(name, topic_id, tuple(answers)))
        if accepted:
            self._reset_state(group_id, group, accepted, now)
        # Kafka answers the topics it could not resolve first.
        results.sort(key=lambda r: r.topic_id is not None)
        return OffsetsAdminResult(topics=tuple(results))

    def _reset_state(self, group_id: str, group: ShareGroup | None, offsets, now: int) -> None:
        records: list[CoordinatorRecord] = []
        if group is None:
            records.append(group_epoch_record(group_id, 0, 0))
        epoch = 0 if group is None else group.group_epoch
        initializing = {} if group is None else {t: (v.name, set(v.partitions) - set(offsets.get(t, ("", {}))[1]))
                                                  for t, v in group.initializing.items()}
        initialized = {} if group is None else {t: (n, set(ps)) for t, (n, ps) in group.initialized.items()}
        for topic_id, (name, starts) in offsets.items():
            initialized.setdefault(topic_id, (name, set()))[1].update(starts)
        deleting = {} if group is None else {t: n for t, n in group.deleting.items() if t not in offsets}
        records.append(state_partition_metadata_record(
            group_id, {t: v for t, v in initializing.items() if v[1]}, initialized, deleting))
        self._apply(records, now)
        for topic_id, (_name, starts) in offsets.items():
            for p, offset in sorted(starts.items()):
                if self.persister is not None:
                    self.persister.initialize(group_id, topic_id, p, epoch, offset, now_ms=now)
            if self.on_state_reset is not None:
                self.on_state_reset(group_id, topic_id)

    def delete_offsets(self, group_id: str, topic_names: Iterable[str], now_ms: int | None = None) -> OffsetsAdminResult:
        """DeleteShareGroupOffsets: the share-partition state of whole topics is deleted
        (DeleteShareGroupState) and the topics leave the group's initialised set. An unknown
        group is GROUP_ID_NOT_FOUND ("Group g not found.")."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        try:
            group = self._admin_check(group_id, now)
        except _Error as e:
            return OffsetsAdminResult(e.error, e.message)
        if group is None:
            return OffsetsAdminResult(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        stateful = self._stateful_partitions(group)
        results: list[TopicOffsetsResult] = []
        deleted: dict[TopicId, frozenset[int]] = {}
        for name in dict.fromkeys(topic_names):
            resolved = self._resolve(name)
            if resolved is None:
                results.append(TopicOffsetsResult(name, None, error=ErrorCode.unknown_topic_or_partition,
                                                  message=UNKNOWN_PARTITION_MESSAGE))
            elif resolved[0] not in stateful:
                results.append(TopicOffsetsResult(name, None, error=ErrorCode.unknown_topic_or_partition,
                                                  message="There is no offset information to delete."))
            else:
                results.append(TopicOffsetsResult(name, resolved[0]))
                deleted[resolved[0]] = stateful[resolved[0]]
        if deleted:
            self._apply([state_partition_metadata_record(
                group_id,
                {t: (v.name, v.partitions) for t, v in group.initializing.items() if t not in deleted},
                {t: v for t, v in group.initialized.items() if t not in deleted},
                {t: n for t, n in group.deleting.items() if t not in deleted},
            )], now)
            for topic_id, partitions in deleted.items():
                self._delete_state(group_id, topic_id, partitions, now)
        return OffsetsAdminResult(topics=tuple(results))

    @staticmethod
    def _stateful_partitions(group: ShareGroup) -> dict[TopicId, frozenset[int]]:
        """Partitions that have (or are getting) share-partition state in the persister."""
        out = {t: set(ps) for t, (_n, ps) in group.initialized.items()}
        for t, v in group.initializing.items():
            out.setdefault(t, set()).update(v.partitions)
        return {t: frozenset(ps) for t, ps in out.items()}

    def _delete_state(self, group_id: str, topic_id: TopicId, partitions: Iterable[int], now: int) -> None:
        if self.persister is not None:
            for p in sorted(partitions):
                self.persister.delete(group_id, topic_id, p, now_ms=now)
        if self.on_state_reset is not None:
            self.on_state_reset(group_id, topic_id)


UNKNOWN_PARTITION_MESSAGE = "This server does not host this topic-partition."


@dataclass(frozen=True, slots=True)
class TopicOffsetsResult:
    """One topic of an Alter/DeleteShareGroupOffsets answer: per-partition results
    (partition, error, message) for Alter, a topic-level error for Delete."""

    topic_name: str
    topic_id: TopicId | None
    partitions: tuple[tuple[int, ErrorCode, str | None], ...] = ()
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetsAdminResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    topics: tuple[TopicOffsetsResult, ...] = ()


def _metadata_of(m: ShareGroupMember) -> tuple:
    return (m.rack_id, m.client_id, m.client_host, tuple(m.subscribed_topic_names))


def _assignment_of(m: ShareGroupMember) -> tuple:
    return (m.member_epoch, m.previous_member_epoch, int(m.state), freeze_partitions(m.assigned_partitions))


__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "DescribedShareMember",
    "HeartbeatResult",
    "InitializeRequest",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "ListedShareGroup",
    "OffsetsAdminResult",
    "SHARE_GROUP_TYPE",
    "ShareGroup",
    "ShareGroupCoordinator",
    "ShareGroupDescription",
    "ShareGroupMember",
    "ShareGroupState",
    "TopicOffsetsResult",
    "VALID_PREVIOUS_STATES",
]
