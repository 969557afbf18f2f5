"""ReadShareGroupStateSummary (key 87), v0-v1: state epoch, leader epoch and SPSO of a
share-partition without its batches (KIP-932).

As Kafka: no leader-epoch fencing; uninitialised state is answered with success,
StartOffset -1, LeaderEpoch 0, StateEpoch 0. v1 adds DeliveryCompleteCount (the last
value a v1 WriteShareGroupState reported, -1 if none).
"""

from __future__ import annotations

from typing import Any

from reference_impl.handlers.read_share_group_state import error_fields, per_partition
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_coordinator import PersisterResult
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.READ_SHARE_GROUP_STATE_SUMMARY


@handles(API_KEY, 0, 1)
def handle_read_share_group_state_summary(ctx: RequestContext, request: Any) -> Any:
    def op(coord: Any, t: Any, p: Any) -> PersisterResult:
        return coord.read_summary(request.group_id, t.topic_id, int(p.partition), int(p.leader_epoch))

    def build(r: PersisterResult) -> Any:
        return ctx.nested(
            "PartitionResult", **error_fields(r),
            state_epoch=r.state_epoch if r.ok else 0,
            leader_epoch=r.leader_epoch if r.ok else 0,
            start_offset=r.start_offset if r.ok else -1,
            delivery_complete_count=r.delivery_complete_count if r.ok else -1,
        )

    return per_partition(ctx, request, op, build, "ReadStateSummaryResult")
