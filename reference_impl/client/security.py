"""Client security settings for the raw client, read from librdkafka-style properties.

The same ``key=value`` settings that confluent-kafka takes (``security.protocol``,
``sasl.mechanism(s)``, ``sasl.username``, ``ssl.ca.location`` ...) configure TLS (Python's
``ssl`` module) and SASL (reference_impl.client.sasl) for RawClient, so one properties
file serves both the library clients and the wire-level checks.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, field
from typing import Any, Mapping

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
# librdkafka properties that configure something this client does not implement.
_UNSUPPORTED = {
    "ssl.certificate.pem": "use ssl.certificate.location (a PEM file)",
    "ssl.key.pem": "use ssl.key.location (a PEM file)",
    "ssl.keystore.location": "use ssl.certificate.location / ssl.key.location (PEM files)",
    "sasl.oauthbearer.token.endpoint.url": "only unsecured JWTs (sasl.oauthbearer.config principal=...) are built",
}


class SecurityConfigError(ValueError):
    """The properties name a security setup the raw client cannot speak."""


def _flag(props: Mapping[str, str], key: str, default: bool) -> bool:
    value = props.get(key)
    if value is None:
        return default
    v = str(value).strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise SecurityConfigError(f"{key} must be true or false, got {value!r}")


def parse_oauthbearer_config(text: str) -> dict[str, str]:
    """librdkafka's ``sasl.oauthbearer.config``: space-separated ``name=value`` pairs."""
    out: dict[str, str] = {}
    for part in text.split():
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise SecurityConfigError(f"sasl.oauthbearer.config: expected name=value, got {part!r}")
        out[name] = value
    return out


@dataclass(frozen=True)
class ClientSecurity:
    """How to secure one raw connection: TLS settings and the SASL mechanism with credentials."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    ca_pem: str | None = field(default=None, repr=False)
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    verify_certificate: bool = True
    check_hostname: bool = True
    oauthbearer: dict[str, str] = field(default_factory=dict)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None) -> "ClientSecurity":
        """Parse librdkafka-style settings; unknown keys are ignored (they are for other clients)."""
        props = {str(k): str(v) for k, v in (props or {}).items() if isinstance(v, (str, int, float, bool))}
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security.protocol={protocol!r} is not one of {', '.join(PROTOCOLS)}")
        for key, hint in _UNSUPPORTED.items():
            if key in props and protocol != "PLAINTEXT":
                raise SecurityConfigError(f"the raw client does not read {key}: {hint}")
        mechanism = None
        if protocol.startswith("SASL_"):
            # librdkafka's default mechanism is GSSAPI; say so rather than guess another.
            mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").strip().upper()
            if mechanism not in MECHANISMS:
                raise SecurityConfigError(
                    f"sasl.mechanism={mechanism} is not spoken by the raw client (it speaks {', '.join(MECHANISMS)})"
                )
            if mechanism != "OAUTHBEARER" and not (props.get("sasl.username") and "sasl.password" in props):
                raise SecurityConfigError(f"SASL {mechanism} needs sasl.username and sasl.password")
        oauth = parse_oauthbearer_config(props.get("sasl.oauthbearer.config", ""))
        if mechanism == "OAUTHBEARER" and "principal" not in oauth:
            raise SecurityConfigError("OAUTHBEARER needs sasl.oauthbearer.config with principal=NAME (unsecured JWT)")
        ca = props.get("ssl.ca.location")
        return cls(
            protocol=protocol,
            mechanism=mechanism,
            username=props.get("sasl.username"),
            password=props.get("sasl.password"),
            ca_location=None if ca in (None, "", "probe") else ca,
            ca_pem=props.get("ssl.ca.pem"),
            certificate_location=props.get("ssl.certificate.location"),
            key_location=props.get("ssl.key.location"),
            key_password=props.get("ssl.key.password"),
            verify_certificate=_flag(props, "enable.ssl.certificate.verification", True),
            check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").strip().lower() == "https",
            oauthbearer=oauth,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context: the CA file (or system roots), optional client certificate."""
        ctx = ssl.create_default_context(cafile=self.ca_location, cadata=self.ca_pem)
        if not self.verify_certificate:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif not self.check_hostname:
            ctx.check_hostname = False
        if self.certificate_location:
            ctx.load_cert_chain(self.certificate_location, self.key_location, self.key_password)
        return ctx

    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        """TLS handshake on a connected socket (bounded by the socket's timeout)."""
        if not self.tls:
            return sock
        try:
            return self.ssl_context().wrap_socket(sock, server_hostname=host)
        except (ssl.SSLError, ssl.CertificateError) as exc:
            sock.close()
            raise ConnectionError(f"TLS handshake with {host} failed: {exc}") from exc
        except OSError:
            sock.close()
            raise


PLAINTEXT = ClientSecurity()
