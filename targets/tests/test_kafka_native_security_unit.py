"""kafka-native `security=` without a JVM: options, the secured listener's properties,
--add-scram arguments, generated certificates and the client properties."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509

from targets.kafka_native import config as cfg
from targets.kafka_native import security as sec
from targets.kafka_native.versions import resolve_release
from targets.target import ACL_USERS, NotSupportedByTarget, parse_target_spec
from reference_impl.client.security import ClientSecurity
from targets.kafka_native.provider import KafkaNativeTarget


def test_security_options_parse():
    o = cfg.parse_options((("security", "SASL_SSL"), ("sasl_mechanism", "plain")))
    assert (o.security, o.sasl_mechanism, o.secured) == ("sasl_ssl", "PLAIN", True)
    assert cfg.parse_options(()).secured is False
    with pytest.raises(ValueError, match="security must be one of"):
        cfg.parse_options((("security", "tls"),))
    with pytest.raises(ValueError, match="sasl_mechanism must be one of"):
        cfg.parse_options((("sasl_mechanism", "GSSAPI"),))


def test_secured_listener_layout_and_properties(tmp_path: Path):
    release = resolve_release(None)
    nodes = cfg.layout_nodes(tmp_path, list(range(9000, 9006)), 2, internal=True)
    assert [(n.client_port, n.controller_port, n.internal_port) for n in nodes] == [(9000, 9001, 9002), (9003, 9004, 9005)]
    files = sec.SecurityFiles(tmp_path / "ca.pem", tmp_path / "ks.pem")
    listener = sec.broker_properties("sasl_ssl", files, "pw")
    props = cfg.server_properties(release, nodes, nodes[0], security=listener, security_mode="sasl_ssl")
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9000,CONTROLLER://127.0.0.1:9001,INTERNAL://127.0.0.1:9002"
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT"
    assert props["advertised.listeners"].startswith("SASL_SSL://127.0.0.1:9000,INTERNAL://127.0.0.1:9002")
    assert props["listener.name.sasl_ssl.ssl.keystore.type"] == "PEM"
    assert props["listener.name.sasl_ssl.sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
    assert 'user_kipcheck="pw"' in props["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert "listener.name.ssl.ssl.keystore.type" in sec.broker_properties("ssl", files, "pw")
    assert not any("ssl." in k for k in sec.broker_properties("sasl_plaintext", None, "pw"))


def test_scram_users_are_created_at_format(tmp_path: Path):
    release = resolve_release(None)
    node = cfg.layout_nodes(tmp_path, [1, 2], 1)[0]
    args = cfg.format_args(release, node, "cid", nodes=1, quorum="dynamic", extra_args=sec.scram_format_args("pw"))
    assert args[-4:] == [
        "--add-scram", "SCRAM-SHA-256=[name=kipcheck,password=pw]",
        "--add-scram", "SCRAM-SHA-512=[name=kipcheck,password=pw]",
    ]


def test_generated_certificate_verifies_for_loopback(tmp_path: Path):
    files = sec.generate_certificates(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files.keystore)  # key + chain in one PEM, as Kafka's PEM keystore reads it
    client = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.ca.location": str(files.ca)}).ssl_context()
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    # The certificate carries the SANs clients verify (IP 127.0.0.1 and DNS localhost).
    cert = x509.load_pem_x509_certificates(files.keystore.read_bytes())[0]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]


@pytest.mark.parametrize("mode", ["ssl", "sasl_plaintext", "sasl_ssl"])
def test_client_properties_are_what_the_raw_client_reads(mode, tmp_path: Path):
    files = sec.SecurityFiles(tmp_path / "ca.pem", tmp_path / "ks.pem")
    props = sec.client_properties(mode, "127.0.0.1:1", files, "pw")
    parsed = ClientSecurity.from_properties(props)
    assert parsed.protocol == mode.upper()
    assert parsed.tls == ("ssl" in mode.split("_")) and parsed.sasl == mode.startswith("sasl_")
    if parsed.sasl:
        assert (parsed.mechanism, parsed.username, parsed.password) == ("SCRAM-SHA-512", "kipcheck", "pw")
    oauth = ClientSecurity.from_properties(sec.client_properties(mode, "h:1", files, "pw", "OAUTHBEARER")) if parsed.sasl else None
    assert oauth is None or oauth.oauthbearer == {"principal": "kipcheck"}


def test_authorizer_option_defaults_to_sasl_and_refuses_a_listener_without_it():
    o = cfg.parse_options((("authorizer", "standard"),))
    assert (o.authorizer, o.authorized, o.security) == ("standard", True, "sasl_plaintext")
    assert cfg.parse_options((("authorizer", "standard"), ("security", "sasl_ssl"))).security == "sasl_ssl"
    assert cfg.parse_options(()).authorized is False
    for mode in ("plaintext", "ssl"):
        with pytest.raises(ValueError, match="authorizer=standard needs a SASL client listener"):
            cfg.parse_options((("security", mode), ("authorizer", "standard")))
    with pytest.raises(ValueError, match="authorizer must be one of none, standard"):
        cfg.parse_options((("authorizer", "acl"),))


def test_authorizer_properties_and_extra_users(tmp_path: Path):
    props = sec.authorizer_properties()
    assert props == {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:kipcheck;User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    }
    users = {"alice": "a-pw"}
    jaas = sec.broker_properties("sasl_plaintext", None, "pw", users)["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert 'user_kipcheck="pw"' in jaas and 'user_alice="a-pw"' in jaas
    assert "SCRAM-SHA-512=[name=alice,password=a-pw]" in sec.scram_format_args("pw", users)
    as_alice = ClientSecurity.from_properties(sec.client_properties("sasl_plaintext", "h:1", None, "a-pw", "PLAIN", user="alice"))
    assert (as_alice.username, as_alice.password, as_alice.mechanism) == ("alice", "a-pw", "PLAIN")


def test_targets_without_an_authorizer_name_the_setting():
    plain = KafkaNativeTarget(parse_target_spec("kafka-native"))
    with pytest.raises(NotSupportedByTarget, match="authorizer=standard"):
        plain.acl_principals()
    with pytest.raises(NotSupportedByTarget, match="authorizer=standard"):
        plain.client_config_as("alice")
    acl = KafkaNativeTarget(parse_target_spec("kafka-native:authorizer=standard"))
    assert acl.acl_principals().users == ACL_USERS and acl.acl_principals().super_user == sec.USER
