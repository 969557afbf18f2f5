"""The share coordinator's durable state: an in-model `__share_group_state` log (KIP-932).

Kafka's share coordinator keeps the durable state of each share-partition, keyed by
(group id, topic id, partition), as records on the `__share_group_state` partition that
owns the key. Two record types exist:

* ShareSnapshot (key type 0): the complete state -- snapshot epoch, state epoch, leader
  epoch, start offset (SPSO), the non-Acquired in-flight state batches, and (Kafka 4.x)
  create / write timestamps.
* ShareUpdate (key type 1): a delta -- snapshot epoch of the latest snapshot, leader
  epoch, start offset (-1 = unchanged) and the state batches that changed. It carries no
  state epoch.

The current state of a share-partition is its latest ShareSnapshot with the ShareUpdates
after it merged in. A deletion writes a tombstone: a ShareSnapshot key with no value
(Kafka 4.x); the KIP instead describes a ShareSnapshot with snapshot epoch -1, which
replay also treats as a deletion.

This module keeps those records as plain data; `ShareCoordinator.replay(record)` applies
each one both when it is written and when a coordinator is rebuilt from the log.

Modelling choices (deviations from Kafka's bytes on disk):
* Values carry `delivery_complete_count` (WriteShareGroupState v1 / ReadShareGroupStateSummary
  v1, -1 = unknown) although Kafka's 4.1 record schemas have no such field.
* All keys share one log; `state_partition_for(key)` still computes the
  `__share_group_state` partition (Utils.abs(javaHashCode("group:topicId:partition")) %
  share.coordinator.state.topic.num.partitions) for placement and describing.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Iterator

from reference_impl.model.java_hash import java_string_hash, kafka_abs

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
DEFAULT_STATE_TOPIC_PARTITIONS = 50  # share.coordinator.state.topic.num.partitions
UNINITIALIZED_START_OFFSET = -1
NO_DELIVERY_COMPLETE_COUNT = -1
DELETION_MARKER_SNAPSHOT_EPOCH = -1  # the KIP's deletion marker (Kafka writes a tombstone)


class DeliveryState(IntEnum):
    """Per-record delivery state; only AVAILABLE, ACKNOWLEDGED and ARCHIVED are persisted."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3
    ARCHIVED = 4


class RecordType(IntEnum):
    """Coordinator record key type (the KIP's "version" of the key)."""

    SHARE_SNAPSHOT = 0
    SHARE_UPDATE = 1


def kafka_uuid_str(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """Inverse of `kafka_uuid_str` (also accepts the dashed hex form)."""
    if len(text) == 22:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    return uuid.UUID(text)


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """The FindCoordinator SHARE key of a share-partition: "group:topicId:partition"."""
    return f"{group_id}:{kafka_uuid_str(topic_id)}:{partition}"


def state_partition_for(key: str, num_partitions: int = DEFAULT_STATE_TOPIC_PARTITIONS) -> int:
    """The `__share_group_state` partition holding a coordinator key's records."""
    return kafka_abs(java_string_hash(key)) % num_partitions


@dataclass(frozen=True, slots=True, order=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    @property
    def coordinator_key(self) -> str:
        return coordinator_key(self.group_id, self.topic_id, self.partition)

    def state_partition(self, num_partitions: int = DEFAULT_STATE_TOPIC_PARTITIONS) -> int:
        return state_partition_for(self.coordinator_key, num_partitions)


@dataclass(frozen=True, slots=True, order=True)
class StateBatch:
    """A run of offsets [first_offset, last_offset] sharing one delivery state and count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int

    def __post_init__(self) -> None:
        if self.last_offset < self.first_offset:
            raise ValueError(f"state batch {self.first_offset}..{self.last_offset} is empty")

    @property
    def priority(self) -> tuple[int, int]:
        """Kafka's merge priority of overlapping batches: delivery count, then state."""
        return (self.delivery_count, self.delivery_state)


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()
    create_timestamp: int = 0
    write_timestamp: int = 0
    delivery_complete_count: int = NO_DELIVERY_COMPLETE_COUNT

    @property
    def is_deletion_marker(self) -> bool:
        return self.snapshot_epoch == DELETION_MARKER_SNAPSHOT_EPOCH


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: unchanged
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = NO_DELIVERY_COMPLETE_COUNT


@dataclass(frozen=True, slots=True)
class ShareStateRecord:
    """One `__share_group_state` record. `value` None: tombstone (state deleted)."""

    record_type: RecordType
    key: SharePartitionKey
    value: ShareSnapshotValue | ShareUpdateValue | None
    offset: int = -1
    timestamp_ms: int = -1

    def __post_init__(self) -> None:
        if self.record_type is RecordType.SHARE_UPDATE and not isinstance(self.value, ShareUpdateValue):
            raise ValueError("a ShareUpdate record needs a ShareUpdateValue")
        if self.record_type is RecordType.SHARE_SNAPSHOT and not isinstance(self.value, (ShareSnapshotValue, type(None))):
            raise ValueError("a ShareSnapshot record needs a ShareSnapshotValue or None")

    @property
    def is_snapshot(self) -> bool:
        return self.record_type is RecordType.SHARE_SNAPSHOT

    @property
    def is_update(self) -> bool:
        return self.record_type is RecordType.SHARE_UPDATE

    @property
    def is_tombstone(self) -> bool:
        return self.value is None

    @property
    def is_deletion(self) -> bool:
        """Tombstone (Kafka) or snapshot-epoch -1 marker (KIP)."""
        return self.value is None or (isinstance(self.value, ShareSnapshotValue) and self.value.is_deletion_marker)


def snapshot_record(key: SharePartitionKey, value: ShareSnapshotValue, timestamp_ms: int = -1) -> ShareStateRecord:
    return ShareStateRecord(RecordType.SHARE_SNAPSHOT, key, value, timestamp_ms=timestamp_ms)


def update_record(key: SharePartitionKey, value: ShareUpdateValue, timestamp_ms: int = -1) -> ShareStateRecord:
    return ShareStateRecord(RecordType.SHARE_UPDATE, key, value, timestamp_ms=timestamp_ms)


def tombstone_record(key: SharePartitionKey, timestamp_ms: int = -1) -> ShareStateRecord:
    return ShareStateRecord(RecordType.SHARE_SNAPSHOT, key, None, timestamp_ms=timestamp_ms)


@dataclass(slots=True)
class ShareStateLog:
    """Append-only record list (the model's `__share_group_state`, all partitions).

    Offsets are assigned on append and never reused; `delete_records_before` models the
    coordinator's pruning with delete-records (retention is unlimited, no compaction).
    """

    records: list[ShareStateRecord] = field(default_factory=list)
    log_start_offset: int = 0
    _next_offset: int = 0

    def append(self, record: ShareStateRecord) -> ShareStateRecord:
        stored = ShareStateRecord(record.record_type, record.key, record.value, self._next_offset, record.timestamp_ms)
        self._next_offset += 1
        self.records.append(stored)
        return stored

    @property
    def end_offset(self) -> int:
        return self._next_offset

    def delete_records_before(self, offset: int) -> int:
        """Drop records below `offset`; returns the new log start offset."""
        if offset > self.log_start_offset:
            self.records = [r for r in self.records if r.offset >= offset]
            self.log_start_offset = min(offset, self._next_offset)
        return self.log_start_offset

    def records_for(self, key: SharePartitionKey) -> list[ShareStateRecord]:
        return [r for r in self.records if r.key == key]

    def __iter__(self) -> Iterator[ShareStateRecord]:
        return iter(list(self.records))

    def __len__(self) -> int:
        return len(self.records)


__all__ = [
    "DEFAULT_STATE_TOPIC_PARTITIONS",
    "DELETION_MARKER_SNAPSHOT_EPOCH",
    "NO_DELIVERY_COMPLETE_COUNT",
    "SHARE_GROUP_STATE_TOPIC",
    "UNINITIALIZED_START_OFFSET",
    "DeliveryState",
    "RecordType",
    "SharePartitionKey",
    "ShareSnapshotValue",
    "ShareStateLog",
    "ShareStateRecord",
    "ShareUpdateValue",
    "StateBatch",
    "coordinator_key",
    "java_string_hash",
    "kafka_abs",
    "kafka_uuid_str",
    "parse_kafka_uuid",
    "snapshot_record",
    "state_partition_for",
    "tombstone_record",
    "update_record",
]
