"""The broker settings the reference model honours (Kafka's broker config names).

Its own module, apart from ReferenceState (broker_state.py), so that the aggregates the
state builds (group, share-group and transaction coordinators, the topic registry) can
take a BrokerConfig without importing the state that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reference_impl.model import txn_roundtrip
from reference_impl.model.acls import AuthorizerConfig
from reference_impl.model.consumer_group import ConsumerGroupConfig
from reference_impl.model.seeded_bugs import NO_BUGS, SeededBugs
from reference_impl.model.share_partition_config import SharePartitionConfig
from reference_impl.model.transaction_config import TransactionConfig


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
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    group_max_size: int = 2**31 - 1  # group.max.size
    producer_id_expiration_ms: int = 86_400_000  # producer.id.expiration.ms
    producer_id_expiration_check_interval_ms: int = 600_000
    transaction: TransactionConfig = field(default_factory=TransactionConfig)
    # group.consumer.* (KIP-848 consumer groups), Kafka 4.x defaults.
    consumer_group: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    # Share groups (KIP-932), Kafka 4.2 names and defaults.
    group_share_session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    group_share_heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    group_share_max_size: int = 200  # group.share.max.size
    group_share_initialize_retry_interval_ms: int = 30_000  # group.share.initialize.retry.interval.ms
    # group.share.* settings of the share-partition leaders. Kafka 4.4.0 (observed) keeps the
    # delivery count of records released when a session closes.
    share_partition: SharePartitionConfig = field(
        default_factory=lambda: SharePartitionConfig(release_on_close_decrements_delivery_count=False)
    )
    # Finalized feature levels advertised in ApiVersions. transaction.version=1 emulates a
    # cluster without KIP-890 part 2; 2 is Kafka 4.x's default. share.version=1 is what
    # Kafka 4.2 finalizes (share groups on); 0 turns the share-group APIs off
    # (UNSUPPORTED_VERSION), as on a cluster that did not enable them.
    finalized_features: dict[str, int] = field(
        default_factory=lambda: {"transaction.version": 2, "share.version": 1, "group.version": 1}
    )
    # Feature ranges the broker supports: name -> (min, max). share.version 2 is KIP-1289
    # (TxnShareAcknowledge): supported, finalized only when configured or raised by
    # UpdateFeatures (see docs/kip1289.md).
    supported_features: dict[str, tuple[int, int]] = field(
        default_factory=lambda: {
            "transaction.version": (0, 2), "share.version": (0, 2),
            # group.version 1 (Kafka 4.0+ default) turns on the KIP-848 consumer group protocol.
            "group.version": (0, 1),
            # The draft round-trip KIP's blocking add (docs/txn-roundtrip.md): never finalized
            # by default, so the reference behaves as Kafka unless a test raises it.
            txn_roundtrip.FEATURE: txn_roundtrip.SUPPORTED,
        }
    )
    finalized_features_epoch: int = 1  # raised by every UpdateFeatures that changes a level
    # Deliberate bugs (reference:bug=NAME, conformance.power); the same set is in the
    # transaction, share-partition and log configs the aggregates read.
    seeded_bugs: SeededBugs = NO_BUGS
    # authorizer.class.name / super.users and the SASL/PLAIN users of the listener; off by
    # default (reference:authorizer=standard turns it on, model/acls.py).
    authorizer: AuthorizerConfig = field(default_factory=AuthorizerConfig)

    @property
    def consumer_groups_enabled(self) -> bool:
        """Kafka's isConsumerGroupProtocolEnabled: group.version >= 1 is finalized."""
        return int(self.finalized_features.get("group.version", 0)) >= 1

    @property
    def share_groups_enabled(self) -> bool:
        """Kafka's isShareGroupProtocolEnabled: share.version >= 1 is finalized."""
        return int(self.finalized_features.get("share.version", 0)) >= 1
