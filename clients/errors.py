"""The error codes a client retries: the one copy the suites, chaos workloads and wire helpers
share, in kio's vocabulary (``ErrorCode``). The reference broker's own sets are the model's
business (reference_impl/); replay/ keeps its name table of what it retries.

Kafka marks these as ``RetriableException`` subclasses (org.apache.kafka.common.errors); its
clients look the coordinator or the leader up again and resend.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E

# A group, share or transaction coordinator that is loading its partition of the internal
# topic, moving, or not yet elected (FindCoordinator again, then retry).
COORDINATOR_RETRIABLE = frozenset({E.coordinator_load_in_progress, E.coordinator_not_available, E.not_coordinator})

# A partition whose leader moved or is not yet known to the answering broker (refresh the metadata).
LEADER_RETRIABLE = frozenset({E.not_leader_or_follower, E.leader_not_available, E.unknown_topic_or_partition})

# A transaction coordinator settling: the above, or CONCURRENT_TRANSACTIONS while the id's
# previous transaction still completes (markers being written, or an open one being aborted
# when a new instance fences it). Kafka's TransactionManager retries all four.
TXN_SETTLING = COORDINATOR_RETRIABLE | {E.concurrent_transactions}

# Transactional Produce answers a producer retries with the same batch (same sequence:
# idempotent). Kafka 3.6+ answers NOT_ENOUGH_REPLICAS(_AFTER_APPEND) / CONCURRENT_TRANSACTIONS
# while the leader's own AddPartitionsToTxn (verification, or KIP-890's implicit add) cannot
# reach the coordinator yet.
TXN_PRODUCE_RETRIABLE = frozenset({
    E.not_leader_or_follower, E.not_enough_replicas, E.not_enough_replicas_after_append, E.concurrent_transactions,
})
