"""DeleteRecords (key 21): move a partition's log start offset forward (-1: to the high
watermark), asked of the partition leader; DELETE on the topic where an authorizer runs.

KIP-932 "Log retention" (share-partitions follow the log start offset: records below it
are Archived whatever their state) is observed through this RPC. Kafka: ReplicaManager.
deleteRecords; an offset beyond the high watermark is OFFSET_OUT_OF_RANGE and the low
watermark answered is the new log start offset.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers.metadata import sync_liveness
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.partition_log import LogError
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DELETE_RECORDS
NO_THROTTLE = datetime.timedelta(0)
NO_LOW_WATERMARK = -1


@handles(API_KEY, 0, 2)
def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    sync_liveness(ctx)
    topics = []
    for t in request.topics:
        allowed = authorized(ctx, Op.DELETE, Res.TOPIC, t.name)
        parts = tuple(_one(ctx, t.name, p, allowed) for p in t.partitions)
        topics.append(ctx.nested("DeleteRecordsTopicResult", name=t.name, partitions=parts))
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(topics))


def _one(ctx: RequestContext, topic: str, p: Any, allowed: bool) -> Any:
    index = int(p.partition_index)

    def result(error: ErrorCode, low_watermark: int = NO_LOW_WATERMARK) -> Any:
        return ctx.nested("DeleteRecordsPartitionResult", partition_index=index, low_watermark=low_watermark,
                          error_code=error)

    if not allowed:
        return result(ErrorCode.topic_authorization_failed)
    part = ctx.state.topics.partition(topic, index)
    if part is None:
        return result(ErrorCode.unknown_topic_or_partition)
    if part.leader != ctx.node_id:
        return result(ErrorCode.not_leader_or_follower)
    try:
        low = part.log.delete_records(int(p.offset))
    except LogError as exc:
        return result(exc.error_code)
    return result(ErrorCode.none, low)
