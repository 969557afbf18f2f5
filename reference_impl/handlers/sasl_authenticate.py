"""SaslAuthenticate (key 36), v0-v2 (KIP-152): one PLAIN round, "[authzid] NUL user NUL
password" (RFC 4616). Success makes the connection's principal User:<user>; a wrong
password or an authzid naming someone else answers SASL_AUTHENTICATION_FAILED (Kafka's
PlainSaslServer), and the connection stays unauthenticated (every other request on it
closes it, see server/broker_server.py).
"""

from __future__ import annotations

import datetime
import hmac
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import PRINCIPAL
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.handlers.sasl_handshake import MECHANISM
from reference_impl.protocol.api_keys import ApiKey

NO_SESSION_LIMIT = datetime.timedelta(0)  # connections.max.reauth.ms unset


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    if ctx.connection_state.get(MECHANISM) is None or PRINCIPAL in ctx.connection_state:
        return _answer(ctx, ErrorCode.illegal_sasl_state, "SaslAuthenticate outside a SASL handshake")
    user = plain_user(bytes(request.auth_bytes), ctx.state.config.authorizer.users)
    if user is None:
        return _answer(ctx, ErrorCode.sasl_authentication_failed, "Authentication failed: Invalid username or password")
    ctx.connection_state[PRINCIPAL] = f"User:{user}"
    return _answer(ctx, ErrorCode.none, None)


def plain_user(message: bytes, users: dict[str, str]) -> str | None:
    """The user a PLAIN message authenticates, or None."""
    parts = message.split(b"\0")
    if len(parts) != 3:
        return None
    authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
    if authzid and authzid != user:
        return None
    return user if user in users and hmac.compare_digest(users[user], password) else None


def _answer(ctx: RequestContext, error: ErrorCode, message: str | None) -> Any:
    return ctx.response(error_code=error, error_message=message, auth_bytes=b"", session_lifetime=NO_SESSION_LIMIT)
