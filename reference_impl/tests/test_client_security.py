"""SCRAM maths against RFC 7677's SCRAM-SHA-256 example, SASL messages, security properties parsing."""

from __future__ import annotations

import base64
import json

import pytest

from reference_impl.client.sasl import AuthenticationError, OAuthBearer, Plain, Scram, unsecured_jwt
from reference_impl.client.security import ClientSecurity, SecurityConfigError

# RFC 7677 section 3: user "user", password "pencil".
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_sha256_matches_rfc7677_vector():
    scram = Scram("sha256", "user", "pencil", nonce=CLIENT_NONCE)
    assert scram.initial() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert scram.respond(SERVER_FIRST.encode()) == CLIENT_FINAL.encode()
    assert scram.respond(SERVER_FINAL.encode()) is None


def test_scram_rejects_a_wrong_server_signature_and_foreign_nonce():
    scram = Scram("sha256", "user", "pencil", nonce=CLIENT_NONCE)
    scram.respond(SERVER_FIRST.encode())
    with pytest.raises(AuthenticationError, match="signature"):
        scram.respond(b"v=" + base64.b64encode(b"x" * 32))
    other = Scram("sha512", "user", "pencil", nonce="abc")
    with pytest.raises(AuthenticationError, match="malformed"):
        other.respond(SERVER_FIRST.encode())
    with pytest.raises(AuthenticationError, match="invalid-proof"):
        Scram("sha512", "u", "p", nonce="n").respond(b"e=invalid-proof")


def test_scram_escapes_username():
    assert Scram("sha512", "a=b,c", "p", nonce="n").initial() == b"n,,n=a=3Db=2Cc,r=n"


def test_plain_and_oauthbearer_messages():
    assert Plain("alice", "secret").initial() == b"\0alice\0secret"
    msg = OAuthBearer({"principal": "alice", "extension_traceId": "x"}).initial().decode()
    assert msg.startswith("n,,\x01auth=Bearer ") and msg.endswith("\x01traceId=x\x01\x01")
    header, claims, signature = unsecured_jwt("alice", 60, now=1000).split(".")
    pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
    assert json.loads(base64.urlsafe_b64decode(pad(header))) == {"alg": "none"}
    assert json.loads(base64.urlsafe_b64decode(pad(claims))) == {"sub": "alice", "iat": 1000, "exp": 1060}
    assert signature == ""


def test_properties_parsing():
    sec = ClientSecurity.from_properties(
        {
            "bootstrap.servers": "h:1",
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "scram-sha-512",
            "sasl.username": "u",
            "sasl.password": "hunter2",
            "ssl.ca.location": "/ca.pem",
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert (sec.protocol, sec.mechanism, sec.tls, sec.sasl) == ("SASL_SSL", "SCRAM-SHA-512", True, True)
    assert (sec.ca_location, sec.check_hostname, sec.verify_certificate) == ("/ca.pem", False, True)
    assert "hunter2" not in repr(sec)
    plain = ClientSecurity.from_properties({"bootstrap.servers": "h:1"})
    assert (plain.protocol, plain.tls, plain.sasl) == ("PLAINTEXT", False, False)
    ssl_only = ClientSecurity.from_properties({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"})
    assert ssl_only.tls and not ssl_only.sasl and not ssl_only.verify_certificate


@pytest.mark.parametrize(
    "props, match",
    [
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"}, "GSSAPI"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.username"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "principal"),
        ({"security.protocol": "SSL", "ssl.key.pem": "x"}, "ssl.key.location"),
        ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "maybe"}, "true or false"),
    ],
)
def test_properties_the_raw_client_cannot_speak(props, match):
    with pytest.raises(SecurityConfigError, match=match):
        ClientSecurity.from_properties(props)
