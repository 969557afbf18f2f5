"""DeleteShareGroupState (key 86), v0: the group coordinator removes share-partition state
(KIP-932).

The share coordinator writes a tombstone (ShareSnapshot key, no value) so replay sees the
share-partition as gone; deleting absent state succeeds without a record. Kafka does no
state-epoch check here although the schema lists FENCED_STATE_EPOCH.
"""

from __future__ import annotations

from typing import Any

from reference_impl.handlers.read_share_group_state import error_fields, per_partition
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_coordinator import PersisterResult
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DELETE_SHARE_GROUP_STATE


@handles(API_KEY, 0, 0)
def handle_delete_share_group_state(ctx: RequestContext, request: Any) -> Any:
    def op(coord: Any, t: Any, p: Any) -> PersisterResult:
        return coord.delete(request.group_id, t.topic_id, int(p.partition), now_ms=ctx.now_ms)

    return per_partition(
        ctx, request, op, lambda r: ctx.nested("PartitionResult", **error_fields(r)), "DeleteStateResult"
    )
