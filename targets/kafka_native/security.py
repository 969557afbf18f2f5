"""Secured client listeners for kafka-native (``security=ssl|sasl_plaintext|sasl_ssl``).

Pure configuration plus certificate generation, no processes: a throw-away CA and a
broker certificate (SAN 127.0.0.1 and localhost) as PEM files (Kafka reads PEM keystores
since KIP-651), the broker properties of the secured listener (PLAIN users in the
listener's JAAS config, SCRAM credentials created at format time with
``--add-scram``, unsecured OAUTHBEARER validation), and the librdkafka-style client
properties that reach it. Inter-broker and controller traffic stays on PLAINTEXT
listeners bound to other loopback ports, so a broken client-side setup cannot stop the
cluster from forming.

With ``authorizer=standard`` the cluster runs Kafka's KRaft StandardAuthorizer with
``allow.everyone.if.no.acl.found=false``: USER is a super user (the suite's own clients,
which set up topics and grant ACLs), targets.target.ACL_USERS are principals with no
permission until a test grants one. Brokers and controllers reach each other as User:ANONYMOUS over the
PLAINTEXT INTERNAL/CONTROLLER listeners, so ANONYMOUS is a super user too; no client
reaches those listeners (every client principal on the SASL listener is User:<name>).
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from targets.target import SUPER_USER

MODES = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
DEFAULT_MECHANISM = "SCRAM-SHA-512"
USER = SUPER_USER
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
INTERNAL_LISTENER = "INTERNAL"


@dataclass(frozen=True)
class SecurityFiles:
    """PEM files of one run: the CA clients trust, and the broker's key + certificate chain."""

    ca: Path
    keystore: Path  # private key (PKCS#8) followed by the certificate chain


def client_listener_name(mode: str) -> str:
    return mode.upper()


def generate_certificates(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> SecurityFiles:
    """A fresh CA and a broker certificate it signs, valid for a week."""
    from cryptography import x509  # heavy dependency: only TLS targets make certificates
    from cryptography.hazmat.primitives import hashes, serialization  # heavy dependency: only TLS targets make certificates
    from cryptography.hazmat.primitives.asymmetric import ec  # heavy dependency: only TLS targets make certificates
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # heavy dependency: only TLS targets make certificates

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=7)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kipcheck test CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    files = SecurityFiles(directory / "ca.pem", directory / "broker-keystore.pem")
    files.ca.write_bytes(ca_cert.public_bytes(pem))
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    files.keystore.write_bytes(key_pem + cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    files.keystore.chmod(0o600)
    return files


def new_password() -> str:
    return secrets.token_urlsafe(18)


def broker_properties(
    mode: str, files: SecurityFiles | None, password: str, users: dict[str, str] | None = None
) -> dict[str, str]:
    """Listener-scoped TLS and SASL settings of the client listener; `users` (name ->
    password) are PLAIN users besides USER."""
    prefix = f"listener.name.{client_listener_name(mode).lower()}."
    props: dict[str, str] = {}
    if mode in ("ssl", "sasl_ssl"):
        assert files is not None
        props.update(
            {
                prefix + "ssl.keystore.type": "PEM",
                prefix + "ssl.keystore.location": str(files.keystore),
                prefix + "ssl.client.auth": "none",
            }
        )
    if mode.startswith("sasl_"):
        props[prefix + "sasl.enabled.mechanisms"] = ",".join(MECHANISMS)
        plain_users = " ".join(f'user_{u}="{pw}"' for u, pw in {USER: password, **(users or {})}.items())
        props[prefix + "plain.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
        )
        for m in ("scram-sha-256", "scram-sha-512"):
            props[prefix + f"{m}.sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        # No callback handler: Kafka validates OAUTHBEARER with its unsecured-JWT handler.
        props[prefix + "oauthbearer.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        )
    return props


def scram_format_args(password: str, users: dict[str, str] | None = None) -> list[str]:
    """StorageTool arguments that create the SCRAM credentials of USER and `users` (KIP-900)."""
    args: list[str] = []
    for name, pw in {USER: password, **(users or {})}.items():
        for m in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            args += ["--add-scram", f"{m}=[name={name},password={pw}]"]
    return args


def authorizer_properties() -> dict[str, str]:
    """StandardAuthorizer on every (combined) node: deny what no ACL allows; USER and the
    inter-node ANONYMOUS principal are super users."""
    return {
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": f"User:{USER};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    }


def client_properties(
    mode: str, bootstrap: str, files: SecurityFiles | None, password: str, mechanism: str = DEFAULT_MECHANISM,
    user: str = USER,
) -> dict[str, str]:
    """librdkafka-style settings for this cluster as `user` (also what RawClient's ClientSecurity reads)."""
    props = {"bootstrap.servers": bootstrap, "security.protocol": mode.upper()}
    if mode in ("ssl", "sasl_ssl"):
        assert files is not None
        props["ssl.ca.location"] = str(files.ca)
    if mode.startswith("sasl_"):
        props["sasl.mechanism"] = mechanism
        if mechanism == "OAUTHBEARER":
            props["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
            props["sasl.oauthbearer.config"] = f"principal={user}"
        else:
            props["sasl.username"] = user
            props["sasl.password"] = password
    return props
