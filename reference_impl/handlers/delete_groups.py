"""DeleteGroups (key 42), v0-v2: only Empty (or offsets-only) groups can be deleted.

A share group id (KIP-932) goes to `state.share_groups`: NON_EMPTY_GROUP while it has
members, else its records are tombstoned and its share-partition state is deleted from the
share coordinator (DeleteShareGroupState), as Kafka does. A consumer group (KIP-848) is
deleted by `state.groups` like a classic one: NON_EMPTY_GROUP while it has members.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DELETE_GROUPS


@handles(API_KEY, 0, 2)
def handle_delete_groups(ctx: RequestContext, request) -> object:
    results = []
    for group_id in dict.fromkeys(request.groups_names):  # duplicates are answered once
        if not is_coordinator(ctx, group_id):
            error = ErrorCode.not_coordinator
        elif ctx.state.share_groups.group_type(group_id) is not None:
            ((_, error),) = ctx.state.share_groups.delete_groups([group_id], ctx.now_ms)
        else:
            ((_, error),) = ctx.state.groups.delete_groups([group_id])
        results.append(ctx.nested("DeletableGroupResult", group_id=group_id, error_code=error))
    return ctx.response(throttle_time=NO_THROTTLE, results=tuple(results))
