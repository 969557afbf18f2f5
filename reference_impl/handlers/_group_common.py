"""Helpers shared by the group coordinator handlers (FindCoordinator, JoinGroup, ...)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Res, authorized
from reference_impl.handlers.registry import RequestContext
from reference_impl.model.acls import Operation
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
