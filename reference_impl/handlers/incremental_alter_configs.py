"""IncrementalAlterConfigs (key 44), v0-v1: the GROUP resource (type 32) only.

Group configs (`share.auto.offset.reset`, `share.record.lock.duration.ms`, ...) are how a
share group is tuned (KIP-932); Kafka accepts them on any broker, for a group that need not
exist yet, and validates every change of a resource before storing any (INVALID_CONFIG with
a message). `validate_only` checks without storing. The reference models no topic, broker
or client-metrics configs: those resources are answered INVALID_REQUEST saying so, rather
than pretending to store them.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.group_configs import ConfigChange, GroupConfigError
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
GROUP_RESOURCE = 32


def _alter_group(ctx: RequestContext, resource, validate_only: bool) -> tuple[ErrorCode, str | None]:
    changes = [ConfigChange(c.name, int(c.config_operation), c.value) for c in resource.configs]
    names = [c.name for c in changes]
    if len(set(names)) != len(names):
        return ErrorCode.invalid_request, f"Error due to duplicate config keys: {sorted(set(n for n in names if names.count(n) > 1))}"
    try:
        if validate_only:
            ctx.state.group_configs.validate(resource.resource_name, changes)
        else:
            ctx.state.group_configs.apply(resource.resource_name, changes)
            ctx.state.share_partitions.refresh_group_config(resource.resource_name)
    except GroupConfigError as exc:
        return ErrorCode.invalid_config, str(exc)
    return ErrorCode.none, None


@handles(API_KEY, 0, 1)
def handle_incremental_alter_configs(ctx: RequestContext, request) -> object:
    results = []
    for resource in request.resources:
        rtype = int(resource.resource_type)
        if rtype == GROUP_RESOURCE:
            error, message = _alter_group(ctx, resource, request.validate_only)
        else:
            error, message = ErrorCode.invalid_request, f"the reference broker models no configs of resource type {rtype}"
        results.append(ctx.nested("AlterConfigsResourceResponse", error_code=error, error_message=message,
                                  resource_type=resource.resource_type, resource_name=resource.resource_name))
    return ctx.response(throttle_time=NO_THROTTLE, responses=tuple(results))
