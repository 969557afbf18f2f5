"""Committed offsets per group, topic and partition (the model of __consumer_offsets).

Only committed (stable) offsets live here. Transactional offsets that are not yet
committed belong to the transaction model; it tells this store about them through
`pending_transactional_offsets`, a hook the group coordinator consults for
OffsetFetch(require_stable), offset expiration and group deletion.
"""

from __future__ import annotations

from dataclasses import dataclass
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

    def is_expired(self, now_ms: int, base_timestamp_ms: int, retention_ms: int) -> bool:
        if self.expire_timestamp_ms is not None:
            return now_ms >= self.expire_timestamp_ms
        return now_ms - base_timestamp_ms >= retention_ms


# (group_id, topic, partition) -> whether a transactional offset commit is pending there.
PendingTxnOffsetsHook = Callable[[str, str, int], bool]
# group_id -> whether the group has an open transaction with offsets.
OpenTxnHook = Callable[[str], bool]


class OffsetStore:
    def __init__(self) -> None:
        self._offsets: dict[str, dict[str, dict[int, OffsetAndMetadata]]] = {}
        # Seams for the transaction model (defaults: no transactions).
        self.pending_transactional_offsets: PendingTxnOffsetsHook = lambda group, topic, partition: False
        self.has_open_transactions: OpenTxnHook = lambda group: False

    def get(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        return self._offsets.get(group_id, {}).get(topic, {}).get(partition)

    def put(self, group_id: str, topic: str, partition: int, value: OffsetAndMetadata) -> None:
        self._offsets.setdefault(group_id, {}).setdefault(topic, {})[partition] = value

    def remove(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
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
        removed = self._offsets.pop(group_id, {})
        return sum(len(p) for p in removed.values())

    def delete_topic(self, topic: str) -> None:
        """Forget every group's offsets of a deleted topic."""
        for group_id in list(self._offsets):
            topics = self._offsets[group_id]
            topics.pop(topic, None)
            if not topics:
                del self._offsets[group_id]

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        return bool(self.pending_transactional_offsets(group_id, topic, partition))
