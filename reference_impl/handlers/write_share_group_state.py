"""WriteShareGroupState (key 85), v0-v1: a share-partition leader writes durable state (KIP-932).

The share coordinator appends a ShareUpdate (or, every
share.coordinator.snapshot.update.records.per.snapshot updates, a ShareSnapshot) and
answers once it is in the log. StartOffset -1 leaves the SPSO unchanged. Errors:
INVALID_REQUEST (uninitialised state), FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH,
UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_LOAD_IN_PROGRESS, plus the shared request-level
handling. v1 adds DeliveryCompleteCount (-1 = unknown), kept with the state and reported
by ReadShareGroupStateSummary v1.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers.read_share_group_state import error_fields, per_partition
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_coordinator import PersisterResult
from reference_impl.model.share_state_records import SharePartitionKey, StateBatch
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.WRITE_SHARE_GROUP_STATE


def _batches(p: Any) -> tuple[StateBatch, ...] | None:
    out = []
    for b in p.state_batches:
        if int(b.last_offset) < int(b.first_offset):
            return None
        out.append(StateBatch(int(b.first_offset), int(b.last_offset), int(b.delivery_state), int(b.delivery_count)))
    return tuple(out)


@handles(API_KEY, 0, 1)
def handle_write_share_group_state(ctx: RequestContext, request: Any) -> Any:
    def op(coord: Any, t: Any, p: Any) -> PersisterResult:
        batches = _batches(p)
        if batches is None:
            key = SharePartitionKey(request.group_id, t.topic_id, int(p.partition))
            return PersisterResult(key, ErrorCode.invalid_request, "A state batch has last offset < first offset.")
        return coord.write(
            request.group_id, t.topic_id, int(p.partition),
            state_epoch=int(p.state_epoch), leader_epoch=int(p.leader_epoch), start_offset=int(p.start_offset),
            state_batches=batches, delivery_complete_count=int(payloads.get(p, "delivery_complete_count", -1)),
            now_ms=ctx.now_ms,
        )

    return per_partition(
        ctx, request, op, lambda r: ctx.nested("PartitionResult", **error_fields(r)), "WriteStateResult"
    )
