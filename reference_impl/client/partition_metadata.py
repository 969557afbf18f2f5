"""Leaders and topic ids a client learned from Metadata, refreshed on demand.

Shared by the reference consumer and transactional producer: a partition's leader is
looked up once and cached until a request to it says the leadership moved (`forget`).
"""

from __future__ import annotations

from typing import Any

from reference_impl.client.raw_client import ClusterClient

TopicPartition = tuple[str, int]


class PartitionMetadata:
    def __init__(self, cc: ClusterClient) -> None:
        self._cc = cc
        self.leaders: dict[TopicPartition, int] = {}
        self.topic_ids: dict[str, Any] = {}

    def leader(self, tp: TopicPartition) -> int:
        """The partition leader's node id; LookupError while the partition has none."""
        node = self.leaders.get(tp)
        if node is not None:
            return node
        md = self._cc.refresh([tp[0]])
        for t in md.topics:
            if t.name != tp[0]:
                continue
            self.topic_ids[t.name] = t.topic_id
            for p in t.partitions:
                if int(p.partition_index) == tp[1] and int(p.leader_id) >= 0:
                    self.leaders[tp] = int(p.leader_id)
                    return int(p.leader_id)
        raise LookupError(f"no leader for {tp[0]}-{tp[1]}")

    def forget(self, tp: TopicPartition) -> None:
        """Leadership moved: look the leader up again next time."""
        self.leaders.pop(tp, None)

    def topic_id(self, topic: str) -> Any:
        if topic not in self.topic_ids:
            md = self._cc.refresh([topic])
            for t in md.topics:
                self.topic_ids[t.name] = t.topic_id
        return self.topic_ids[topic]

    def topic_names(self) -> dict[Any, str]:
        """topic id -> name, of the topics looked up so far."""
        return {v: k for k, v in self.topic_ids.items()}
