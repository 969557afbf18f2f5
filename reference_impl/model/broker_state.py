"""The reference cluster's whole model state: pure data and state machines, no I/O.

Every broker node of the in-process cluster shares one ReferenceState; which node
leads a partition or coordinates a group is itself model data (placement), so a
request sent to the wrong node is answered as Kafka would (NOT_LEADER_OR_FOLLOWER,
NOT_COORDINATOR).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from reference_impl.model.clock import Clock


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class BrokerConfig:
    """Broker settings the model honours; names follow Kafka's broker configs."""

    cluster_id: str = "kipcheck-reference-cluster"
    num_partitions: int = 1  # num.partitions, for auto-created topics
    auto_create_topics_enable: bool = True  # auto.create.topics.enable
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    # Kafka's default is 3000 ms; the reference (like the kafka-native provider) uses 0
    # so that tests do not wait for an empty-group join delay.
    group_initial_rebalance_delay_ms: int = 0
    offsets_retention_minutes: int = 10_080
    # Finalized feature levels advertised in ApiVersions (e.g. transaction.version).
    finalized_features: dict[str, int] = field(default_factory=dict)
    # Feature ranges the broker supports: name -> (min, max).
    supported_features: dict[str, tuple[int, int]] = field(default_factory=dict)


def stable_hash(key: str) -> int:
    return zlib.crc32(key.encode())


class ReferenceState:
    """Aggregate of the reference broker's models."""

    def __init__(self, nodes: list[NodeEndpoint], clock: Clock, config: BrokerConfig | None = None):
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        from reference_impl.model.group_coordinator import GroupCoordinator
        from reference_impl.model.topics import TopicRegistry

        self.nodes = {n.node_id: n for n in nodes}
        self.clock = clock
        self.config = config or BrokerConfig()
        self.alive: set[int] = set(self.nodes)
        self.topics = TopicRegistry(sorted(self.nodes), clock, self.config)
        self.groups = GroupCoordinator(sorted(self.nodes), clock, self.config)

    @property
    def controller_id(self) -> int:
        return min(self.alive or self.nodes)

    def coordinator_for(self, key: str) -> int:
        """Node coordinating a group or transactional id (stable while membership is fixed)."""
        ids = sorted(self.nodes)
        return ids[stable_hash(key) % len(ids)]

    def tick(self) -> None:
        """Fire due timers (session timeouts, rebalance deadlines, ...)."""
        now = self.clock.now_ms()
        self.topics.tick(now)
        self.groups.tick(now)
