"""AddOffsetsToTxn (key 25), v0-v4: a consumer group's offsets join the transaction.

The coordinator records the group as a participant (Kafka adds the group's
`__consumer_offsets` partition; the reference keeps group ids, see
model/transaction_log.py) so that the end of the transaction completes the group's
pending transactional offsets. Same producer id / epoch / state checks as
AddPartitionsToTxn; NOT_COORDINATOR on a node that does not coordinate the
transactional id; PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH before v2.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.init_producer_id import legacy_fencing, transactions
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN


@handles(API_KEY, 0, 4)
def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    tc = transactions(ctx)
    tid = request.transactional_id
    if not authorized(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, tid):
        error = ErrorCode.transactional_id_authorization_failed
    elif not authorized(ctx, Op.READ, Res.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
    elif not tid:
        error = ErrorCode.invalid_request
    elif not is_coordinator(ctx, tid):
        error = ErrorCode.not_coordinator
    else:
        # Always recorded as TV0: only pre-TV2 clients send AddOffsetsToTxn (Kafka passes TV_0).
        error = tc.add_offsets(
            tid, int(request.producer_id), int(request.producer_epoch), request.group_id,
            client_transaction_version=0, now_ms=ctx.now_ms,
        )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=legacy_fencing(error, ctx.api_version, 2))
