"""LeaveGroup (key 13), v0-v5; v3+ remove a batch of members (KIP-345)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.group_coordinator import LeaveResult, MemberIdentity
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.LEAVE_GROUP


@handles(API_KEY, 0, 5)
def handle_leave_group(ctx: RequestContext, request) -> object:
    if ctx.api_version >= 3:
        identities = [
            MemberIdentity(m.member_id, payloads.get(m, "group_instance_id"), payloads.get(m, "reason"))
            for m in request.members
        ]
    else:
        identities = [MemberIdentity(request.member_id)]
    if request.group_id and not is_coordinator(ctx, request.group_id):
        result = LeaveResult(ErrorCode.not_coordinator)
    else:
        result = ctx.state.groups.leave_group(request.group_id, identities)
    if ctx.api_version < 3:
        # One member: its error becomes the top-level error.
        error = result.error
        if error == ErrorCode.none and result.members:
            error = result.members[0].error
        return ctx.response(throttle_time=NO_THROTTLE, error_code=error)
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        members=tuple(
            ctx.nested("MemberResponse", member_id=m.member_id, group_instance_id=m.group_instance_id,
                       error_code=m.error)
            for m in result.members
        ),
    )
