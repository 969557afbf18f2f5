"""Durable records of share groups (what Kafka writes to __consumer_offsets) and `replay`.

Record types follow Kafka 4.2's group-coordinator record schemas (coordinator record
type ids 10-15). A record is a key plus a value; a value of None is a tombstone.

| type | key | value |
|---|---|---|
| 10 | ShareGroupMemberMetadataKey(group, member) | rack id, client id/host, subscribed topic names |
| 11 | ShareGroupMetadataKey(group) | group epoch, metadata hash |
| 12 | ShareGroupTargetAssignmentMetadataKey(group) | assignment epoch |
| 13 | ShareGroupTargetAssignmentMemberKey(group, member) | the member's target partitions |
| 14 | ShareGroupCurrentMemberAssignmentKey(group, member) | member epoch, previous epoch, state, partitions |
| 15 | ShareGroupStatePartitionMetadataKey(group) | initializing / initialized / deleting topics |

The KIP text has a seventh record, ShareGroupPartitionMetadata (type 9, the subscribed
topics' partition metadata); Kafka 4.x dropped it and stores a metadata hash in
ShareGroupMetadataValue instead.

`ShareGroupStore` is the durable state those records replay into: every change the
coordinator makes goes through `replay`, so a store rebuilt from the record log is the
same as the live one (timers are not durable: the coordinator re-arms them on load).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Hashable, Iterable, Mapping

TopicId = Hashable  # uuid.UUID from the topic registry; any hashable in unit tests
# A member's partitions: ((topic id, (partition, ...)), ...) sorted by str(topic id).
TopicPartitions = tuple[tuple[TopicId, tuple[int, ...]], ...]


def freeze_partitions(assignment: Mapping[TopicId, Iterable[int]]) -> TopicPartitions:
    return tuple(
        (t, tuple(sorted(ps))) for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0])) if ps
    )


def thaw_partitions(partitions: TopicPartitions) -> dict[TopicId, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in partitions}


# -- group state ------------------------------------------------------------------------


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def label(self) -> str:
        return self.value


# target state -> states it may be entered from (Kafka's ShareGroupState has no
# ASSIGNING/RECONCILING: a share group is Stable as soon as it has members).
VALID_PREVIOUS_STATES: dict[ShareGroupState, frozenset[ShareGroupState]] = {
    ShareGroupState.EMPTY: frozenset({ShareGroupState.STABLE}),
    ShareGroupState.STABLE: frozenset({ShareGroupState.EMPTY}),
    ShareGroupState.DEAD: frozenset({ShareGroupState.EMPTY, ShareGroupState.STABLE}),
}


class IllegalShareGroupTransition(Exception):
    pass


class MemberState(enum.IntEnum):
    """ShareGroupCurrentMemberAssignmentValue.State: share members are always STABLE."""

    STABLE = 0


@dataclass(slots=True)
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned_partitions: dict[TopicId, frozenset[int]] = field(default_factory=dict)

    def snapshot(self) -> tuple:
        return (
            self.member_id, self.member_epoch, self.previous_member_epoch, self.state, self.rack_id,
            self.client_id, self.client_host, tuple(sorted(self.subscribed_topic_names)),
            freeze_partitions(self.assigned_partitions),
        )


@dataclass(slots=True)
class InitializingTopic:
    name: str
    partitions: frozenset[int]
    since_ms: int  # not durable in Kafka either: set when the record is replayed


@dataclass(eq=False)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    state: ShareGroupState = ShareGroupState.EMPTY
    members: dict[str, ShareGroupMember] = field(default_factory=dict)  # join order
    target_assignment: dict[str, dict[TopicId, frozenset[int]]] = field(default_factory=dict)
    initializing: dict[TopicId, InitializingTopic] = field(default_factory=dict)
    initialized: dict[TopicId, tuple[str, frozenset[int]]] = field(default_factory=dict)
    deleting: dict[TopicId, str] = field(default_factory=dict)

    group_type: ClassVar[str] = "share"

    def transition_to(self, target: ShareGroupState) -> None:
        if target == self.state:
            return
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalShareGroupTransition(f"group {self.group_id}: {self.state.label} -> {target.label}")
        self.state = target

    def refresh_state(self) -> None:
        if self.state is ShareGroupState.DEAD:
            return
        self.transition_to(ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY)

    @property
    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topic_names(self) -> set[str]:
        out: set[str] = set()
        for m in self.members.values():
            out.update(m.subscribed_topic_names)
        return out

    def is_assignable(self, topic_id: TopicId, partition: int) -> bool:
        entry = self.initialized.get(topic_id)
        return entry is not None and partition in entry[1]

    def snapshot(self) -> tuple:
        """Everything durable, for comparing a live store with a replayed one."""
        return (
            self.group_id, self.group_epoch, self.metadata_hash, self.assignment_epoch, self.state,
            tuple(m.snapshot() for m in sorted(self.members.values(), key=lambda m: m.member_id)),
            tuple(sorted((k, freeze_partitions(v)) for k, v in self.target_assignment.items())),
            tuple(sorted((str(t), v.name, tuple(sorted(v.partitions))) for t, v in self.initializing.items())),
            tuple(sorted((str(t), n, tuple(sorted(ps))) for t, (n, ps) in self.initialized.items())),
            tuple(sorted((str(t), n) for t, n in self.deleting.items())),
        )


# -- records ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    group_id: str
    member_id: str
    RECORD_TYPE: ClassVar[int] = 10


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group_id: str
    RECORD_TYPE: ClassVar[int] = 11


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    group_id: str
    RECORD_TYPE: ClassVar[int] = 12


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str
    RECORD_TYPE: ClassVar[int] = 13


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str
    RECORD_TYPE: ClassVar[int] = 14


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class TopicPartitionsInfo:
    topic_id: TopicId
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: TopicId
    topic_name: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    group_id: str
    RECORD_TYPE: ClassVar[int] = 15


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    initializing_topics: tuple[TopicPartitionsInfo, ...] = ()
    initialized_topics: tuple[TopicPartitionsInfo, ...] = ()
    deleting_topics: tuple[TopicInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    key: Any
    value: Any | None  # None: tombstone

    @property
    def record_type(self) -> int:
        return self.key.RECORD_TYPE

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


# -- record builders (what Kafka's GroupCoordinatorRecordHelpers build) -------------------


def member_metadata_record(group_id: str, member: ShareGroupMember) -> CoordinatorRecord:
    return CoordinatorRecord(
        ShareGroupMemberMetadataKey(group_id, member.member_id),
        ShareGroupMemberMetadataValue(
            member.rack_id, member.client_id, member.client_host, tuple(member.subscribed_topic_names)
        ),
    )


def member_metadata_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupMemberMetadataKey(group_id, member_id), None)


def group_epoch_record(group_id: str, epoch: int, metadata_hash: int) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupMetadataKey(group_id), ShareGroupMetadataValue(epoch, metadata_hash))


def group_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupMetadataKey(group_id), None)


def target_assignment_member_record(
    group_id: str, member_id: str, partitions: Mapping[TopicId, Iterable[int]]
) -> CoordinatorRecord:
    return CoordinatorRecord(
        ShareGroupTargetAssignmentMemberKey(group_id, member_id),
        ShareGroupTargetAssignmentMemberValue(freeze_partitions(partitions)),
    )


def target_assignment_member_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupTargetAssignmentMemberKey(group_id, member_id), None)


def target_assignment_epoch_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(
        ShareGroupTargetAssignmentMetadataKey(group_id), ShareGroupTargetAssignmentMetadataValue(epoch)
    )


def target_assignment_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupTargetAssignmentMetadataKey(group_id), None)


def current_assignment_record(group_id: str, member: ShareGroupMember) -> CoordinatorRecord:
    return CoordinatorRecord(
        ShareGroupCurrentMemberAssignmentKey(group_id, member.member_id),
        ShareGroupCurrentMemberAssignmentValue(
            member.member_epoch, member.previous_member_epoch, int(member.state),
            freeze_partitions(member.assigned_partitions),
        ),
    )


def current_assignment_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupCurrentMemberAssignmentKey(group_id, member_id), None)


def state_partition_metadata_record(
    group_id: str,
    initializing: Mapping[TopicId, tuple[str, Iterable[int]]],
    initialized: Mapping[TopicId, tuple[str, Iterable[int]]],
    deleting: Mapping[TopicId, str],
) -> CoordinatorRecord:
    def infos(m):
        return tuple(
            TopicPartitionsInfo(t, name, tuple(sorted(ps)))
            for t, (name, ps) in sorted(m.items(), key=lambda kv: str(kv[0]))
        )

    return CoordinatorRecord(
        ShareGroupStatePartitionMetadataKey(group_id),
        ShareGroupStatePartitionMetadataValue(
            infos(initializing), infos(initialized),
            tuple(TopicInfo(t, n) for t, n in sorted(deleting.items(), key=lambda kv: str(kv[0]))),
        ),
    )


def state_partition_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupStatePartitionMetadataKey(group_id), None)


# -- replay -------------------------------------------------------------------------------


class ShareGroupStore:
    """The durable share-group state of one coordinator: groups rebuilt by `replay`."""

    def __init__(self) -> None:
        self.groups: dict[str, ShareGroup] = {}

    def get(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def _group(self, group_id: str) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = ShareGroup(group_id)
            self.groups[group_id] = group
        return group

    def snapshot(self) -> tuple:
        return tuple(self.groups[g].snapshot() for g in sorted(self.groups))


def replay(store: ShareGroupStore, record: CoordinatorRecord, now_ms: int = 0) -> None:
    """Apply one record to the store (Kafka's GroupMetadataManager.replay for share records).

    `now_ms` only stamps initializing topics (their retry timer is not durable)."""
    key, value = record.key, record.value
    gid = key.group_id
    if isinstance(key, ShareGroupMetadataKey):
        if value is None:
            group = store.groups.pop(gid, None)
            if group is not None:
                group.members.clear()
                group.transition_to(ShareGroupState.DEAD)
            return
        group = store._group(gid)
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash
    elif isinstance(key, ShareGroupMemberMetadataKey):
        if value is None:
            group = store.groups.get(gid)
            if group is not None and group.members.pop(key.member_id, None) is not None:
                group.refresh_state()
            return
        group = store._group(gid)
        member = group.members.get(key.member_id)
        if member is None:
            member = ShareGroupMember(key.member_id)
            group.members[key.member_id] = member
        member.rack_id = value.rack_id
        member.client_id = value.client_id
        member.client_host = value.client_host
        member.subscribed_topic_names = tuple(value.subscribed_topic_names)
        group.refresh_state()
    elif isinstance(key, ShareGroupTargetAssignmentMetadataKey):
        group = store.groups.get(gid) if value is None else store._group(gid)
        if group is not None:
            group.assignment_epoch = 0 if value is None else value.assignment_epoch
    elif isinstance(key, ShareGroupTargetAssignmentMemberKey):
        if value is None:
            group = store.groups.get(gid)
            if group is not None:
                group.target_assignment.pop(key.member_id, None)
            return
        store._group(gid).target_assignment[key.member_id] = thaw_partitions(value.topic_partitions)
    elif isinstance(key, ShareGroupCurrentMemberAssignmentKey):
        group = store.groups.get(gid) if value is None else store._group(gid)
        if group is None:
            return
        member = group.members.get(key.member_id)
        if value is None:
            if member is not None:  # the member metadata tombstone follows and removes it
                member.member_epoch, member.previous_member_epoch = -1, -1
                member.assigned_partitions = {}
            return
        if member is None:
            member = ShareGroupMember(key.member_id)
            group.members[key.member_id] = member
            group.refresh_state()
        member.member_epoch = value.member_epoch
        member.previous_member_epoch = value.previous_member_epoch
        member.state = MemberState(value.state)
        member.assigned_partitions = thaw_partitions(value.assigned_partitions)
    elif isinstance(key, ShareGroupStatePartitionMetadataKey):
        if value is None:
            group = store.groups.get(gid)
            if group is not None:
                group.initializing.clear()
                group.initialized.clear()
                group.deleting.clear()
            return
        group = store._group(gid)
        previous = group.initializing
        group.initializing = {
            i.topic_id: InitializingTopic(
                i.topic_name, frozenset(i.partitions),
                previous[i.topic_id].since_ms
                if i.topic_id in previous and previous[i.topic_id].partitions >= frozenset(i.partitions)
                else now_ms,
            )
            for i in value.initializing_topics
        }
        group.initialized = {i.topic_id: (i.topic_name, frozenset(i.partitions)) for i in value.initialized_topics}
        group.deleting = {i.topic_id: i.topic_name for i in value.deleting_topics}
    else:
        raise TypeError(f"not a share group record: {record!r}")


def replay_all(records: Iterable[CoordinatorRecord], now_ms: int = 0) -> ShareGroupStore:
    store = ShareGroupStore()
    for record in records:
        replay(store, record, now_ms)
    return store


__all__ = [
    "CoordinatorRecord",
    "InitializingTopic",
    "MemberState",
    "ShareGroup",
    "ShareGroupCurrentMemberAssignmentKey",
    "ShareGroupCurrentMemberAssignmentValue",
    "ShareGroupMember",
    "ShareGroupMemberMetadataKey",
    "ShareGroupMemberMetadataValue",
    "ShareGroupMetadataKey",
    "ShareGroupMetadataValue",
    "ShareGroupState",
    "ShareGroupStatePartitionMetadataKey",
    "ShareGroupStatePartitionMetadataValue",
    "ShareGroupStore",
    "ShareGroupTargetAssignmentMemberKey",
    "ShareGroupTargetAssignmentMemberValue",
    "ShareGroupTargetAssignmentMetadataKey",
    "ShareGroupTargetAssignmentMetadataValue",
    "TopicInfo",
    "TopicPartitionsInfo",
    "VALID_PREVIOUS_STATES",
    "freeze_partitions",
    "replay",
    "replay_all",
    "thaw_partitions",
]
