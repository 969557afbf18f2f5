"""ConsumerGroupHeartbeat (key 68), v0-v1 (KIP-848; v1 is KIP-1082's client-generated member id).

Order of checks, as Kafka 4.x answers:

1. the consumer protocol off (finalized group.version < 1) -> UNSUPPORTED_VERSION;
2. no READ on the group -> GROUP_AUTHORIZATION_FAILED; no DESCRIBE on a subscribed topic
   name -> TOPIC_AUTHORIZATION_FAILED;
3. the request validation of the coordinator service (`consumer_group.request_error`) ->
   INVALID_REQUEST / UNSUPPORTED_ASSIGNOR / INVALID_REGULAR_EXPRESSION with Kafka's
   message, on any node;
4. placement -> NOT_COORDINATOR;
5. the model (`state.groups.consumer.heartbeat`): namespace, epochs, assignment.

The handler answers at once; the assignment goes out in topic-id form (null when unchanged).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import (
    client_host, heartbeat_error, heartbeat_refusal, heartbeat_response, millis,
)
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.consumer_assignor import Assignment, TopicId
from reference_impl.model.consumer_group import HeartbeatRequest, request_error
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT


def heartbeat_request(ctx: RequestContext, request: Any) -> HeartbeatRequest:
    """The wire request as the model reads it."""
    names = request.subscribed_topic_names
    owned = request.topic_partitions
    return HeartbeatRequest(
        group_id=request.group_id or "",
        member_id=request.member_id or "",
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=millis(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=payloads.get(request, "subscribed_topic_regex"),  # v1+
        server_assignor=request.server_assignor,
        owned=None if owned is None else tuple((tp.topic_id, tuple(int(p) for p in tp.partitions)) for tp in owned),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
    )


@handles(API_KEY, 0, 1, enabled=lambda config: config.consumer_groups_enabled)
def handle_consumer_group_heartbeat(ctx: RequestContext, request) -> object:
    req = heartbeat_request(ctx, request)
    groups = ctx.state.groups
    refusal = heartbeat_refusal(
        ctx, request, ctx.state.config.consumer_groups_enabled,
        lambda: request_error(req, ctx.api_version, groups.consumer.config.assignors), req.group_id)
    if refusal is not None:
        return refusal
    result = groups.consumer.heartbeat(req, ctx.state.topics, ctx.api_version)
    if result.error != ErrorCode.none:
        return heartbeat_error(ctx, result.error, result.error_message)
    assignment = None if result.assignment is None else sorted_topic_partitions(result.assignment)
    return heartbeat_response(ctx, result, assignment)


def sorted_topic_partitions(assignment: Assignment) -> list[tuple[TopicId, tuple[int, ...]]]:
    """An assignment in a stable wire order: by topic id, partitions ascending."""
    return [(topic_id, tuple(sorted(partitions)))
            for topic_id, partitions in sorted(assignment.items(), key=lambda item: str(item[0]))]
