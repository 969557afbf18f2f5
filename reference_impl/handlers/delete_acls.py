"""DeleteAcls (key 31), v1-v3: removes what each filter matches and lists it. Needs
ALTER on the cluster (AclApis.handleDeleteAcls)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._acl_common import Op, acl_filter, gate
from reference_impl.handlers._group_common import NO_THROTTLE
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol.api_keys import ApiKey


@handles(ApiKey.DELETE_ACLS, 1, 3)
def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    refused = gate(ctx, Op.ALTER)
    return ctx.response(throttle_time=NO_THROTTLE, filter_results=tuple(
        _filter_result(ctx, refused, f) for f in request.filters))


def _filter_result(ctx: RequestContext, refused: ErrorCode, f: Any) -> Any:
    flt = acl_filter(f) if refused == ErrorCode.none else None
    if flt is None:
        error = refused if refused != ErrorCode.none else ErrorCode.invalid_request
        return ctx.nested("DeleteAclsFilterResult", error_code=error, error_message=None, matching_acls=())
    matching = tuple(
        ctx.nested("DeleteAclsMatchingAcl", error_code=ErrorCode.none, error_message=None,
                   resource_type=int(a.resource_type), resource_name=a.resource_name, pattern_type=int(a.pattern_type),
                   principal=a.principal, host=a.host, operation=int(a.operation), permission_type=int(a.permission))
        for a in ctx.state.acls.delete(flt)
    )
    return ctx.nested("DeleteAclsFilterResult", error_code=ErrorCode.none, error_message=None, matching_acls=matching)
