"""InitializeShareGroupState (key 83), v0: the group coordinator initialises share-partition
state (KIP-932).

The share coordinator writes a ShareSnapshot with the request's state epoch and start
offset (-1: SPSO not known yet) and no batches; a state epoch lower than the stored one
is FENCED_STATE_EPOCH. Request-level handling (empty group id / topics, no share
coordinator, NOT_COORDINATOR) is shared with ReadShareGroupState.
"""

from __future__ import annotations

from typing import Any

from reference_impl.handlers.read_share_group_state import error_fields, per_partition
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_coordinator import PersisterResult
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.INITIALIZE_SHARE_GROUP_STATE


@handles(API_KEY, 0, 0)
def handle_initialize_share_group_state(ctx: RequestContext, request: Any) -> Any:
    def op(coord: Any, t: Any, p: Any) -> PersisterResult:
        return coord.initialize(
            request.group_id, t.topic_id, int(p.partition), int(p.state_epoch), int(p.start_offset), now_ms=ctx.now_ms
        )

    return per_partition(
        ctx, request, op, lambda r: ctx.nested("PartitionResult", **error_fields(r)), "InitializeStateResult"
    )
