"""ListGroups (key 16), v0-v5: the groups this node coordinates; v4 filters states, v5 types."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol import payloads

API_KEY = 16


@handles(API_KEY, 0, 5)
def handle_list_groups(ctx: RequestContext, request) -> object:
    listed = ctx.state.groups.list_groups(
        states_filter=payloads.get(request, "states_filter", ()) or (),
        types_filter=payloads.get(request, "types_filter", ()) or (),
        include=lambda group_id: is_coordinator(ctx, group_id),
    )
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        groups=tuple(
            ctx.nested("ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type,
                       group_state=g.state, group_type=g.group_type)
            for g in listed
        ),
    )
