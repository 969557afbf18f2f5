"""Helpers shared by the group coordinator handlers (FindCoordinator, JoinGroup, ...)."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers.registry import RequestContext
from reference_impl.model.acls import Operation, operations_bitfield
from reference_impl.model.group_coordinator import NEW_MEMBER_JOIN_TIMEOUT_MS, OffsetCommitEntry
from reference_impl.protocol import payloads

NO_THROTTLE = datetime.timedelta(0)
_MS = datetime.timedelta(milliseconds=1)
# Extra wait on top of the model's own deadlines before a parked request is given up.
WAIT_SLACK_MS = 60_000


def millis(value: Any, default: int = -1) -> int:
    """Milliseconds of a kio timedelta field (or a plain int)."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return int(value // _MS)
    return int(value)


def is_coordinator(ctx: RequestContext, key: str) -> bool:
    """Does the node that was asked coordinate this group / transactional id?"""
    return ctx.state.coordinator_for(key) == ctx.node_id


NOT_COORDINATOR_MESSAGE = "This is not the correct coordinator."
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
# Without an authorizer every group operation is allowed.
GROUP_AUTHORIZED_OPERATIONS = operations_bitfield((
    Operation.READ, Operation.DELETE, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS))

# (topic id, partitions) pairs in the order they go on the wire.
TopicIdPartitions = Iterable[tuple[Any, Iterable[int]]]


def share_admin_refusal(
    ctx: RequestContext, group_id: str, op: Operation | None = None,
) -> tuple[ErrorCode, str | None] | None:
    """Why Kafka refuses a share-group offsets request before looking at the group (share
    groups off, empty group id -- checked before placement --, no `op` on the group with an
    authorizer, wrong coordinator), or None."""
    if not ctx.state.config.share_groups_enabled:
        return ErrorCode.unsupported_version, None
    if not group_id:
        return ErrorCode.invalid_group_id, "The group id is invalid."
    if op is not None and not authorized(ctx, op, Res.GROUP, group_id):
        return ErrorCode.group_authorization_failed, None
    if not is_coordinator(ctx, group_id):
        return ErrorCode.not_coordinator, NOT_COORDINATOR_MESSAGE
    return None


def client_host(ctx: RequestContext) -> str:
    """Kafka reports the client address as InetAddress.toString(): "/<ip>"."""
    return "/" + ctx.client_host


def join_wait_ms(session_timeout_ms: int, rebalance_timeout_ms: int) -> int:
    """Upper bound for a parked JoinGroup: the model always completes it before this."""
    return max(session_timeout_ms, rebalance_timeout_ms, 0) * 2 + NEW_MEMBER_JOIN_TIMEOUT_MS + WAIT_SLACK_MS


def split_known_partitions(ctx: RequestContext, request_topics) -> tuple[dict[str, list[tuple[int, ErrorCode]]], list[OffsetCommitEntry]]:
    """Offset commit entries of existing partitions, and UNKNOWN_TOPIC_OR_PARTITION results
    (topic -> [(partition, error)]) for the rest, in the order Kafka's response builder adds
    them. Shared by OffsetCommit and TxnOffsetCommit, which validate topics the same way."""
    topics = ctx.state.topics
    results: dict[str, list[tuple[int, ErrorCode]]] = {}
    valid: list[OffsetCommitEntry] = []
    for topic in request_topics:
        known = topics.get(topic.name)
        for p in topic.partitions:
            index = int(p.partition_index)
            if known is None or known.partition(index) is None:
                results.setdefault(topic.name, []).append((index, ErrorCode.unknown_topic_or_partition))
            else:
                valid.append(OffsetCommitEntry(
                    topic=topic.name,
                    partition=index,
                    offset=int(p.committed_offset),
                    leader_epoch=int(payloads.get(p, "committed_leader_epoch", -1)),
                    metadata=p.committed_metadata,
                ))
    return results, valid


# -- ConsumerGroupHeartbeat / ShareGroupHeartbeat (KIP-848 / KIP-932 share one response shape) --


def heartbeat_authorization_error(ctx: RequestContext, request: Any) -> ErrorCode | None:
    """KafkaApis' group heartbeat checks: READ on the group, then DESCRIBE on every
    subscribed topic (for share groups Kafka's addition to the KIP, DIV-93220)."""
    if not authorized(ctx, Op.READ, Res.GROUP, request.group_id or ""):
        return ErrorCode.group_authorization_failed
    if any(not authorized(ctx, Op.DESCRIBE, Res.TOPIC, t) for t in request.subscribed_topic_names or ()):
        return ErrorCode.topic_authorization_failed
    return None


def heartbeat_error(ctx: RequestContext, error: ErrorCode, message: str | None = None) -> Any:
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=error, error_message=message, member_id=None,
        member_epoch=0, heartbeat_interval=datetime.timedelta(0), assignment=None,
    )


def heartbeat_refusal(ctx: RequestContext, request: Any, enabled: bool,
                      validation: Callable[[], tuple[ErrorCode, str | None] | None], group_id: str) -> Any | None:
    """The error response of a group heartbeat refused before its model runs, in Kafka's
    order: the protocol off (UNSUPPORTED_VERSION), authorization, the coordinator service's
    request validation (answered on any node), placement (NOT_COORDINATOR); else None."""
    if not enabled:
        return heartbeat_error(ctx, ErrorCode.unsupported_version)
    refused = heartbeat_authorization_error(ctx, request)
    if refused is not None:
        return heartbeat_error(ctx, refused)
    invalid = validation()
    if invalid is not None:
        return heartbeat_error(ctx, *invalid)
    if not is_coordinator(ctx, group_id):
        return heartbeat_error(ctx, ErrorCode.not_coordinator)
    return None


def heartbeat_response(ctx: RequestContext, result: Any, assignment: TopicIdPartitions | None) -> Any:
    """A successful heartbeat; `assignment` None means unchanged (sent as null)."""
    wire_assignment = None
    if assignment is not None:
        wire_assignment = ctx.nested("Assignment", topic_partitions=tuple(
            ctx.nested("TopicPartitions", topic_id=topic_id, partitions=tuple(partitions))
            for topic_id, partitions in assignment
        ))
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=wire_assignment,
    )


# -- ConsumerGroupDescribe / ShareGroupDescribe ------------------------------------------


def described_group_error(ctx: RequestContext, group_id: str, error: ErrorCode, message: str | None = None) -> Any:
    return ctx.nested(
        "DescribedGroup", error_code=error, error_message=message, group_id=group_id, group_state="",
        group_epoch=0, assignment_epoch=0, assignor_name="", members=(),
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def described_assignment(ctx: RequestContext, assignment: TopicIdPartitions) -> Any:
    """A member's assignment as the describe responses send it: topic id, name, partitions."""
    names = ctx.state.topics.name_for_id
    return ctx.nested("Assignment", topic_partitions=tuple(
        ctx.nested("TopicPartitions", topic_id=topic_id, topic_name=names(topic_id) or "",
                   partitions=tuple(partitions))
        for topic_id, partitions in assignment
    ))
