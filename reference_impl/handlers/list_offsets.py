"""ListOffsets (key 2), v1+: earliest (-2), latest (-1), max timestamp (-3, v7+),
earliest local (-4, v8+), latest tiered (-5, v9+; no tiered storage, so offset -1) and
lookups by timestamp.

Consumers (replica id -1) must ask the leader and see offsets up to the high
watermark (READ_UNCOMMITTED) or the last stable offset (READ_COMMITTED); a
partition named twice in one request is INVALID_REQUEST; a special timestamp the
request version does not know is UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers.metadata import sync_liveness
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.partition_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    IsolationLevel,
    LogError,
)
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.LIST_OFFSETS
NO_THROTTLE = datetime.timedelta(0)
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
# Special timestamp -> first request version that may use it.
SPECIAL_TIMESTAMP_MIN_VERSION = {
    EARLIEST_TIMESTAMP: 1,
    LATEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
}


def timestamp_supported(timestamp: int, version: int) -> bool:
    if timestamp >= 0:
        return True
    lowest = SPECIAL_TIMESTAMP_MIN_VERSION.get(timestamp)
    return lowest is not None and version >= lowest


@handles(API_KEY, 1, 10)
def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    registry = ctx.state.topics
    sync_liveness(ctx)
    replica_id = int(request.replica_id)
    raw_isolation = int(payloads.get(request, "isolation_level", 0))
    isolation = IsolationLevel(raw_isolation) if raw_isolation in (0, 1) else None

    seen: dict[tuple[str, int], int] = {}
    for t in request.topics:
        for p in t.partitions:
            key = (t.name, int(p.partition_index))
            seen[key] = seen.get(key, 0) + 1

    grouped: dict[str, list[Any]] = {}
    done: set[tuple[str, int]] = set()
    for t in request.topics:
        for p in t.partitions:
            key = (t.name, int(p.partition_index))
            if key in done:
                continue
            done.add(key)
            entry = grouped.setdefault(t.name, [])
            if seen[key] > 1 or isolation is None:
                entry.append(_error(ctx, p, ErrorCode.invalid_request))
                continue
            entry.append(_one(ctx, registry, t.name, p, version, replica_id, isolation))
    return ctx.response(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            ctx.nested("ListOffsetsTopicResponse", name=name, partitions=tuple(parts)) for name, parts in grouped.items()
        ),
    )


def _error(ctx: RequestContext, p: Any, error: ErrorCode) -> Any:
    return ctx.nested(
        "ListOffsetsPartitionResponse",
        partition_index=p.partition_index,
        error_code=error,
        timestamp=-1,
        offset=-1,
    )


def _one(
    ctx: RequestContext,
    registry: Any,
    topic: str,
    p: Any,
    version: int,
    replica_id: int,
    isolation: IsolationLevel,
) -> Any:
    timestamp = int(p.timestamp)
    if not timestamp_supported(timestamp, version):
        return _error(ctx, p, ErrorCode.unsupported_version)
    part = registry.partition(topic, int(p.partition_index))
    if part is None:
        return _error(ctx, p, ErrorCode.unknown_topic_or_partition)
    if replica_id == DEBUGGING_REPLICA_ID:
        if ctx.node_id not in part.replicas:
            return _error(ctx, p, ErrorCode.not_leader_or_follower)
    elif part.leader != ctx.node_id:
        return _error(ctx, p, ErrorCode.not_leader_or_follower)
    current_epoch = int(payloads.get(p, "current_leader_epoch", -1))
    if current_epoch != -1:
        if part.leader_epoch > current_epoch:
            return _error(ctx, p, ErrorCode.fenced_leader_epoch)
        if part.leader_epoch < current_epoch:
            return _error(ctx, p, ErrorCode.unknown_leader_epoch)
    try:
        found = part.log.offset_for_timestamp(
            timestamp, isolation if replica_id == CONSUMER_REPLICA_ID else None
        )
    except LogError as exc:
        return _error(ctx, p, exc.error_code)
    if found is None:
        return _error(ctx, p, ErrorCode.none)
    return ctx.nested(
        "ListOffsetsPartitionResponse",
        partition_index=p.partition_index,
        error_code=ErrorCode.none,
        timestamp=found.timestamp,
        offset=found.offset,
        leader_epoch=found.leader_epoch,
    )
