"""EndTxn (key 26), v0-v5: commit or abort the producer's transaction.

The coordinator answers once the decision (PrepareCommit/PrepareAbort) is in the
transaction log; markers follow asynchronously (see model/transaction_coordinator.py).
v5 is a transaction-version-2 client (KIP-890; clients send it only to clusters with
transaction.version >= 2 finalized, the broker goes by the version alone): the epoch is bumped at every EndTxn and the response
carries the producer id and epoch to use next (a new producer id with epoch 0 when the
epoch overflowed). Earlier versions follow TV1 and answer producer id/epoch -1.
NOT_COORDINATOR on another node; PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH before v2.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.init_producer_id import legacy_fencing, transactions
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.END_TXN


@handles(API_KEY, 0, 5)
def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    tc = transactions(ctx)
    tid = request.transactional_id
    pid, epoch = -1, -1
    if not tid:
        error = ErrorCode.invalid_request
    elif not is_coordinator(ctx, tid):
        error = ErrorCode.not_coordinator
    else:
        # As Kafka (TransactionVersion.transactionVersionForEndTxn): v5+ comes from a TV2 client;
        # clients only send it when the cluster finalized transaction.version >= 2.
        tv = 2 if ctx.api_version >= 5 else 0
        result = tc.end_txn(
            tid, int(request.producer_id), int(request.producer_epoch), bool(request.committed),
            client_transaction_version=tv, now_ms=ctx.now_ms,
        )
        error, pid, epoch = result.error, result.producer_id, result.producer_epoch
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=legacy_fencing(error, ctx.api_version, 2),
        producer_id=pid, producer_epoch=epoch,
    )
