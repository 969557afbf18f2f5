"""AlterShareGroupOffsets (key 91), v0 (KIP-932): reset share-partition start offsets.

As Kafka 4.4.0 answers (observed): a classic group id is GROUP_ID_NOT_FOUND ("Group g is
not a share group."), a share group with members NON_EMPTY_GROUP ("The group is not
empty."), both top-level with no topics; an unknown group is created (Empty) and altered;
an empty group id is INVALID_GROUP_ID ("The group id is invalid.").
With an authorizer: READ on the group (else top-level GROUP_AUTHORIZATION_FAILED) and READ
on each topic (else its partitions are TOPIC_AUTHORIZATION_FAILED and left alone).
Unknown topics and partitions are UNKNOWN_TOPIC_OR_PARTITION per partition (topic id null
for an unknown topic, such topics listed first); any start offset is accepted (past the
end, or -1 = uninitialised). The new start offset is written through the share coordinator
without in-flight batches, and the share-partition leaders reload it (`state.share_groups`).
"""

from __future__ import annotations

from dataclasses import replace

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers._group_common import NO_THROTTLE, share_admin_refusal
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_group import TopicOffsetsResult
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.ALTER_SHARE_GROUP_OFFSETS

def _error(ctx: RequestContext, error: ErrorCode, message: str | None) -> object:
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error, error_message=message, responses=())


@handles(API_KEY, 0, 0)
def handle_alter_share_group_offsets(ctx: RequestContext, request) -> object:
    refused = share_admin_refusal(ctx, request.group_id, Op.READ)
    if refused is not None:
        return _error(ctx, *refused)
    wanted: dict[str, list[tuple[int, int]]] = {}
    for t in request.topics:
        wanted.setdefault(t.topic_name, []).extend((int(p.partition_index), int(p.start_offset)) for p in t.partitions)
    unauthorized = [TopicOffsetsResult(name, None, tuple((p, ErrorCode.topic_authorization_failed, None) for p, _ in ps))
                    for name, ps in wanted.items() if not authorized(ctx, Op.READ, Res.TOPIC, name)]
    for t in unauthorized:
        del wanted[t.topic_name]
    result = ctx.state.share_groups.alter_offsets(request.group_id, wanted, ctx.now_ms)
    if result.error != ErrorCode.none:
        return _error(ctx, result.error, result.message)
    result = replace(result, topics=tuple(unauthorized) + result.topics)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, responses=tuple(
        ctx.nested("AlterShareGroupOffsetsResponseTopic", topic_name=t.topic_name, topic_id=t.topic_id, partitions=tuple(
            ctx.nested("AlterShareGroupOffsetsResponsePartition", partition_index=p, error_code=err, error_message=msg)
            for p, err, msg in t.partitions))
        for t in result.topics))
