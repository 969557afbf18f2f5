"""DescribeGroups (key 15), v0-v6. A missing group reads as Dead; v6 adds GROUP_ID_NOT_FOUND.

A share group id (KIP-932) or a consumer group id of the new protocol (KIP-848) is not a
classic group: Dead (v0-v5) or GROUP_ID_NOT_FOUND "Group g is not a classic group." (v6), as
kafka-native 4.2.1 and 4.4.0 answer for share groups (Kafka's describeGroups only describes
ClassicGroup; consumer groups are read with ConsumerGroupDescribe).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import (
    AUTHORIZED_OPERATIONS_OMITTED, GROUP_AUTHORIZED_OPERATIONS, NO_THROTTLE, is_coordinator,
)
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DESCRIBE_GROUPS


def _error_group(ctx: RequestContext, group_id: str, error: ErrorCode, state: str = "", message=None) -> object:
    return ctx.nested(
        "DescribedGroup", error_code=error, error_message=message, group_id=group_id, group_state=state,
        protocol_type="", protocol_data="", members=(), authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


@handles(API_KEY, 0, 6)
def handle_describe_groups(ctx: RequestContext, request) -> object:
    include_ops = ctx.api_version >= 3 and bool(payloads.get(request, "include_authorized_operations", False))
    described = []
    for group_id in request.groups:
        if not is_coordinator(ctx, group_id):
            described.append(_error_group(ctx, group_id, ErrorCode.not_coordinator))
            continue
        other_type = ctx.state.group_type(group_id) not in (None, "classic")
        d = None if other_type else ctx.state.groups.describe_group(group_id)
        if d is None:
            if ctx.api_version >= 6:
                message = f"Group {group_id} is not a classic group." if other_type else f"Group {group_id} not found."
                described.append(_error_group(ctx, group_id, ErrorCode.group_id_not_found, "Dead", message))
            else:
                described.append(_error_group(ctx, group_id, ErrorCode.none, "Dead"))
            continue
        described.append(ctx.nested(
            "DescribedGroup",
            error_code=ErrorCode.none,
            error_message=None,
            group_id=group_id,
            group_state=d.state,
            protocol_type=d.protocol_type,
            protocol_data=d.protocol_data,
            members=tuple(
                ctx.nested("DescribedGroupMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
                           client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                           member_assignment=m.assignment)
                for m in d.members
            ),
            authorized_operations=GROUP_AUTHORIZED_OPERATIONS if include_ops else AUTHORIZED_OPERATIONS_OMITTED,
        ))
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(described))
