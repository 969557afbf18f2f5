"""ListGroups (key 16), v0-v5: the groups this node coordinates; v4 filters states, v5 types.

Classic and consumer (KIP-848) groups come from `state.groups`, share groups (KIP-932) from
`state.share_groups`; all are listed at every version (a share group reads protocol type
"share", type "share"; a consumer group protocol type "consumer", type "consumer").
Type and state filters are case-insensitive, as in Kafka.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_group import SHARE_GROUP_TYPE
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.LIST_GROUPS


@handles(API_KEY, 0, 5)
def handle_list_groups(ctx: RequestContext, request) -> object:
    states_filter = payloads.get(request, "states_filter", ()) or ()
    types_filter = payloads.get(request, "types_filter", ()) or ()
    listed = list(ctx.state.groups.list_groups(
        states_filter=states_filter,
        types_filter=types_filter,
        include=lambda group_id: is_coordinator(ctx, group_id),
    ))
    types = {t.strip().lower() for t in types_filter}
    if not types or SHARE_GROUP_TYPE in types:
        listed.extend(
            g for g in ctx.state.share_groups.list_groups(states_filter, ctx.now_ms)
            if is_coordinator(ctx, g.group_id)
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
