"""SASL for the raw client: SaslHandshake (KIP-43) then SaslAuthenticate (KIP-152) rounds.

Mechanisms are small state machines (`initial()` then `respond(server_bytes)`), the same
split as Kafka's SaslClient implementations: PLAIN (RFC 4616), SCRAM-SHA-256/512
(RFC 5802, RFC 7677; Kafka's ScramSaslClient) and OAUTHBEARER with an unsecured JWT
(RFC 7628 framing; Kafka's OAuthBearerUnsecuredLoginCallbackHandler tokens).
"""

from __future__ import annotations

import abc
import base64
import hashlib
import hmac
import json
import os
import time
from typing import Any, Protocol

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from reference_impl.client.security import ClientSecurity
from reference_impl.protocol import framing

SASL_AUTHENTICATE = int(SaslAuthenticateRequest.__api_key__)


class SaslConnection(Protocol):
    """What the exchange needs of the connection it authenticates (raw_client.RawClient,
    which calls `authenticate` while it connects)."""

    host: str
    port: int
    timeout: float

    def send(self, payload: Any) -> Any:
        """Send a kio request payload; the decoded response."""

    def request(self, api_key: int, api_version: int, /, **fields: Any) -> Any:
        """Build and send the request of this key/version."""


class AuthenticationError(RuntimeError):
    """SASL authentication failed; the message carries the broker's own words."""


class SaslMechanism(abc.ABC):
    name = ""

    @abc.abstractmethod
    def initial(self) -> bytes:
        """The client's first message."""

    @abc.abstractmethod
    def respond(self, challenge: bytes) -> bytes | None:
        """The next client message, or None when the exchange is complete."""


class Plain(SaslMechanism):
    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self.username, self.password = username, password

    def initial(self) -> bytes:
        return b"\0" + self.username.encode() + b"\0" + self.password.encode()

    def respond(self, challenge: bytes) -> bytes | None:
        return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if sep and len(key) == 1:
            out[key] = value
    return out


class Scram(SaslMechanism):
    """RFC 5802 client: client-first, server-first, client-final with proof, server signature."""

    def __init__(self, hash_name: str, username: str, password: str, nonce: str | None = None) -> None:
        self.hash_name = hash_name
        self.name = "SCRAM-SHA-256" if hash_name == "sha256" else "SCRAM-SHA-512"
        self.username, self.password = username, password
        self.nonce = nonce or base64.b64encode(os.urandom(24)).decode().rstrip("=")
        self._first_bare = f"n={_saslname(username)},r={self.nonce}"
        self._server_signature: bytes | None = None

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash_name).digest()

    def initial(self) -> bytes:
        return ("n,," + self._first_bare).encode()

    def respond(self, challenge: bytes) -> bytes | None:
        if self._server_signature is None:
            return self.client_final(challenge.decode()).encode()
        self.verify_server_final(challenge.decode())
        return None

    def client_final(self, server_first: str) -> str:
        attrs = _attributes(server_first)
        if "e" in attrs:
            raise AuthenticationError(f"{self.name}: server error {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
        if not nonce.startswith(self.nonce) or salt is None or not iterations.isdigit():
            raise AuthenticationError(f"{self.name}: malformed server-first-message {server_first!r}")
        salted = hashlib.pbkdf2_hmac(self.hash_name, self.password.encode(), base64.b64decode(salt), int(iterations))
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self.hash_name, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode()
        proof = _xor(client_key, self._hmac(stored_key, auth_message))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(proof)}"

    def verify_server_final(self, server_final: str) -> None:
        attrs = _attributes(server_final)
        if "e" in attrs:
            raise AuthenticationError(f"{self.name}: server error {attrs['e']}")
        if self._server_signature is None or attrs.get("v") != _b64(self._server_signature):
            raise AuthenticationError(f"{self.name}: the server's signature does not verify")


def unsecured_jwt(principal: str, life_s: int = 3600, scope: str | None = None, now: float | None = None) -> str:
    """An unsigned JWT (alg none) like Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes."""
    def enc(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode().rstrip("=")

    iat = int(now if now is not None else time.time())
    claims: dict[str, Any] = {"sub": principal, "iat": iat, "exp": iat + life_s}
    if scope:
        claims["scope"] = scope.split(",")
    return f"{enc({'alg': 'none'})}.{enc(claims)}."


class OAuthBearer(SaslMechanism):
    """RFC 7628 initial response with a bearer token; extensions from ``extension_NAME=value``."""

    name = "OAUTHBEARER"

    def __init__(self, config: dict[str, str]) -> None:
        self.token = unsecured_jwt(config["principal"], int(config.get("lifeSeconds", "3600")), config.get("scope"))
        self.extensions = {k[len("extension_"):]: v for k, v in config.items() if k.startswith("extension_")}

    def initial(self) -> bytes:
        ext = "".join(f"{k}={v}\x01" for k, v in sorted(self.extensions.items()))
        return f"n,,\x01auth=Bearer {self.token}\x01{ext}\x01".encode()

    def respond(self, challenge: bytes) -> bytes | None:
        if challenge:  # RFC 7628 3.2.2: an error JSON; the client answers with a lone 0x01
            raise AuthenticationError(f"OAUTHBEARER rejected: {challenge.decode(errors='replace')}")
        return None


def mechanism_for(security: ClientSecurity) -> SaslMechanism:
    m = security.mechanism
    if m == "PLAIN":
        return Plain(security.username or "", security.password or "")
    if m in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        return Scram("sha256" if m.endswith("256") else "sha512", security.username or "", security.password or "")
    if m == "OAUTHBEARER":
        return OAuthBearer(security.oauthbearer)
    raise AuthenticationError(f"SASL mechanism {m} is not spoken by the raw client")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def authenticate(client: SaslConnection, security: ClientSecurity) -> None:
    """Handshake v1 then SaslAuthenticate rounds (KIP-152 framing) at the broker's highest version."""
    mech = mechanism_for(security)
    where = f"{client.host}:{client.port}"
    try:
        versions = client.send(ApiVersionsRequest()).api_keys
        auth_max = next((int(k.max_version) for k in versions if int(k.api_key) == SASL_AUTHENTICATE), 0)
        auth_version = min(auth_max, 2)
        hs = client.send(SaslHandshakeRequest(mechanism=mech.name))
        if int(hs.error_code) != 0:
            raise AuthenticationError(
                f"{where}: SASL mechanism {mech.name} not enabled ({_error_name(int(hs.error_code))}); "
                f"the broker offers {', '.join(hs.mechanisms) or 'none'}"
            )
        message: bytes | None = mech.initial()
        while message is not None:
            resp = client.request(SASL_AUTHENTICATE, auth_version, auth_bytes=message)
            if int(resp.error_code) != 0:
                raise AuthenticationError(
                    f"{where}: SASL {mech.name} authentication as {security.username or security.oauthbearer.get('principal')!r} "
                    f"failed: {_error_name(int(resp.error_code))}: {resp.error_message}"
                )
            message = mech.respond(bytes(resp.auth_bytes))
    except (ConnectionError, framing.PayloadDecodeError) as exc:
        raise AuthenticationError(f"{where}: connection lost during SASL {mech.name} authentication: {exc}") from exc
    except TimeoutError as exc:
        raise AuthenticationError(f"{where}: no answer during SASL {mech.name} authentication within {client.timeout:g}s") from exc
