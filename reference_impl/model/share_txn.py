"""KIP-1289 rules shared by the share-partition model, the handlers and UpdateFeatures.

Pure: feature gating, the acknowledge types a transaction may stage, which marker resolves
a staging, and which share-state partition a group's staging registers in the transaction.
The readings the reference takes where the KIP is ambiguous are the DIV-1289xx entries of
registers/divergences.yaml.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol

from reference_impl.model.java_hash import partition_for_key

SHARE_VERSION_FEATURE = "share.version"
TRANSACTION_VERSION_FEATURE = "transaction.version"
# "Feature Gating": share.version >= 2 finalises KIP-1289; it is TV2-only.
SHARE_VERSION_TXN_ACK = 2
TRANSACTION_VERSION_REQUIRED = 2
SHARE_STATE_TOPIC = "__share_group_state"
# "only 1 (Accept) and 3 (Reject) are valid inside a transaction"
TXN_ACK_TYPES = frozenset({1, 3})


class FinalizedFeatures(Protocol):
    """The finalized feature levels of a cluster (BrokerConfig.finalized_features)."""

    finalized_features: Mapping[str, int]


def _levels(config: FinalizedFeatures) -> Mapping[str, int]:
    return config.finalized_features or {}


def advertised(config: FinalizedFeatures) -> bool:
    """Brokers advertise api key 93 only when share.version >= 2 is finalized."""
    return int(_levels(config).get(SHARE_VERSION_FEATURE, 0)) >= SHARE_VERSION_TXN_ACK


def refusal(config: FinalizedFeatures) -> str | None:
    """Why a TxnShareAcknowledge cannot be served now (None: it can)."""
    levels = _levels(config)
    if not advertised(config):
        return f"TxnShareAcknowledge needs share.version >= {SHARE_VERSION_TXN_ACK} (finalized: {levels.get(SHARE_VERSION_FEATURE, 0)})."
    if int(levels.get(TRANSACTION_VERSION_FEATURE, 0)) < TRANSACTION_VERSION_REQUIRED:
        return f"TxnShareAcknowledge needs transaction.version >= {TRANSACTION_VERSION_REQUIRED} (KIP-1289 is TV2-only)."
    return None


def marker_resolves(staged: tuple[int, int], marker_producer_id: int, marker_epoch: int) -> bool:
    """A marker (pid, E) resolves records staged by (pid', e) iff pid == pid' and E > e.

    Under TV2 the coordinator bumps the epoch when it ends a transaction (commit, abort,
    timeout or fencing abort), so the marker of the transaction that staged at e carries an
    epoch above e, while the next transaction stages at that bumped epoch: a late duplicate
    of the old marker (epoch == new staging epoch) cannot resolve the newer staging
    (corner cases 3 and 14). An exact-epoch match would never succeed under TV2
    (DIV-128904)."""
    pid, epoch = staged
    return marker_producer_id == pid and marker_epoch > epoch


def state_partition_for(group_id: str, num_partitions: int) -> int:
    """The __share_group_state partition the KIP registers: partitionFor(groupId), Kafka's
    Utils.abs(groupId.hashCode()) % partitions (DIV-128905)."""
    return partition_for_key(group_id, num_partitions)


def downgrade_blocker(pending_count: Callable[[], int]) -> Callable[[str, int, int], str | None]:
    """KIP-1289 "Downgrade": refuse lowering share.version below 2 while records are
    TX_PENDING."""

    def check(feature: str, level: int, current: int) -> str | None:
        if feature != SHARE_VERSION_FEATURE or level >= SHARE_VERSION_TXN_ACK or current < SHARE_VERSION_TXN_ACK:
            return None
        n = pending_count()
        return f"{n} records are TX_PENDING; end their transactions first." if n else None

    return check
