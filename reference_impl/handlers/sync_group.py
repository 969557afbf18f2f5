"""SyncGroup (key 14), v0-v5: the leader's assignment is delivered to every member.

Followers that sync before the leader are parked by the model; this handler waits
for their `Pending` result.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, WAIT_SLACK_MS, is_coordinator
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.classic_group import SyncResult
from reference_impl.model.group_coordinator import NO_RESPONSE
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.SYNC_GROUP


def _response(ctx: RequestContext, r: SyncResult) -> object:
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=r.error,
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name,
        assignment=r.assignment,
    )


@handles(API_KEY, 0, 5)
async def handle_sync_group(ctx: RequestContext, request) -> object:
    protocol_type = payloads.get(request, "protocol_type")
    protocol_name = payloads.get(request, "protocol_name")
    if ctx.api_version >= 5 and (protocol_type is None or protocol_name is None):
        # From v5 both fields are mandatory.
        return _response(ctx, SyncResult(ErrorCode.inconsistent_group_protocol))
    if request.group_id and not is_coordinator(ctx, request.group_id):
        return _response(ctx, SyncResult(ErrorCode.not_coordinator))
    groups = ctx.state.groups
    pending = groups.sync_group(
        request.group_id,
        int(request.generation_id),
        request.member_id,
        [(a.member_id, bytes(a.assignment)) for a in request.assignments],
        group_instance_id=payloads.get(request, "group_instance_id"),
        protocol_type=protocol_type,
        protocol_name=protocol_name,
    )
    if not pending.done:
        group = groups.group(request.group_id)
        rebalance_ms = group.rebalance_timeout_ms() if group is not None else 0
        await ctx.runtime.wait_for(lambda: pending.done, rebalance_ms * 2 + WAIT_SLACK_MS)
    if not pending.done or pending.result is NO_RESPONSE:
        return None  # Kafka never answers a superseded or abandoned SyncGroup
    return _response(ctx, pending.result)
