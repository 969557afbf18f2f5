"""FindCoordinator (key 10): which node coordinates a group, a transactional id or a
share-partition's state.

Every key type is placed by `ReferenceState.coordinator_for(key)`. v0-v3 carry one
key; v4+ batch keys (KIP-699) and answer per key. As in Kafka, a key type's first
lookup creates its coordinator's internal topic (`__consumer_offsets`,
`__transaction_state`, `__share_group_state`), which clients then see in Metadata;
Kafka answers that first lookup COORDINATOR_NOT_AVAILABLE while the topic is created,
the reference places the key at once (clients retry that error either way).

Share coordinator keys (key type 2, KIP-932) follow Kafka 4.x's rules (checked on
kafka-native 4.2.1 and 4.4.0): below v6 every key is INVALID_REQUEST; from v6 a key must
read `groupId:topicId:partition` (Kafka's SharePartitionKey.validate: exactly three
`:`-separated tokens, a non-blank group id, a base64 Kafka Uuid, a Java int - the
partition is not range-checked), else that key is INVALID_REQUEST. A valid key is placed
by its canonical form (trimmed group id, the Uuid's string, the int), as Kafka hashes
`SharePartitionKey.asCoordinatorKey()`.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_state_records import kafka_uuid_str
from reference_impl.model.topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.FIND_COORDINATOR
GROUP, TRANSACTION, SHARE = 0, 1, 2
COORDINATOR_TOPIC = {GROUP: CONSUMER_OFFSETS, TRANSACTION: TRANSACTION_STATE, SHARE: SHARE_GROUP_STATE}

# Errors.message() of the codes this handler returns (Kafka's text; NONE reads "NONE").
_MESSAGES = {
    ErrorCode.none: "NONE",
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.invalid_request: (
        "This most likely occurs because of a request being malformed by the client library or "
        "the message was sent to an incompatible broker. See the broker logs for more details."
    ),
}


_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT32 = range(-(2**31), 2**31)


def share_coordinator_key(key: str | None) -> str | None:
    """The canonical form of a share coordinator key, or None when Kafka rejects it."""
    if not key:
        return None
    tokens = key.split(":")
    while tokens and tokens[-1] == "":  # Java's String.split drops trailing empty strings
        tokens.pop()
    if len(tokens) != 3:
        return None
    group_id, topic_id, partition = tokens[0].strip(), tokens[1], tokens[2]
    if not group_id or len(topic_id) > 24 or not _INT_RE.fullmatch(partition) or int(partition) not in _INT32:
        return None
    try:
        raw = base64.b64decode(topic_id + "=" * (-len(topic_id) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 16:
        return None
    return f"{group_id}:{kafka_uuid_str(uuid.UUID(bytes=raw))}:{int(partition)}"


def _locate(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, int, str, int]:
    if key_type == SHARE:
        canonical = share_coordinator_key(key) if ctx.api_version >= 6 else None
        if canonical is None or ctx.state.share_coordinator is None:
            return ErrorCode.invalid_request, -1, "", -1
        key = canonical
    elif key_type not in (GROUP, TRANSACTION):
        return ErrorCode.invalid_request, -1, "", -1
    ctx.state.topics.ensure_internal(COORDINATOR_TOPIC[key_type])
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
