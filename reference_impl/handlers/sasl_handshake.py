"""SaslHandshake (key 17), v1 (KIP-43): the client names its mechanism; SaslAuthenticate
rounds follow. The reference's SASL listener (reference:authorizer=standard) speaks PLAIN
only (RFC 4616; Kafka's PlainSaslServer). A listener without SASL answers ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.protocol.api_keys import ApiKey

MECHANISMS = ("PLAIN",)
MECHANISM = "sasl_mechanism"  # connection_state key


@handles(ApiKey.SASL_HANDSHAKE, 1, 1)
def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    if not ctx.state.config.authorizer.enabled:
        return ctx.response(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    if request.mechanism not in MECHANISMS:
        return ctx.response(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=MECHANISMS)
    ctx.connection_state[MECHANISM] = request.mechanism
    return ctx.response(error_code=ErrorCode.none, mechanisms=MECHANISMS)
