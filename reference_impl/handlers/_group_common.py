"""Helpers shared by the group coordinator handlers (FindCoordinator, JoinGroup, ...)."""

from __future__ import annotations

import datetime
from typing import Any

from reference_impl.handlers.registry import RequestContext
from reference_impl.model.group_coordinator import NEW_MEMBER_JOIN_TIMEOUT_MS

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


def client_host(ctx: RequestContext) -> str:
    """Kafka reports the client address as InetAddress.toString(): "/<ip>"."""
    return "/" + ctx.client_host


def join_wait_ms(session_timeout_ms: int, rebalance_timeout_ms: int) -> int:
    """Upper bound for a parked JoinGroup: the model always completes it before this."""
    return max(session_timeout_ms, rebalance_timeout_ms, 0) * 2 + NEW_MEMBER_JOIN_TIMEOUT_MS + WAIT_SLACK_MS
