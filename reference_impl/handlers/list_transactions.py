"""ListTransactions (key 66), v0-v1 (KIP-664; v1 adds DurationFilter, KIP-994).

Each broker lists the transactional ids it coordinates (the admin client asks every
broker and merges), so the handler keeps only ids placed on the node that was asked.
As Kafka 4.x's TransactionStateManager.listTransactionStates: a state filter that is not
a Kafka state name is echoed in `unknown_state_filters` (and, like any state filter,
excludes every transaction that is not in one of the named states); ids in state Dead
(being expired) are never listed; `duration_filter` >= 0 keeps only transactions running
for longer than that many milliseconds. COORDINATOR_LOAD_IN_PROGRESS (or another error)
is reported at the top level when the coordinator model answers with one.

The transaction coordinator model is asked through
`state.transactions.list_transactions(state_filters, producer_id_filters, duration_filter)`
(a `ListTransactionsResult`: its error, the unknown state filters, the listed entries) and
applies the filters; the handler re-applies the state and producer id filters (idempotent)
and the placement (see describe_transactions for the state spellings).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE
from reference_impl.handlers.describe_transactions import canonical_state_filter, state_name
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.LIST_TRANSACTIONS


@handles(API_KEY, 0, 1)
def handle_list_transactions(ctx: RequestContext, request) -> object:
    state_filters = tuple(request.state_filters)
    producer_id_filters = tuple(int(p) for p in request.producer_id_filters)
    duration_filter = int(payloads.get(request, "duration_filter", -1))
    known = {s for s in state_filters if canonical_state_filter(s) is not None}

    answer = ctx.state.transactions.list_transactions(state_filters, producer_id_filters, duration_filter)
    if answer.error != ErrorCode.none:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode(int(answer.error)),
                            unknown_state_filters=(), transaction_states=())

    out = []
    for entry in answer.transactions:
        tid = entry.transactional_id
        if ctx.state.coordinator_for(tid) != ctx.node_id:
            continue
        name = state_name(entry.state)
        if name == "Dead":
            continue
        if state_filters and name not in known:
            continue
        producer_id = int(entry.producer_id)
        if producer_id_filters and producer_id not in producer_id_filters:
            continue
        out.append(ctx.nested("TransactionState", transactional_id=tid, producer_id=producer_id,
                              transaction_state=name))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                        unknown_state_filters=tuple(answer.unknown_state_filters), transaction_states=tuple(out))
