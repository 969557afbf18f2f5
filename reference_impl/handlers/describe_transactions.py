"""DescribeTransactions (key 65), v0 (KIP-664).

Per transactional id, as Kafka 4.x's TransactionCoordinator.handleDescribeTransactions:
NOT_COORDINATOR when this node does not coordinate the id, TRANSACTIONAL_ID_NOT_FOUND for
an unknown id or one being expired (state Dead), the coordinator's own error (e.g.
COORDINATOR_LOAD_IN_PROGRESS) when it reports one; otherwise the state name, producer id
and epoch, timeout, start time (-1 when no transaction is open) and the partitions of
the transaction grouped by topic.

The transaction coordinator model (`state.transactions`) is read through
`describe(transactional_id)`, whose answer is a `TransactionDescription`; the state-name
helpers below also serve ListTransactions.
"""

from __future__ import annotations

import datetime
import enum

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.transaction_coordinator import TransactionDescription
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS

# Kafka's TransactionState names, by a case- and underscore-insensitive key.
KAFKA_STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                     "PrepareEpochFence", "Dead")
_BY_KEY = {n.lower(): n for n in KAFKA_STATE_NAMES}


def state_name(state: str | enum.Enum) -> str:
    """Kafka's spelling of a transaction state given as a string or an enum member (by name)."""
    key = state if isinstance(state, str) else state.name
    name = _BY_KEY.get(key.replace("_", "").lower())
    return name if name is not None else str(state)


def canonical_state_filter(name: str) -> str | None:
    """The state a ListTransactions filter names (Kafka matches names exactly)."""
    return name if name in KAFKA_STATE_NAMES else None


def timeout_delta(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def epoch_datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


def topic_partitions(described: TransactionDescription) -> dict[str, list[int]]:
    """topic -> sorted partitions of a described transaction."""
    out: dict[str, set[int]] = {}
    for topic, partitions in described.topics:
        out.setdefault(str(topic), set()).update(int(p) for p in partitions)
    return {topic: sorted(out[topic]) for topic in sorted(out)}


def _empty(ctx: RequestContext, transactional_id: str, error: ErrorCode):
    # Kafka leaves the other fields at their defaults on an error.
    return ctx.nested(
        "TransactionState", error_code=error, transactional_id=transactional_id, transaction_state="",
        transaction_timeout=timeout_delta(0), transaction_start_time=epoch_datetime(0),
        producer_id=0, producer_epoch=0, topics=(),
    )


def _describe_one(ctx: RequestContext, transactional_id: str):
    if not is_coordinator(ctx, transactional_id):
        return _empty(ctx, transactional_id, ErrorCode.not_coordinator)
    described = ctx.state.transactions.describe(transactional_id)
    if described.error != ErrorCode.none:
        return _empty(ctx, transactional_id, ErrorCode(int(described.error)))
    name = state_name(described.state)
    if name == "Dead":  # being expired: Kafka ignores it
        return _empty(ctx, transactional_id, ErrorCode.transactional_id_not_found)
    topics = topic_partitions(described)
    return ctx.nested(
        "TransactionState",
        error_code=ErrorCode.none,
        transactional_id=transactional_id,
        transaction_state=name,
        transaction_timeout=timeout_delta(int(described.transaction_timeout_ms)),
        transaction_start_time=epoch_datetime(int(described.transaction_start_time_ms)),
        producer_id=int(described.producer_id),
        producer_epoch=int(described.producer_epoch),
        topics=tuple(
            ctx.nested("TopicData", topic=topic, partitions=tuple(partitions))
            for topic, partitions in topics.items()
        ),
    )


@handles(API_KEY, 0, 0)
def handle_describe_transactions(ctx: RequestContext, request) -> object:
    return ctx.response(
        throttle_time=NO_THROTTLE,
        transaction_states=tuple(_describe_one(ctx, tid) for tid in request.transactional_ids),
    )
