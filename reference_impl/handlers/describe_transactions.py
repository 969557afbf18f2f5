"""DescribeTransactions (key 65), v0 (KIP-664).

Per transactional id, as Kafka 4.x's TransactionCoordinator.handleDescribeTransactions:
NOT_COORDINATOR when this node does not coordinate the id, TRANSACTIONAL_ID_NOT_FOUND for
an unknown id or one being expired (state Dead), the coordinator's own error (e.g.
COORDINATOR_LOAD_IN_PROGRESS) when it reports one; otherwise the state name, producer id
and epoch, timeout, start time (-1 when no transaction is open) and the partitions of
the transaction grouped by topic.

The transaction coordinator model (`state.transactions`, written separately) is read
through `describe(transactional_id)`. Attribute names read from its answer (the helpers
below also serve ListTransactions):

* `None` -> TRANSACTIONAL_ID_NOT_FOUND; an `ErrorCode`/int, or an object whose `error`
  (or `error_code`) is not NONE -> that error;
* `state`: the Kafka state name ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
  "CompleteCommit", "CompleteAbort", "PrepareEpochFence", "Dead"), or an enum whose
  `label`/`value`/`name` spells it (case and underscores ignored);
* `producer_id`, `producer_epoch`, `transaction_timeout_ms`, `transaction_start_time_ms`;
* partitions: `topic_partitions` or `partitions` (iterable of (topic, partition) pairs or
  of objects with `.topic`/`.partition`), or `topics` (mapping topic -> partitions, or
  iterable of (topic, partitions)).

Without a transaction coordinator in the model every id is unknown.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS

# Kafka's TransactionState names, by a case- and underscore-insensitive key.
KAFKA_STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                     "PrepareEpochFence", "Dead")
_BY_KEY = {n.lower(): n for n in KAFKA_STATE_NAMES}
_MISSING = object()


def field(obj: Any, name: str, default: Any = None) -> Any:
    """Attribute (or mapping key) of a model answer."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def state_name(state: Any) -> str:
    """Kafka's spelling of a transaction state given as a string or an enum."""
    candidates = [state] if isinstance(state, str) else [
        getattr(state, "label", None), getattr(state, "value", None), getattr(state, "name", None), str(state)]
    for c in candidates:
        if isinstance(c, str):
            name = _BY_KEY.get(c.replace("_", "").lower())
            if name is not None:
                return name
    return str(state)


def canonical_state_filter(name: str) -> str | None:
    """The state a ListTransactions filter names (Kafka matches names exactly)."""
    return name if name in KAFKA_STATE_NAMES else None


def as_error(answer: Any) -> ErrorCode | None:
    """The error a model answer carries, if any (None: no error)."""
    if isinstance(answer, (ErrorCode, int)) and not isinstance(answer, bool):
        code = ErrorCode(int(answer))
        return None if code == ErrorCode.none else code
    for name in ("error", "error_code"):
        value = field(answer, name, _MISSING) if answer is not None else _MISSING
        if value is not _MISSING and value is not None and int(value) != 0:
            return ErrorCode(int(value))
    return None


def timeout_delta(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def epoch_datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


def topic_partitions(described: Any) -> dict[str, list[int]]:
    """topic -> sorted partitions of a described transaction."""
    out: dict[str, set[int]] = {}
    pairs = field(described, "topic_partitions")
    if pairs is None:
        pairs = field(described, "partitions")
    if pairs is not None:
        for item in pairs:
            if isinstance(item, tuple):
                topic, partition = item
            else:
                topic, partition = field(item, "topic"), field(item, "partition")
            out.setdefault(str(topic), set()).add(int(partition))
    else:
        topics = field(described, "topics") or {}
        items = topics.items() if isinstance(topics, dict) else topics
        for topic, partitions in items:
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
    transactions = getattr(ctx.state, "transactions", None)
    if transactions is None:
        return _empty(ctx, transactional_id, ErrorCode.transactional_id_not_found)
    described = transactions.describe(transactional_id)
    error = as_error(described)
    if error is not None:
        return _empty(ctx, transactional_id, error)
    if described is None:
        return _empty(ctx, transactional_id, ErrorCode.transactional_id_not_found)
    name = state_name(field(described, "state"))
    if name == "Dead":  # being expired: Kafka ignores it
        return _empty(ctx, transactional_id, ErrorCode.transactional_id_not_found)
    topics = topic_partitions(described)
    return ctx.nested(
        "TransactionState",
        error_code=ErrorCode.none,
        transactional_id=transactional_id,
        transaction_state=name,
        transaction_timeout=timeout_delta(int(field(described, "transaction_timeout_ms", 0))),
        transaction_start_time=epoch_datetime(int(field(described, "transaction_start_time_ms", -1))),
        producer_id=int(field(described, "producer_id", -1)),
        producer_epoch=int(field(described, "producer_epoch", -1)),
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
