"""Committed offsets per group, topic and partition (the model of __consumer_offsets).

Two stores, as Kafka 4.x's OffsetMetadataManager keeps them:

* committed (stable) offsets: group -> topic -> partition -> OffsetAndMetadata;
* pending transactional offsets (KIP-447), written by TxnOffsetCommit and keyed by
  (group, producer id), plus the set of producers with an open transaction per group.
  They are invisible to OffsetFetch until the transaction's commit marker moves them to
  the committed store (`complete_transaction(committed=True)`); an abort drops them.

Every write gets a `record_offset`, the position the record would have in the
__consumer_offsets log. Kafka uses it to decide between a transactional commit and a
later plain commit of the same partition: on the commit marker a pending offset is only
materialised when it was written after the committed one it would replace.

A deletion of a committed offset (group deletion, topic deletion, expiration) behaves as
Kafka's offset tombstone: it also drops the pending transactional offsets of that
partition, but the producers stay "open" in the group until their marker arrives.

The hooks `pending_transactional_offsets` and `has_open_transactions` default to this
store's own pending-offset bookkeeping; they stay assignable for tests.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Callable, Iterator

NO_METADATA = ""
INVALID_OFFSET = -1


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    committed_offset: int
    leader_epoch: int | None  # None when the committer sent -1
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None  # only from OffsetCommit v2-v4 retention_time
    # Position of the record in the modelled __consumer_offsets log; -1 until stored.
    record_offset: int = -1

    def is_expired(self, now_ms: int, base_timestamp_ms: int, retention_ms: int) -> bool:
        if self.expire_timestamp_ms is not None:
            return now_ms >= self.expire_timestamp_ms
        return now_ms - base_timestamp_ms >= retention_ms


# (group_id, topic, partition) -> whether a transactional offset commit is pending there.
PendingTxnOffsetsHook = Callable[[str, str, int], bool]
# group_id -> whether the group has an open transaction with offsets.
OpenTxnHook = Callable[[str], bool]


# topic -> partition -> offset
TopicOffsets = dict[str, dict[int, OffsetAndMetadata]]


class OffsetStore:
    def __init__(self) -> None:
        self._offsets: dict[str, TopicOffsets] = {}
        # (group, producer id) -> pending transactional offsets of that producer's open transaction.
        self._pending: dict[tuple[str, int], TopicOffsets] = {}
        # group -> producer ids with an open transaction that wrote offsets for the group.
        self._open: dict[str, set[int]] = {}
        self._record_offsets = itertools.count()
        # Seams consulted by the group coordinator (OffsetFetch require_stable, expiration).
        self.pending_transactional_offsets: PendingTxnOffsetsHook = self.has_pending_transactional_offset
        self.has_open_transactions: OpenTxnHook = self.has_open_transaction

    def get(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        return self._offsets.get(group_id, {}).get(topic, {}).get(partition)

    def _stamp(self, value: OffsetAndMetadata) -> OffsetAndMetadata:
        if value.record_offset >= 0:
            return value
        return replace(value, record_offset=next(self._record_offsets))

    def put(self, group_id: str, topic: str, partition: int, value: OffsetAndMetadata) -> None:
        """Store a committed offset (a value without a record offset gets the next one)."""
        self._offsets.setdefault(group_id, {}).setdefault(topic, {})[partition] = self._stamp(value)

    def remove(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        """Tombstone one partition's offset (pending transactional offsets included)."""
        self.remove_pending_partition(group_id, topic, partition)
        topics = self._offsets.get(group_id)
        if topics is None:
            return None
        partitions = topics.get(topic)
        if partitions is None:
            return None
        value = partitions.pop(partition, None)
        if not partitions:
            del topics[topic]
        if not topics:
            del self._offsets[group_id]
        return value

    def has_offsets(self, group_id: str) -> bool:
        return group_id in self._offsets

    def group_offsets(self, group_id: str) -> dict[str, dict[int, OffsetAndMetadata]]:
        """topic -> partition -> offset, in commit order (a view; do not mutate)."""
        return self._offsets.get(group_id, {})

    def entries(self, group_id: str) -> Iterator[tuple[str, int, OffsetAndMetadata]]:
        for topic, partitions in list(self._offsets.get(group_id, {}).items()):
            for partition, value in list(partitions.items()):
                yield topic, partition, value

    def delete_group(self, group_id: str) -> int:
        """Tombstone every committed and pending offset of the group; returns how many
        partitions were deleted (a partition with both counts once, as in Kafka)."""
        removed = self._offsets.pop(group_id, {})
        count = sum(len(p) for p in removed.values())
        for producer_id in self._open.get(group_id, ()):
            pending = self._pending.pop((group_id, producer_id), {})
            for topic, partitions in pending.items():
                count += sum(1 for p in partitions if p not in removed.get(topic, {}))
        return count

    def delete_topic(self, topic: str) -> None:
        """Forget every group's committed and pending offsets of a deleted topic."""
        for group_id in list(self._offsets):
            topics = self._offsets[group_id]
            topics.pop(topic, None)
            if not topics:
                del self._offsets[group_id]
        for key in list(self._pending):
            self._pending[key].pop(topic, None)
            if not self._pending[key]:
                del self._pending[key]

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        return bool(self.pending_transactional_offsets(group_id, topic, partition))

    # -- pending transactional offsets (KIP-447) ------------------------------------------

    def put_pending(self, group_id: str, producer_id: int, topic: str, partition: int, value: OffsetAndMetadata) -> None:
        """Record a transactional offset of `producer_id`'s open transaction (replaces an
        earlier one of the same transaction for the partition)."""
        key = (group_id, int(producer_id))
        self._pending.setdefault(key, {}).setdefault(topic, {})[partition] = self._stamp(value)
        self._open.setdefault(group_id, set()).add(int(producer_id))

    def pending_offset(self, group_id: str, producer_id: int, topic: str, partition: int) -> OffsetAndMetadata | None:
        return self._pending.get((group_id, int(producer_id)), {}).get(topic, {}).get(partition)

    def pending_offsets(self, group_id: str, producer_id: int) -> TopicOffsets:
        """topic -> partition -> pending offset of one producer in one group (a view)."""
        return self._pending.get((group_id, int(producer_id)), {})

    def open_transactions(self, group_id: str) -> frozenset[int]:
        """Producer ids with an open transaction that committed offsets for the group."""
        return frozenset(self._open.get(group_id, ()))

    def groups_with_open_transactions(self) -> list[str]:
        return list(self._open)

    def has_pending_transactional_offset(self, group_id: str, topic: str, partition: int) -> bool:
        for producer_id in self._open.get(group_id, ()):
            if partition in self._pending.get((group_id, producer_id), {}).get(topic, {}):
                return True
        return False

    def has_open_transaction(self, group_id: str) -> bool:
        return bool(self._open.get(group_id))

    def remove_pending_partition(self, group_id: str, topic: str, partition: int) -> None:
        """Tombstone semantics for pending offsets: drop every open transaction's offset of
        the partition (the producers stay open in the group)."""
        for producer_id in self._open.get(group_id, ()):
            topics = self._pending.get((group_id, producer_id))
            if topics is None or partition not in topics.get(topic, {}):
                continue
            del topics[topic][partition]
            if not topics[topic]:
                del topics[topic]
            if not topics:
                del self._pending[(group_id, producer_id)]

    def complete_transaction(
        self, group_id: str, producer_id: int, committed: bool
    ) -> list[tuple[str, int, OffsetAndMetadata]]:
        """End `producer_id`'s open transaction in the group (its marker was written).

        Commit: each pending offset becomes the committed offset unless the committed one
        was written later (higher record offset), as Kafka's replayEndTransactionMarker
        does. Abort: pending offsets are dropped. Returns the offsets materialised.
        """
        producer_id = int(producer_id)
        pending = self._pending.pop((group_id, producer_id), {})
        producers = self._open.get(group_id)
        if producers is not None:
            producers.discard(producer_id)
            if not producers:
                del self._open[group_id]
        if not committed:
            return []
        materialised = []
        for topic, partitions in pending.items():
            for partition, value in partitions.items():
                existing = self.get(group_id, topic, partition)
                if existing is None or value.record_offset > existing.record_offset:
                    self.put(group_id, topic, partition, value)
                    materialised.append((topic, partition, value))
        return materialised
