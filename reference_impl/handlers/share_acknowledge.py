"""ShareAcknowledge (key 79), v1-v2.

* Session epochs: 0 is INVALID_SHARE_SESSION_EPOCH (a ShareAcknowledge cannot open a
  session); 1..MAX must match the session (SHARE_SESSION_NOT_FOUND,
  INVALID_SHARE_SESSION_EPOCH) and increment it; -1 needs only an existing session, applies
  the acknowledgements, releases what the member still holds and closes the session.
  Session errors are top-level. Membership is not checked unless
  `require_group_membership` is set (then UNKNOWN_MEMBER_ID), as in Kafka.
* Per partition (atomic): UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION (also: no
  share-partition for this group on this leader), NOT_LEADER_OR_FOLLOWER (with the
  current leader), INVALID_REQUEST (malformed batches, unknown types, RENEW before v2 or
  while disabled), INVALID_RECORD_STATE (not acquired by this member, or lock expired).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers.metadata import nonzero_uuid, sync_liveness
from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.handlers.share_fetch import (
    NO_THROTTLE,
    apply_acks,
    leader_endpoints,
    lock_timeout,
    member_error,
    share_manager,
)
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.share_session import FINAL_EPOCH, ShareSessionError
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.SHARE_ACKNOWLEDGE


def _error_response(ctx: RequestContext, error: ErrorCode, message: str | None = None) -> Any:
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=error, error_message=message,
        acquisition_lock_timeout=datetime.timedelta(0), responses=(), node_endpoints=(),
    )


@handles(API_KEY, 1, 2)
def handle_share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    sync_liveness(ctx)
    if not ctx.state.config.share_groups_enabled:
        return _error_response(ctx, ErrorCode.unsupported_version, "Share groups are not enabled (share.version).")
    if not authorized(ctx, Op.READ, Res.GROUP, request.group_id or ""):  # topic READ: share_fetch.resolve
        return _error_response(ctx, ErrorCode.group_authorization_failed)
    mgr = share_manager(ctx.state)
    now = ctx.now_ms
    mgr.tick(now)
    group_id, member_id = request.group_id, request.member_id
    epoch = int(request.share_session_epoch)
    if group_id is None or not member_id:
        return _error_response(ctx, ErrorCode.invalid_request, "GroupId and MemberId are required.")
    if (err := member_error(ctx.state, group_id, member_id)) is not None:
        return _error_response(ctx, err, "The member is not a member of the share group.")
    try:
        mgr.sessions(ctx.node_id).acknowledge_session_update(group_id, member_id, epoch, now)
    except ShareSessionError as exc:
        return _error_response(ctx, exc.code, exc.message)
    outcomes = []
    for t in request.topics:
        tid = nonzero_uuid(t.topic_id)
        for p in t.partitions:
            outcomes.append(apply_acks(ctx, mgr, group_id, member_id, tid, int(p.partition_index), p.acknowledgement_batches))
    if epoch == FINAL_EPOCH:
        mgr.close_session(ctx.node_id, group_id, member_id)
    failed = next((o for o in outcomes if o.ack_error), None)
    if failed is not None and ctx.state.config.seeded_bugs.has(bugs.SHARE_ACK_ERRORS_NOT_PER_PARTITION):
        for o in outcomes:
            o.ack_error, o.ack_message = failed.ack_error, failed.ack_message
    by_topic: dict[Any, list[Any]] = {}
    for o in outcomes:
        by_topic.setdefault(o.topic_id, []).append(
            ctx.nested(
                "PartitionData",
                partition_index=o.partition,
                error_code=o.ack_error or ErrorCode.none,
                error_message=o.ack_message,
                current_leader=ctx.nested("LeaderIdAndEpoch", leader_id=o.leader[0], leader_epoch=o.leader[1]),
            )
        )
    topics = tuple(
        ctx.nested("ShareAcknowledgeTopicResponse", topic_id=tid or uuid.UUID(int=0), partitions=tuple(parts))
        for tid, parts in by_topic.items()
    )
    for o in outcomes:
        o.error = o.ack_error or ErrorCode.none
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        acquisition_lock_timeout=lock_timeout(mgr, group_id),
        responses=topics,
        node_endpoints=leader_endpoints(ctx, outcomes),
    )
