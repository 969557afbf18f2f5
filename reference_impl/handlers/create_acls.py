"""CreateAcls (key 30), v1-v3: adds bindings to the cluster's ACL store (model/acls.py).
Needs ALTER on the cluster (AclApis.handleCreateAcls); an invalid binding answers
INVALID_REQUEST for that creation only."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._acl_common import Op, gate
from reference_impl.handlers._group_common import NO_THROTTLE
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from reference_impl.protocol.api_keys import ApiKey


@handles(ApiKey.CREATE_ACLS, 1, 3)
def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    refused = gate(ctx, Op.ALTER)
    results = tuple(
        _result(ctx, refused if refused != ErrorCode.none else None, c) for c in request.creations
    )
    return ctx.response(throttle_time=NO_THROTTLE, results=results)


def _result(ctx: RequestContext, refused: ErrorCode | None, creation: Any) -> Any:
    if refused is not None:
        return ctx.nested("AclCreationResult", error_code=refused, error_message=None)
    message = _binding(creation)
    if isinstance(message, AclBinding):
        message = ctx.state.acls.create(message)
    code = ErrorCode.none if message is None else ErrorCode.invalid_request
    return ctx.nested("AclCreationResult", error_code=code, error_message=message)


def _binding(c: Any) -> AclBinding | str:
    try:
        return AclBinding(
            ResourceType(int(c.resource_type)), c.resource_name, PatternType(int(c.resource_pattern_type)),
            c.principal, c.host, Operation(int(c.operation)), Permission(int(c.permission_type)),
        )
    except ValueError as exc:
        return f"invalid ACL binding: {exc}"
