"""InitProducerId (key 22), v0-v5 (what Kafka 4.4 advertises).

Null transactional id: any node answers with a new producer id and epoch 0 (idempotent
producers). With a transactional id, in Kafka's order: empty id (INVALID_REQUEST),
transaction timeout outside (0, transaction.max.timeout.ms] (INVALID_TRANSACTION_TIMEOUT),
then the coordinator: NOT_COORDINATOR on another node, else the model's answer (epoch
bump, fencing of an open transaction with CONCURRENT_TRANSACTIONS, KIP-360 recovery
with the producer id/epoch fields of v3+). A request with only one of producer id /
epoch set is INVALID_REQUEST. Before v4 PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH (KIP-588).

v6 (KIP-939 two-phase commit) is not offered (Kafka 4.4 does not advertise it either);
the handler already answers its flags as Kafka 4.2's coordinator does with
transaction.two.phase.commit.enable=false: Enable2Pc TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
KeepPreparedTxn UNSUPPORTED_VERSION.

Helpers used by the other transaction handlers live here too.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator, millis
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.transaction_coordinator import TransactionCoordinator
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.INIT_PRODUCER_ID
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def transactions(ctx: RequestContext) -> TransactionCoordinator:
    """The cluster's TransactionCoordinator (read each time: a fail-over rebuilds it)."""
    return ctx.state.transactions


def legacy_fencing(error: ErrorCode, version: int, first_version_with_fenced: int) -> ErrorCode:
    """Clients older than KIP-588 do not know PRODUCER_FENCED: they get INVALID_PRODUCER_EPOCH."""
    if error == ErrorCode.producer_fenced and version < first_version_with_fenced:
        return ErrorCode.invalid_producer_epoch
    return error


@handles(API_KEY, 0, 5)
def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    tid = request.transactional_id
    timeout_ms = millis(request.transaction_timeout, 0)
    pid = int(payloads.get(request, "producer_id", NO_PRODUCER_ID))
    epoch = int(payloads.get(request, "producer_epoch", NO_PRODUCER_EPOCH))

    def answer(error: ErrorCode, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> Any:
        return ctx.response(
            throttle_time=NO_THROTTLE, error_code=legacy_fencing(error, version, 4),
            producer_id=producer_id, producer_epoch=producer_epoch,
            ongoing_txn_producer_id=NO_PRODUCER_ID, ongoing_txn_producer_epoch=NO_PRODUCER_EPOCH,
        )

    if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        return answer(ErrorCode.invalid_request)
    expected = None if pid == NO_PRODUCER_ID else (pid, epoch)
    tc = transactions(ctx)
    if tid is None:
        return answer(ErrorCode.none, ctx.state.producer_ids.generate_producer_id(), 0)
    if not authorized(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, tid):  # KafkaApis checks first
        return answer(ErrorCode.transactional_id_authorization_failed)
    if tid == "":
        return answer(ErrorCode.invalid_request)
    if payloads.get(request, "enable2_pc", False):
        return answer(ErrorCode.transactional_id_authorization_failed)
    if payloads.get(request, "keep_prepared_txn", False):
        return answer(ErrorCode.unsupported_version)
    if not tc.validate_transaction_timeout(timeout_ms):
        return answer(ErrorCode.invalid_transaction_timeout)
    if not is_coordinator(ctx, tid):
        return answer(ErrorCode.not_coordinator)
    result = tc.init_producer_id(tid, timeout_ms, expected, now_ms=ctx.now_ms)
    return answer(result.error, result.producer_id, result.producer_epoch)
