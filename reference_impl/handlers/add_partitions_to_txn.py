"""AddPartitionsToTxn (key 24), v0-v5.

v0-v3 come from clients: one transaction. Without WRITE on the transactional id every
partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED; partitions of topics the principal may
not WRITE, and internal topics, are TOPIC_AUTHORIZATION_FAILED (Kafka's write authorization
never covers internal topics for clients), of unknown topics UNKNOWN_TOPIC_OR_PARTITION, and then every other partition is
OPERATION_NOT_ATTEMPTED; otherwise the coordinator's single answer is given to every
partition (NOT_COORDINATOR on another node; PRODUCER_FENCED as INVALID_PRODUCER_EPOCH
before v2).

v4+ come from brokers (KIP-890) and need CLUSTER_ACTION: batches of transactions, each either VerifyOnly
(per partition NONE, or TRANSACTION_ABORTABLE when the partition is not part of the
transaction) or an add. An add through v4+ is the implicit add of a TV2 producer
(recorded as transaction version 2, as Kafka does). Internal topics are allowed.

The draft round-trip KIP (docs/txn-roundtrip.md): with transaction.roundtrip.version
finalized, a client add (v0-v3) for a transactional id whose previous transaction's markers
are still pending is parked until they are written (at most
TransactionConfig.add_partitions_hold_max_ms) and then answered as usual, instead of
CONCURRENT_TRANSACTIONS at once.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized, cluster_action
from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.init_producer_id import legacy_fencing, transactions
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model import txn_roundtrip
from reference_impl.model.topics import is_internal
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN


def _requested(topics: Any) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for t in topics:
        for p in t.partitions:
            if (t.name, int(p)) not in out:
                out.append((t.name, int(p)))
    return out


def _transaction_result(
    ctx: RequestContext, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]],
    *, verify_only: bool, client: bool,
) -> dict[tuple[str, int], ErrorCode]:
    registry = ctx.state.topics
    failed: dict[tuple[str, int], ErrorCode] = {}
    good: list[tuple[str, int]] = []
    for tp in partitions:
        if client and (is_internal(tp[0]) or not authorized(ctx, Op.WRITE, Res.TOPIC, tp[0])):
            failed[tp] = ErrorCode.topic_authorization_failed
        elif registry.partition(tp[0], tp[1]) is None:
            failed[tp] = ErrorCode.unknown_topic_or_partition
        else:
            good.append(tp)
    if failed:
        # Any failed check fails the whole transaction; the rest was not attempted.
        return {tp: failed.get(tp, ErrorCode.operation_not_attempted) for tp in partitions}
    tc = transactions(ctx)
    if not tid:
        return {tp: ErrorCode.invalid_request for tp in partitions}
    if not is_coordinator(ctx, tid):
        return {tp: ErrorCode.not_coordinator for tp in partitions}
    if verify_only:
        return tc.verify_partitions(tid, pid, epoch, good)
    # Kafka's transactionVersionForAddPartitionsToTxn: v4+ (broker-sent) adds are TV2.
    tv = 2 if ctx.api_version >= 4 else 0
    error = tc.add_partitions(tid, pid, epoch, good, client_transaction_version=tv, now_ms=ctx.now_ms)
    error = legacy_fencing(error, ctx.api_version, 2)
    return {tp: error for tp in partitions}


def _topic_results(ctx: RequestContext, results: dict[tuple[str, int], ErrorCode]) -> tuple:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append(
            ctx.nested("AddPartitionsToTxnPartitionResult", partition_index=partition, partition_error_code=error)
        )
    return tuple(
        ctx.nested("AddPartitionsToTxnTopicResult", name=topic, results_by_partition=tuple(parts))
        for topic, parts in by_topic.items()
    )


async def _hold_while_markers_pending(ctx: RequestContext, tid: str) -> None:
    """The draft's "Block Begin Transaction": wait for the previous transaction's markers
    (the ticker writes them and notifies) when the feature is finalized; the add that follows
    answers CONCURRENT_TRANSACTIONS if the bound passed first."""
    if not tid or not txn_roundtrip.may_hold(ctx.state.config.finalized_features, ctx.api_version):
        return
    tc = transactions(ctx)
    if not is_coordinator(ctx, tid):
        return

    def released() -> bool:
        current = transactions(ctx)  # a fail-over rebuilds the coordinator object
        return not txn_roundtrip.is_held(current.metadata(tid), current.txn_config.seeded_bugs)

    if not released():
        await ctx.runtime.wait_for(released, tc.txn_config.add_partitions_hold_max_ms)


@handles(API_KEY, 0, 5)
async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version < 4:
        if not authorized(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, request.v3_and_below_transactional_id):
            results = dict.fromkeys(_requested(request.v3_and_below_topics), ErrorCode.transactional_id_authorization_failed)
            return ctx.response(throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=_topic_results(ctx, results))
        await _hold_while_markers_pending(ctx, request.v3_and_below_transactional_id)
        results = _transaction_result(
            ctx, request.v3_and_below_transactional_id, int(request.v3_and_below_producer_id),
            int(request.v3_and_below_producer_epoch), _requested(request.v3_and_below_topics),
            verify_only=False, client=True,
        )
        return ctx.response(throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=_topic_results(ctx, results))
    if not cluster_action(ctx):  # v4+ is broker-to-broker (KIP-890)
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                            results_by_transaction=())
    out = []
    for txn in request.transactions:
        results = _transaction_result(
            ctx, txn.transactional_id, int(txn.producer_id), int(txn.producer_epoch), _requested(txn.topics),
            verify_only=bool(txn.verify_only), client=False,
        )
        out.append(ctx.nested(
            "AddPartitionsToTxnResult", transactional_id=txn.transactional_id, topic_results=_topic_results(ctx, results)
        ))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results_by_transaction=tuple(out))
