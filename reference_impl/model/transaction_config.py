"""The transaction coordinator's settings (Kafka's transaction.* broker configs).

Its own module so that BrokerConfig (broker_config.py) carries them without importing the
coordinator, which itself reads the topic registry that takes a BrokerConfig.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.model.seeded_bugs import NO_BUGS, SeededBugs


@dataclass(slots=True)
class TransactionConfig:
    """Transaction coordinator settings (Kafka's broker config names and defaults)."""

    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_state_log_num_partitions: int = 50  # transaction.state.log.num.partitions
    transaction_partition_verification_enable: bool = True  # transaction.partition.verification.enable
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions (group participants' partition)
    # Model-only: delay between the durable decision and the markers being written.
    # 0 = at the next tick; None = within the EndTxn/abort itself.
    marker_delay_ms: int | None = 0
    # Model-only (Kafka has no such config): how long a restarted coordinator node spends
    # loading its transactional ids from the transaction log, answering
    # COORDINATOR_LOAD_IN_PROGRESS meanwhile, as Kafka does while it loads a
    # __transaction_state partition (whose duration depends on the log's size).
    load_duration_ms: int = 500
    # Model-only (the draft round-trip KIP, docs/txn-roundtrip.md): the longest a client's
    # AddPartitionsToTxn is held while the previous transaction's markers are pending, when
    # transaction.roundtrip.version is finalized; then CONCURRENT_TRANSACTIONS as today
    # (DIV-200202). Below the clients' default request.timeout.ms (30 s).
    add_partitions_hold_max_ms: int = 10_000
    # Deliberate bugs (reference:bug=NAME; seeded_bugs.py).
    seeded_bugs: SeededBugs = NO_BUGS
