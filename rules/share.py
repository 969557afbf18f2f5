"""The KIP-932 share-partition rules, once, for every checker that judges share groups.

Two checkers read share-group behaviour: ``checkers.share_group`` over chaos
histories and ``replay.entity_replay`` over recorded traces (``kipcheck check``). Both
call these predicates and name violations through these tables, so a KIP clarification
(which acknowledgements are final, when a delivery count is wrong, when a lock surely
still holds) is one edit here. The reference broker (``reference_impl.model``) is the
implementation, not a checker: only its wire vocabulary (``AcknowledgeType``) and its
configuration default are used here, never its transitions.
"""

from __future__ import annotations

from typing import Any

from reference_impl.model.share_partition import AcknowledgeType
from reference_impl.model.share_partition_config import DEFAULT_DELIVERY_COUNT_LIMIT

DEFAULT_DELIVERY_LIMIT = DEFAULT_DELIVERY_COUNT_LIMIT
"""Kafka's group.share.delivery.count.limit default (the KIP's delivery attempt limit)."""

SETTLING: frozenset[str] = frozenset({"accept", "reject", "gap"})
"""Acknowledgements that end a record's life in the group: ACCEPT -> Acknowledged,
REJECT / GAP -> Archived; such a record is never delivered again (KIP-932.STATE.005/008)."""


_NAME_OF_CODE = {int(t): t.name.lower() for t in AcknowledgeType}


def ack_name(ack: Any) -> str:
    """``1`` / ``AcknowledgeType.ACCEPT`` / ``"ACCEPT"`` -> ``"accept"`` (ValueError if none)."""
    if type(ack) is int and ack in _NAME_OF_CODE:  # the trace checks' hot path: once per acknowledged offset
        return _NAME_OF_CODE[ack]
    if isinstance(ack, str):
        return AcknowledgeType[ack.upper()].name.lower()
    return AcknowledgeType(int(ack)).name.lower()


def _name_or_none(ack: Any) -> str | None:
    try:
        return ack_name(ack)
    except (KeyError, ValueError, TypeError):
        return None  # not an acknowledge type: the broker refuses it, nothing settles


def settles(ack: Any) -> bool:
    """Whether an accepted acknowledgement of this type makes the record final."""
    return _name_or_none(ack) in SETTLING


def renews(ack: Any) -> bool:
    """RENEW (KIP-1222) extends the lock and keeps the member the holder."""
    return _name_or_none(ack) == "renew"


def delivery_count_problem(count: int, limit: int, previous: int | None = None) -> str | None:
    """What is wrong with a delivery's count: ``above-limit`` (outside 1..limit,
    KIP-932.DELIVERY.001), ``decrease`` / ``stall`` (not above the previous delivery's
    count, KIP-932.STATE.003; a policy may allow them after a fail-over, DELIVERY.002)."""
    if count > limit or count < 1:
        return "above-limit"
    if previous is not None and count < previous:
        return "decrease"
    if previous is not None and count == previous:
        return "stall"
    return None


def lock_surely_held(acquired_at: float, at: float, lock_duration: float) -> bool:
    """A lock taken no earlier than ``acquired_at`` surely still holds at ``at``
    (KIP-932.LOCK.001); same unit for all three."""
    return at < acquired_at + lock_duration


def spso_regressed(previous: int | None, spso: int) -> bool:
    """A later start offset below an earlier one (KIP-932.STATE.010: it only advances)."""
    return previous is not None and spso < previous


TRACE_RULE: dict[str, str] = {
    "concurrent-acquisition": "SHARE.DOUBLE_ACQUIRE",
    "delivery-count-above-limit": "SHARE.DELIVERY_COUNT",
    "delivery-count-decrease": "SHARE.DELIVERY_COUNT",
    "delivery-count-stall": "SHARE.DELIVERY_COUNT",
    "redelivery-after-ack": "SHARE.REDELIVERED_FINAL",
    "acquired-below-spso": "SHARE.REDELIVERED_FINAL",
    "non-holder-ack": "SHARE.ACK_NOT_HELD",
    "spso-regression": "SHARE.SPSO_REGRESSED",
}
"""Chaos anomaly type -> the ``kipcheck check`` rule id that judges the same thing."""

RULE_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "SHARE.DOUBLE_ACQUIRE": ("KIP-932.STATE.004", "KIP-932.LOCK.001"),
    "SHARE.DELIVERY_COUNT": ("KIP-932.STATE.003", "KIP-932.DELIVERY.001", "KIP-932.CONFIG.001"),
    "SHARE.REDELIVERED_FINAL": ("KIP-932.STATE.005", "KIP-932.STATE.008"),
    "SHARE.ACK_NOT_HELD": ("KIP-932.ACK.002", "KIP-932.LOCK.002"),
    "SHARE.SPSO_REGRESSED": ("KIP-932.STATE.010",),
}
"""Catalog requirements of each share rule (``replay.check_rules`` reads them from here)."""

REQUIREMENTS: dict[str, tuple[str, ...]] = {
    **{t: RULE_REQUIREMENTS[r] for t, r in TRACE_RULE.items()},
    "lost-record": ("KIP-932.STATE.010", "KIP-932.STATE.011"),
    "unsettled": ("KIP-932.STATE.011",),
}
"""Catalog requirements of each share-group anomaly type of the chaos checker."""


def lock_surely_expired(acquired_by: float, at: float, lock_duration: float) -> bool:
    """A lock taken no later than ``acquired_by`` has surely expired at ``at``
    (acknowledging then fails, KIP-932.LOCK.002)."""
    return at > acquired_by + lock_duration
