"""JoinGroup (key 11), v2-v9 (Kafka 4 removed v0-v1).

The model parks a JoinGroup until the join phase completes; this handler waits on the
runtime for the model's `Pending` result, so other connections keep being served.

The group id namespace is shared with share groups (KIP-932): a JoinGroup on a share group
id answers INCONSISTENT_GROUP_PROTOCOL with an empty member id and generation -1, whatever
its member id or protocol type (as kafka-native 4.2.1 and 4.4.0 answer).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, client_host, is_coordinator, join_wait_ms, millis
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.classic_group import JoinResult, Protocol
from reference_impl.model.group_coordinator import NO_RESPONSE
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.JOIN_GROUP


def _response(ctx: RequestContext, r: JoinResult) -> object:
    protocol_name = r.protocol_name
    if ctx.api_version < 7 and protocol_name is None:
        protocol_name = ""  # not nullable before v7
    elif ctx.api_version >= 7 and protocol_name == "":
        protocol_name = None
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=r.error,
        generation_id=r.generation_id,
        protocol_type=r.protocol_type,
        protocol_name=protocol_name,
        leader=r.leader,
        skip_assignment=r.skip_assignment,
        member_id=r.member_id,
        members=tuple(
            ctx.nested("JoinGroupResponseMember", member_id=m.member_id,
                       group_instance_id=m.group_instance_id, metadata=m.metadata)
            for m in r.members
        ),
    )


@handles(API_KEY, 2, 9)
async def handle_join_group(ctx: RequestContext, request) -> object:
    groups = ctx.state.groups
    session_ms = millis(request.session_timeout)
    rebalance_ms = millis(payloads.get(request, "rebalance_timeout"), session_ms)
    # Group id and session timeout are checked before the request is routed to the
    # coordinator shard, so they win over NOT_COORDINATOR.
    prechecks_pass = bool(request.group_id) and (
        ctx.state.config.group_min_session_timeout_ms <= session_ms <= ctx.state.config.group_max_session_timeout_ms
    )
    if prechecks_pass and not is_coordinator(ctx, request.group_id):
        return _response(ctx, JoinResult(ErrorCode.not_coordinator))
    if prechecks_pass and ctx.state.share_groups.group_type(request.group_id) is not None:
        return _response(ctx, JoinResult(ErrorCode.inconsistent_group_protocol, member_id=""))
    pending = groups.join_group(
        request.group_id,
        request.member_id,
        request.protocol_type,
        tuple(Protocol(p.name, bytes(p.metadata)) for p in request.protocols),
        session_ms,
        rebalance_ms,
        group_instance_id=payloads.get(request, "group_instance_id"),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        api_version=ctx.api_version,
        reason=payloads.get(request, "reason"),
    )
    if not pending.done:
        await ctx.runtime.wait_for(lambda: pending.done, join_wait_ms(session_ms, rebalance_ms))
    if not pending.done or pending.result is NO_RESPONSE:
        return None  # Kafka never answers a superseded or abandoned JoinGroup
    return _response(ctx, pending.result)
