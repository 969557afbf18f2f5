"""ConsumerGroupDescribe (key 69), v0-v1 (KIP-848; v1 adds the member type).

As Kafka's GroupMetadataManager.consumerGroupDescribe: an empty group id is INVALID_GROUP_ID
(listed first),
no DESCRIBE on the group GROUP_AUTHORIZATION_FAILED, a group this node does not coordinate
NOT_COORDINATOR, a missing group or one of another type GROUP_ID_NOT_FOUND; otherwise the
state, epochs, assignor and every member with its current and target assignment (topic
id, name, partitions). Authorized operations only when asked for, else -2^31.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers._group_common import (
    AUTHORIZED_OPERATIONS_OMITTED, GROUP_AUTHORIZED_OPERATIONS, NO_THROTTLE, NOT_COORDINATOR_MESSAGE,
    described_assignment, described_group_error, is_coordinator,
)
from reference_impl.handlers.consumer_group_heartbeat import sorted_topic_partitions
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.consumer_assignor import Assignment
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
# ConsumerGroupDescribe v1's MemberType: 1 = a member of the consumer (KIP-848) protocol.
CONSUMER_MEMBER_TYPE = 1


def _assignment(ctx: RequestContext, assignment: Assignment) -> Any:
    return described_assignment(ctx, sorted_topic_partitions(assignment))


def _member(ctx: RequestContext, m) -> Any:
    fields = dict(
        member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
        client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=tuple(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
        assignment=_assignment(ctx, m.assignment), target_assignment=_assignment(ctx, m.target_assignment),
    )
    if ctx.api_version >= 1:
        fields["member_type"] = CONSUMER_MEMBER_TYPE
    return ctx.nested("Member", **fields)


@handles(API_KEY, 0, 1, enabled=lambda config: config.consumer_groups_enabled)
def handle_consumer_group_describe(ctx: RequestContext, request) -> object:
    include_ops = bool(request.include_authorized_operations)
    # Empty group ids are answered first, as Kafka does (observed on kafka-native 4.4.0).
    described = [described_group_error(ctx, "", ErrorCode.invalid_group_id) for g in request.group_ids if not g]
    for group_id in (g for g in request.group_ids if g):
        if not authorized(ctx, Op.DESCRIBE, Res.GROUP, group_id):
            described.append(described_group_error(ctx, group_id, ErrorCode.group_authorization_failed))
        elif not is_coordinator(ctx, group_id):
            described.append(described_group_error(ctx, group_id, ErrorCode.not_coordinator, NOT_COORDINATOR_MESSAGE))
        else:
            d = ctx.state.groups.consumer.describe(group_id)
            if d.error != ErrorCode.none:
                described.append(described_group_error(ctx, group_id, d.error, d.error_message))
                continue
            described.append(ctx.nested(
                "DescribedGroup", error_code=ErrorCode.none, error_message=None, group_id=group_id,
                group_state=d.state, group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch,
                assignor_name=d.assignor_name, members=tuple(_member(ctx, m) for m in d.members),
                authorized_operations=GROUP_AUTHORIZED_OPERATIONS if include_ops else AUTHORIZED_OPERATIONS_OMITTED,
            ))
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(described))
