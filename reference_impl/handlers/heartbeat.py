"""Heartbeat (key 12), v0-v4."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.HEARTBEAT


@handles(API_KEY, 0, 4)
def handle_heartbeat(ctx: RequestContext, request) -> object:
    if request.group_id and not is_coordinator(ctx, request.group_id):
        error = ErrorCode.not_coordinator
    else:
        error = ctx.state.groups.heartbeat(
            request.group_id,
            int(request.generation_id),
            request.member_id,
            payloads.get(request, "group_instance_id"),
        )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error)
