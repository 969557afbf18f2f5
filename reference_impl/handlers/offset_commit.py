"""OffsetCommit (key 8), v2-v9 (Kafka 4 removed v0-v1; v10's topic ids are not offered).

As Kafka's request handler does, topics and partitions that do not exist are answered
UNKNOWN_TOPIC_OR_PARTITION before the coordinator is involved; when no partition is
left the group is not even looked up (no NOT_COORDINATOR, no group created).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator, millis, split_known_partitions
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.OFFSET_COMMIT


@handles(API_KEY, 2, 9)
def handle_offset_commit(ctx: RequestContext, request) -> object:
    results, valid = split_known_partitions(ctx, request.topics)
    if valid:
        if not is_coordinator(ctx, request.group_id):
            errors = [ErrorCode.not_coordinator] * len(valid)
        else:
            errors = ctx.state.groups.commit_offsets(
                request.group_id,
                int(request.generation_id_or_member_epoch),
                request.member_id,
                valid,
                group_instance_id=payloads.get(request, "group_instance_id"),
                retention_time_ms=millis(payloads.get(request, "retention_time"), -1),
                api_version=ctx.api_version,
            )
        for entry, error in zip(valid, errors):
            results.setdefault(entry.topic, []).append((entry.partition, error))
    return ctx.response(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            ctx.nested(
                "OffsetCommitResponseTopic",
                name=name,
                partitions=tuple(
                    ctx.nested("OffsetCommitResponsePartition", partition_index=i, error_code=e) for i, e in parts
                ),
            )
            for name, parts in results.items()
        ),
    )
