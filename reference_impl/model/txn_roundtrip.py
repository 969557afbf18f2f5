"""The draft KIP on transaction round trips (seed 002): when AddPartitionsToTxn is held.

Pure: the capability level and the rule for parking a client's AddPartitionsToTxn while the
previous transaction's markers are still being written (the draft's "Block Begin
Transaction": the response is held with the marker completion, as Kafka's
DelayedTxnMarker-style purgatories hold a callback, instead of CONCURRENT_TRANSACTIONS).

The draft signals the capability by "bumping AddPartitionToTxn by one"; Kafka has since
spent v4 and v5 on KIP-890, so the reference signals it with a finalized feature level
instead (DIV-200201 in registers/divergences.yaml). Level 0 (the default, absent) is
today's Kafka behaviour.
"""

from __future__ import annotations

from typing import Mapping

from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.seeded_bugs import NO_BUGS, SeededBugs
from reference_impl.model.transaction_log import TransactionLogValue
from reference_impl.model.transaction_state import TransactionState

FEATURE = "transaction.roundtrip.version"
BLOCKING_LEVEL = 1
SUPPORTED = (0, BLOCKING_LEVEL)
# The highest AddPartitionsToTxn version a client sends (v4+ is KIP-890's broker-to-coordinator
# form, which the draft predates and which is never held: DIV-200203).
CLIENT_MAX_VERSION = 3


def blocking_add_enabled(finalized: Mapping[str, int]) -> bool:
    """The cluster finalized the draft's blocking add."""
    return int(finalized.get(FEATURE, 0)) >= BLOCKING_LEVEL


def is_held(value: TransactionLogValue | None, seeded: SeededBugs = NO_BUGS) -> bool:
    """An add for this transactional id must wait: its previous transaction is decided
    (PrepareCommit/PrepareAbort) and its markers are not all written yet."""
    if value is not None and value.state is TransactionState.PREPARE_ABORT and seeded.has(bugs.TXNRT_HOLD_ONLY_AFTER_COMMIT):
        return False  # the deliberate bug (seeded_bugs.py)
    return value is not None and value.state.is_prepare


def may_hold(finalized: Mapping[str, int], api_version: int) -> bool:
    """Whether a request at this AddPartitionsToTxn version may be parked at all."""
    return blocking_add_enabled(finalized) and api_version <= CLIENT_MAX_VERSION
