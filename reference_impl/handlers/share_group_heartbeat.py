"""ShareGroupHeartbeat (key 76), v1 (KIP-932; v0 was 4.0's early access, removed in 4.1).

Order of checks, as Kafka 4.2/4.4 answer (observed on kafka-native):

1. share groups off (finalized share.version < 1) -> UNSUPPORTED_VERSION;
1b. no READ on the group -> GROUP_AUTHORIZATION_FAILED; no DESCRIBE on a subscribed topic ->
   TOPIC_AUTHORIZATION_FAILED (Kafka's addition to the KIP, DIV-93220);
2. an empty member id -> INVALID_REQUEST without a message (v1: the client generates the id);
3. the coordinator service's request validation (blank member/group/rack id, epoch 0 without
   subscriptions, epoch < -1) -> INVALID_REQUEST with Kafka's message, on any node;
4. placement -> NOT_COORDINATOR (no message);
5. the share group coordinator model (`state.share_groups.heartbeat`): namespace
   (GROUP_ID_NOT_FOUND for a classic group id), epochs, assignment.

The handler answers at once. The assignment goes out in the response's topic-id form
(None when unchanged). As in Kafka, the coordinator first initialises the share-partition
state with the share coordinator (InitializeShareGroupState), so partitions come with the
next heartbeat after the join.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import (
    client_host, heartbeat_error, heartbeat_refusal, heartbeat_response,
)
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_group import JOIN_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.SHARE_GROUP_HEARTBEAT


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


def request_error(request: Any) -> tuple[ErrorCode, str | None] | None:
    """Kafka's request validation, done before the request is routed to a coordinator."""
    if not request.member_id:
        return ErrorCode.invalid_request, None
    if _blank(request.member_id):
        return ErrorCode.invalid_request, "MemberId can't be empty."
    if request.group_id is None or not request.group_id.strip():
        return ErrorCode.invalid_request, "GroupId can't be empty."
    if _blank(request.rack_id):
        return ErrorCode.invalid_request, "RackId can't be empty."
    epoch = int(request.member_epoch)
    if epoch == JOIN_GROUP_MEMBER_EPOCH and not request.subscribed_topic_names:
        return ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request."
    if epoch < LEAVE_GROUP_MEMBER_EPOCH:
        return ErrorCode.invalid_request, "MemberEpoch is invalid."
    return None


@handles(API_KEY, 1, 1)
def handle_share_group_heartbeat(ctx: RequestContext, request) -> object:
    refusal = heartbeat_refusal(ctx, request, ctx.state.config.share_groups_enabled,
                                lambda: request_error(request), request.group_id)
    if refusal is not None:
        return refusal
    subscribed = request.subscribed_topic_names
    result = ctx.state.share_groups.heartbeat(
        request.group_id,
        request.member_id,
        int(request.member_epoch),
        request.rack_id,
        None if subscribed is None else tuple(subscribed),
        ctx.now_ms,
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        api_version=ctx.api_version,
    )
    if result.error != ErrorCode.none:
        return heartbeat_error(ctx, result.error, result.error_message)
    return heartbeat_response(ctx, result, result.assignment)
