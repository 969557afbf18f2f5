"""FindCoordinator (key 10): which node coordinates a group or a transactional id.

Both key types are placed by `ReferenceState.coordinator_for(key)`. v0-v3 carry one
key; v4+ batch keys (KIP-699) and answer per key. Share coordinators (key type 2) are
not offered: INVALID_REQUEST, as a Kafka broker without a share coordinator answers.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol import payloads

API_KEY = 10
GROUP, TRANSACTION, SHARE = 0, 1, 2

# Errors.message() of the codes this handler returns (Kafka's text; NONE reads "NONE").
_MESSAGES = {
    ErrorCode.none: "NONE",
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.invalid_request: (
        "This most likely occurs because of a request being malformed by the client library or "
        "the message was sent to an incompatible broker. See the broker logs for more details."
    ),
}


def _locate(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, int, str, int]:
    if key_type not in (GROUP, TRANSACTION):
        return ErrorCode.invalid_request, -1, "", -1  # share: no share coordinator here
    node_id = ctx.state.coordinator_for(key)
    endpoint = ctx.state.nodes.get(node_id)
    if endpoint is None or node_id not in ctx.state.alive:
        return ErrorCode.coordinator_not_available, -1, "", -1
    return ErrorCode.none, node_id, endpoint.host, endpoint.port


@handles(API_KEY, 0, 6)
def handle_find_coordinator(ctx: RequestContext, request) -> object:
    key_type = int(payloads.get(request, "key_type", GROUP))
    if ctx.api_version >= 4:
        # An unknown key type fails the whole request (with the error's message); errors
        # found per key carry no message.
        unknown_type = key_type not in (GROUP, TRANSACTION, SHARE)
        coordinators = []
        for key in request.coordinator_keys:
            error, node_id, host, port = _locate(ctx, key_type, key)
            coordinators.append(ctx.nested(
                "Coordinator", key=key, node_id=node_id, host=host, port=port, error_code=error,
                error_message=_MESSAGES[error] if unknown_type else "",
            ))
        return ctx.response(throttle_time=NO_THROTTLE, coordinators=tuple(coordinators))
    error, node_id, host, port = _locate(ctx, key_type, request.key)
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=error, error_message=_MESSAGES[error],
        node_id=node_id, host=host, port=port,
    )
