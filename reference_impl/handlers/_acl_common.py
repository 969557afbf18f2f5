"""Shared by CreateAcls / DescribeAcls / DeleteAcls: the authorizer gate (SECURITY_DISABLED
without one, CLUSTER_AUTHORIZATION_FAILED without `op` on the cluster, as KafkaApis /
AclApis answer) and the request filter -> model filter translation."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers.registry import RequestContext
from reference_impl.model.acls import CLUSTER_NAME, AclFilter, Operation, PatternType, Permission, ResourceType


def gate(ctx: RequestContext, op: Operation) -> ErrorCode:
    if not ctx.state.config.authorizer.enabled:
        return ErrorCode.security_disabled
    if not authorized(ctx, op, Res.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed
    return ErrorCode.none


def acl_filter(f: Any) -> AclFilter | None:
    """The model filter of a DescribeAcls request / DeleteAcls filter; None if a code is unknown."""
    try:
        return AclFilter(
            ResourceType(int(f.resource_type_filter)), f.resource_name_filter,
            PatternType(int(f.pattern_type_filter)), f.principal_filter, f.host_filter,
            Operation(int(f.operation)), Permission(int(f.permission_type)),
        )
    except ValueError:
        return None


__all__ = ["Op", "acl_filter", "gate"]
