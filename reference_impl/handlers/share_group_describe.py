"""ShareGroupDescribe (key 77), v1 (KIP-932).

As Kafka answers (checked on kafka-native 4.2.1 and 4.4.0): an empty group id is
INVALID_GROUP_ID (no message) and is listed first, on any node; a group this node does not
coordinate is NOT_COORDINATOR ("This is not the correct coordinator."); the rest comes from
the model (`state.share_groups.describe`): GROUP_ID_NOT_FOUND for a missing group ("Group g
not found.") or a classic group id ("Group g is not a share group." in 4.2; 4.4 answers
"Group g not found."); otherwise state, epochs, assignor "simple" and the members with their
assignments (topic id, topic name, partitions). With an authorizer: no DESCRIBE on the
group is GROUP_AUTHORIZATION_FAILED, and a group with a member assigned a topic the
principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED with no member (Kafka, DIV-93220).
Authorized operations are sent only when
asked for (no authorizer: every group operation), else the null marker -2^31.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers._group_common import (
    AUTHORIZED_OPERATIONS_OMITTED, GROUP_AUTHORIZED_OPERATIONS, NO_THROTTLE, NOT_COORDINATOR_MESSAGE,
    described_assignment, described_group_error, is_coordinator,
)
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.SHARE_GROUP_DESCRIBE
HIDDEN_TOPICS_MESSAGE = "The group has described topic(s) that the client is not authorized to describe."


def _topics_describable(ctx: RequestContext, members: Any) -> bool:
    """Kafka hides a group whose members are assigned a topic the principal may not
    DESCRIBE (DIV-93220: the KIP's table asks only DESCRIBE on the group)."""
    names = ctx.state.topics.name_for_id
    return all(authorized(ctx, Op.DESCRIBE, Res.TOPIC, names(topic_id) or "")
               for m in members for topic_id, _ in m.assignment)


@handles(API_KEY, 1, 1)
def handle_share_group_describe(ctx: RequestContext, request) -> object:
    if not ctx.state.config.share_groups_enabled:
        return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(
            described_group_error(ctx, g, ErrorCode.unsupported_version) for g in request.group_ids
        ))
    include_ops = bool(request.include_authorized_operations)
    invalid = [g for g in request.group_ids if not g]
    valid = [g for g in request.group_ids if g]
    described = [described_group_error(ctx, g or "", ErrorCode.invalid_group_id) for g in invalid]
    for group_id in valid:
        if not authorized(ctx, Op.DESCRIBE, Res.GROUP, group_id):
            described.append(described_group_error(ctx, group_id, ErrorCode.group_authorization_failed))
            continue
        if not is_coordinator(ctx, group_id):
            described.append(described_group_error(ctx, group_id, ErrorCode.not_coordinator, NOT_COORDINATOR_MESSAGE))
            continue
        (d,) = ctx.state.share_groups.describe([group_id], ctx.now_ms)
        if d.error != ErrorCode.none:
            described.append(described_group_error(ctx, group_id, d.error, d.error_message))
            continue
        if not _topics_describable(ctx, d.members):
            described.append(described_group_error(ctx, group_id, ErrorCode.topic_authorization_failed, HIDDEN_TOPICS_MESSAGE))
            continue
        described.append(ctx.nested(
            "DescribedGroup",
            error_code=ErrorCode.none,
            error_message=None,
            group_id=group_id,
            group_state=d.state,
            group_epoch=d.group_epoch,
            assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor_name,
            members=tuple(
                ctx.nested(
                    "Member", member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                    client_id=m.client_id, client_host=m.client_host,
                    subscribed_topic_names=tuple(m.subscribed_topic_names),
                    assignment=described_assignment(ctx, m.assignment),
                )
                for m in d.members
            ),
            authorized_operations=GROUP_AUTHORIZED_OPERATIONS if include_ops else AUTHORIZED_OPERATIONS_OMITTED,
        ))
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(described))
