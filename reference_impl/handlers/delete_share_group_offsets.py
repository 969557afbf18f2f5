"""DeleteShareGroupOffsets (key 92), v0 (KIP-932): delete the share-partition state of topics.

As Kafka 4.4.0 answers (observed): a classic group id is GROUP_ID_NOT_FOUND ("Group g is
not a share group."), a share group with members NON_EMPTY_GROUP ("The group is not
empty."), an unknown group GROUP_ID_NOT_FOUND ("Group g not found."), an empty group id
INVALID_GROUP_ID ("The group id is invalid."), top-level with no topics. Per topic: an unknown topic, or one the group has no state for, is
UNKNOWN_TOPIC_OR_PARTITION with a null topic id; the rest succeed (their state is deleted
from the share coordinator and the topic leaves the group's initialised set). A topic named
twice is answered once. With an authorizer, as Kafka (not the KIP's table, DIV-93221):
DELETE on the group (else top-level GROUP_AUTHORIZATION_FAILED), and READ on each topic
(else that topic's TOPIC_AUTHORIZATION_FAILED, its state kept).
"""

from __future__ import annotations

from dataclasses import replace

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers._group_common import NO_THROTTLE, share_admin_refusal
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_group import TopicOffsetsResult
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DELETE_SHARE_GROUP_OFFSETS

def _error(ctx: RequestContext, error: ErrorCode, message: str | None) -> object:
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error, error_message=message, responses=())


@handles(API_KEY, 0, 0)
def handle_delete_share_group_offsets(ctx: RequestContext, request) -> object:
    refused = share_admin_refusal(ctx, request.group_id, Op.DELETE)  # KIP: READ (DIV-93221)
    if refused is not None:
        return _error(ctx, *refused)
    names = list(dict.fromkeys(t.topic_name for t in request.topics))
    unauthorized = tuple(TopicOffsetsResult(n, None, error=ErrorCode.topic_authorization_failed)
                         for n in names if not authorized(ctx, Op.READ, Res.TOPIC, n))
    denied = {t.topic_name for t in unauthorized}
    result = ctx.state.share_groups.delete_offsets(request.group_id, [n for n in names if n not in denied], ctx.now_ms)
    if result.error != ErrorCode.none:
        return _error(ctx, result.error, result.message)
    result = replace(result, topics=unauthorized + result.topics)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, responses=tuple(
        ctx.nested("DeleteShareGroupOffsetsResponseTopic", topic_name=t.topic_name, topic_id=t.topic_id,
                   error_code=t.error, error_message=t.message)
        for t in result.topics))
