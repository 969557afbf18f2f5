"""The reference cluster's whole model state: pure data and state machines, no I/O.

Every broker node of the in-process cluster shares one ReferenceState; which node
leads a partition or coordinates a group is itself model data (placement), so a
request sent to the wrong node is answered as Kafka would (NOT_LEADER_OR_FOLLOWER,
NOT_COORDINATOR).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import AbstractSet, Callable

from reference_impl.model import share_txn
from reference_impl.model.acls import AclStore
from reference_impl.model.broker_config import BrokerConfig
from reference_impl.model.clock import Clock
from reference_impl.model.group_configs import GroupConfigBounds, GroupConfigs
from reference_impl.model.group_coordinator import GroupCoordinator
from reference_impl.model.producer_ids import ProducerIdManager
from reference_impl.model.producer_state import ProducerStateManager
from reference_impl.model.share_coordinator import ShareCoordinator, ShareCoordinatorConfig, topic_exists_in
from reference_impl.model.share_group import ShareGroupCoordinator
from reference_impl.model.share_partition_manager import SharePartitionId, SharePartitionManager
from reference_impl.model.topics import TopicRegistry
from reference_impl.model.transaction_coordinator import TransactionCoordinator


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def stable_hash(key: str) -> int:
    return zlib.crc32(key.encode())


class ReferenceState:
    """Aggregate of the reference broker's models."""

    def __init__(self, nodes: list[NodeEndpoint], clock: Clock, config: BrokerConfig | None = None):
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        self.nodes = {n.node_id: n for n in nodes}
        self.clock = clock
        self.config = config or BrokerConfig()
        self.alive: set[int] = set(self.nodes)
        self.acls = AclStore(self.config.authorizer)  # cluster metadata: one store for every node
        self.topics = TopicRegistry(sorted(self.nodes), clock, self.config)
        self.topics.producer_state_factory = lambda topic, partition: ProducerStateManager(self.config)
        self.groups = GroupCoordinator(sorted(self.nodes), clock, self.config)
        # Dynamic group configs (IncrementalAlterConfigs on the GROUP resource).
        self.group_configs = GroupConfigs(GroupConfigBounds(self.config.share_partition))
        self.groups.consumer.group_config = self.group_configs.get  # consumer.session.timeout.ms, ...
        # The share coordinator's persister state (`__share_group_state` semantics).
        self.share_coordinator = ShareCoordinator(
            clock, ShareCoordinatorConfig(seeded_bugs=self.config.seeded_bugs), topic_exists=topic_exists_in(self.topics))
        # Share-partition leaders and share sessions (ShareFetch / ShareAcknowledge).
        self.share_partitions = SharePartitionManager(self.share_coordinator, self.config.share_partition)
        self.share_partitions.group_configs = self.group_configs.all
        # Share groups (KIP-932) share the group-id namespace with classic groups: a share
        # heartbeat on a classic group id is GROUP_ID_NOT_FOUND (the `other_group_type` hook),
        # JoinGroup on a share group id is INCONSISTENT_GROUP_PROTOCOL (`group_type`, checked
        # by the classic handlers). As in Kafka, the group coordinator initialises
        # share-partition state through the share coordinator (InitializeShareGroupState)
        # before assigning partitions, resets it (AlterShareGroupOffsets) and deletes it
        # (DeleteGroups, DeleteShareGroupOffsets); the leaders then reload it.
        self.share_groups = ShareGroupCoordinator(
            sorted(self.nodes),
            clock,
            self.config,
            self.topics,
            other_group_type=self.groups.group_type,
            group_config=self.group_configs.get,
            persister=self.share_coordinator,
            on_state_reset=self.share_partitions.forget_group_topic,
        )
        self.groups.other_group_type = self.share_groups.group_type  # one group-id namespace
        self.producer_ids = ProducerIdManager()
        self.transactions = TransactionCoordinator(
            sorted(self.nodes), clock, self.config, self.topics, self.groups, producer_ids=self.producer_ids
        )
        # KIP-1289: markers for a registered __share_group_state partition resolve TX_PENDING.
        self.transactions.share_txn_markers = self._share_state_marker

    @property
    def controller_id(self) -> int:
        return min(self.alive or self.nodes)

    def preferred_coordinator(self, key: str) -> int:
        """The node that coordinates a key while every node is up (the preferred leader of
        the key's partition of __consumer_offsets / __transaction_state / __share_group_state)."""
        ids = sorted(self.nodes)
        return ids[stable_hash(key) % len(ids)]

    def coordinator_for(self, key: str, alive: AbstractSet[int] | None = None) -> int:
        """Node coordinating a group, transactional id or share-partition key: the preferred
        node, or while it is down the next live node after it (the internal topics are
        replicated to every node, so leadership -- and coordination -- fails over).
        `alive` defaults to the nodes up now."""
        live = self.alive if alive is None else alive
        ids = sorted(self.nodes)
        start = ids.index(self.preferred_coordinator(key))
        for i in range(len(ids)):
            node = ids[(start + i) % len(ids)]
            if node in live:
                return node
        return ids[start]

    def group_type(self, group_id: str) -> str | None:
        """Which coordinator owns a group id: "share", "classic", "consumer", or None."""
        if self.share_groups.group_type(group_id) is not None:
            return "share"
        return self.groups.group_type(group_id)

    def tick(self) -> None:
        """Fire due timers (session timeouts, rebalance deadlines, ...)."""
        now = self.clock.now_ms()
        # Leaders follow liveness before the coordinators' timers run: a transaction's markers
        # wait while a partition has no live leader, as Kafka's WriteTxnMarkers to it would.
        self.topics.sync_liveness(self.alive)
        self.topics.tick(now)
        self.groups.tick(now)
        self.share_groups.tick(now)
        self.share_partitions.tick(now)
        self.transactions.tick(now)

    def on_node_restart(self, node_id: int) -> None:
        """A stopped node starts again and takes its coordinators back: the transactional ids
        it prefers are reloaded from the transaction log (COORDINATOR_LOAD_IN_PROGRESS for
        `load_duration_ms`)."""
        self.transactions.begin_load(lambda tid: self.preferred_coordinator(tid) == node_id, self.clock.now_ms())

    def on_node_down(self, node_id: int) -> None:
        """A node became unreachable but keeps its memory (the `isolate` fault): another node
        takes over the transactional ids it coordinated and loads them from the transaction
        log first, as a new partition leader of __transaction_state does."""
        owner = self._owner_snapshot()
        self.alive.discard(node_id)
        self._forget_txn_pending(node_id)
        if self.alive:
            self.transactions.begin_load(lambda tid: owner(tid) == node_id, self.clock.now_ms())

    def on_node_crash(self, node_id: int) -> None:
        """A node's process died (kill -9): every cache it owned is lost and rebuilt from
        the persisted records by whoever owns them next, as Kafka's coordinators load on
        election (TransactionStateManager.loadTransactionsForTxnTopicPartition,
        GroupCoordinatorShard / ShareCoordinatorShard replay) and a new share-partition
        leader initialises from ReadShareGroupState. Partition logs are replicated, so
        they survive. Ownership is taken before the node leaves the live set."""
        owner = self._owner_snapshot()
        self.share_partitions.crash(node_id, self._led_by(node_id))
        if self.share_coordinator is not None:  # None: a test runs the leaders without persister
            self.share_coordinator.reload(lambda key: owner(key.coordinator_key) == node_id)
        self.share_groups.reload(lambda gid: owner(gid) == node_id)
        self.on_node_down(node_id)  # transaction state: dropped and replayed there

    def _owner_snapshot(self) -> Callable[[str], int]:
        """coordinator_for as it is now (before a node leaves the live set)."""
        alive = frozenset(self.alive)
        return lambda key: self.coordinator_for(key, alive)

    def _share_state_marker(self, producer_id: int, epoch: int, committed: bool, now_ms: int, state_partition: int) -> int:
        """The coordinator's marker for __share_group_state-N reaches the share-partitions of
        the groups whose stagings register N (share_txn.state_partition_for), no others."""
        n = self.share_coordinator.config.state_topic_num_partitions
        return self.share_partitions.apply_txn_marker(
            producer_id, epoch, committed, now_ms, only=lambda key: share_txn.state_partition_for(key[0], n) == state_partition)

    def share_partitions_led_by(self, node_id: int) -> Callable[[SharePartitionId], bool]:
        """Whether a share-partition's leader is `node_id` (a WriteTxnMarkers reaching that
        node is offered to these only: KIP-1289 broadcasts "on that broker")."""
        led_here = self._led_by(node_id)

        def on_node(key: SharePartitionId) -> bool:
            topic = self.topics.by_id(key[1])
            return topic is not None and led_here(topic.name, key[2])

        return on_node

    def _led_by(self, node_id: int) -> Callable[[str, int], bool]:
        """Whether a partition's leader is `node_id`."""

        def led_here(topic: str, partition: int) -> bool:
            part = self.topics.partition(topic, partition)
            return part is not None and part.leader == node_id

        return led_here

    def _forget_txn_pending(self, node_id: int) -> None:
        """KIP-1289 corner cases 1 and 12: TX_PENDING is in the share-partition leader's memory
        only; a leader that stops loses it (the partition reloads from the share coordinator)."""
        led_here = self._led_by(node_id)
        self.share_partitions.forget_txn_pending(led_here)
        self.share_partitions.broken_leader_moved(led_here)

    def on_disconnect(self, connection_id: int) -> None:
        """A client connection closed: its share sessions end and release their records."""
        self.share_partitions.release_connection(connection_id)
