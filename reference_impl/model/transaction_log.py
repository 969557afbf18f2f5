"""The transaction coordinator's durable state: an in-model `__transaction_state` log.

Kafka's coordinator writes every state change of a transactional id as a record
(key: TransactionLogKey = transactional id; value: TransactionLogValue) to the
`__transaction_state` partition that owns the id, and rebuilds its cache on
fail-over by replaying that partition. A tombstone (value None) removes an expired
transactional id. This module keeps those records as plain data; the coordinator
applies each one through `TransactionCoordinator.replay(record)`, both when it
writes it and when a new coordinator is rebuilt from the log.

Modelling choices (deviations from Kafka's bytes on disk):
* The value carries `last_producer_epoch` explicitly, and the consumer-group
  participants (added by AddOffsetsToTxn / TxnOffsetCommit) as a separate tuple of
  group ids instead of `__consumer_offsets` partitions: the reference's
  `__consumer_offsets` topic carries no group records (only transaction markers).
* All ids share one log; `partition_for(tid)` still computes Kafka's partition
  (`abs(java hashCode) % transaction.state.log.num.partitions`) for describing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from reference_impl.model.transaction_state import TransactionState
from reference_impl.model.java_hash import partition_for_key

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def partition_for(transactional_id: str, num_partitions: int = 50) -> int:
    """Kafka's `__transaction_state` partition of a transactional id (Utils.abs semantics)."""
    return partition_for_key(transactional_id, num_partitions)


@dataclass(frozen=True, slots=True)
class TransactionLogKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """One durable snapshot of a transactional id's metadata (TransactionLogValue)."""

    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    # ((topic, (partition, ...)), ...), sorted: the data partitions taking part.
    topic_partitions: tuple[tuple[str, tuple[int, ...]], ...]
    # Consumer groups taking part (stand-ins for their __consumer_offsets partitions).
    groups: tuple[str, ...]
    transaction_start_timestamp_ms: int
    transaction_last_update_timestamp_ms: int
    client_transaction_version: int  # 0/1 = legacy (TV0/TV1), 2 = TV2

    def partition_set(self) -> frozenset[tuple[str, int]]:
        return frozenset((t, p) for t, ps in self.topic_partitions for p in ps)


def group_partitions(partitions: frozenset[tuple[str, int]] | set[tuple[str, int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))


@dataclass(frozen=True, slots=True)
class TransactionLogRecord:
    key: TransactionLogKey
    value: TransactionLogValue | None  # None: tombstone (transactional id expired)
    offset: int = -1
    coordinator_epoch: int = 0
    timestamp_ms: int = -1

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


@dataclass(slots=True)
class TransactionLog:
    """Append-only record list (the model's `__transaction_state`)."""

    records: list[TransactionLogRecord] = field(default_factory=list)

    def append(self, record: TransactionLogRecord) -> TransactionLogRecord:
        stored = TransactionLogRecord(
            key=record.key,
            value=record.value,
            offset=len(self.records),
            coordinator_epoch=record.coordinator_epoch,
            timestamp_ms=record.timestamp_ms,
        )
        self.records.append(stored)
        return stored

    def __iter__(self) -> Iterator[TransactionLogRecord]:
        return iter(list(self.records))

    def __len__(self) -> int:
        return len(self.records)

    def latest(self) -> dict[str, TransactionLogValue]:
        """What compaction would keep: the last value per transactional id."""
        out: dict[str, TransactionLogValue] = {}
        for r in self.records:
            if r.value is None:
                out.pop(r.key.transactional_id, None)
            else:
                out[r.key.transactional_id] = r.value
        return out


__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TransactionLog",
    "TransactionLogKey",
    "TransactionLogRecord",
    "TransactionLogValue",
    "group_partitions",
    "partition_for",
]
