"""DescribeAcls (key 29), v1-v3: the bindings a filter matches, grouped by resource
pattern. Needs DESCRIBE on the cluster (AclApis.handleDescribeAcls)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._acl_common import Op, acl_filter, gate
from reference_impl.handlers._group_common import NO_THROTTLE
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol.api_keys import ApiKey


@handles(ApiKey.DESCRIBE_ACLS, 1, 3)
def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    error = gate(ctx, Op.DESCRIBE)
    flt = acl_filter(request) if error == ErrorCode.none else None
    if error == ErrorCode.none and flt is None:
        error = ErrorCode.invalid_request
    if error != ErrorCode.none:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=error, error_message=None, resources=())
    by_pattern: dict[tuple[int, str, int], list[Any]] = {}
    for acl in ctx.state.acls.describe(flt):
        by_pattern.setdefault((int(acl.resource_type), acl.resource_name, int(acl.pattern_type)), []).append(
            ctx.nested("AclDescription", principal=acl.principal, host=acl.host, operation=int(acl.operation),
                       permission_type=int(acl.permission)))
    resources = tuple(
        ctx.nested("DescribeAclsResource", resource_type=t, resource_name=n, pattern_type=p, acls=tuple(acls))
        for (t, n, p), acls in by_pattern.items()
    )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, resources=resources)
