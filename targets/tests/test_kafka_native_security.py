"""The raw client against a real secured Kafka (`kafka-native:security=sasl_ssl`, then
`security=ssl`): each SASL mechanism authenticates over TLS, wrong credentials and wrong
trust fail within seconds with the broker's reason, and the run dir's client.properties
serves confluent-kafka and the `external:` target alike.

Needs Java 17+ (see test_kafka_native.py); KIPCHECK_SKIP_KAFKA_NATIVE=1 skips. One cluster
at a time: each is class-scoped, so the SASL_SSL JVM stops before the SSL one starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from targets.kafka_native.provider import KafkaNativeTarget
from targets.factory import create_target
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.client.sasl import AuthenticationError
from reference_impl.client.security import ClientSecurity
from reference_impl.protocol.framing import FrameError

pytestmark = [
    pytest.mark.xdist_group("kafka_native"),
    pytest.mark.skipif(os.environ.get("KIPCHECK_SKIP_KAFKA_NATIVE", "") == "1", reason="KIPCHECK_SKIP_KAFKA_NATIVE=1"),
]
FAIL_FAST_S = 10.0  # a rejected login must surface well within this, never as a hang


def _started(spec: str) -> Iterator[KafkaNativeTarget]:
    target = create_target(spec)
    assert isinstance(target, KafkaNativeTarget)
    target.start()
    try:
        yield target
    finally:
        target.stop()


def _security(target: KafkaNativeTarget, **overrides: str) -> ClientSecurity:
    return ClientSecurity.from_properties({**target.client_config(), **overrides})


def _round_trip(target: KafkaNativeTarget, security: ClientSecurity) -> None:
    """ApiVersions (with feature levels) and Metadata on an authenticated connection."""
    with ClusterClient(target.bootstrap_servers, timeout=20.0, security=security) as cc:
        assert set(cc.nodes) == set(target.node_ids)
        assert cc.bootstrap.api_versions(3)[18][1] >= 3
        host, port = cc.nodes[target.node_ids[0]]
        with cc.connect_to(host, port) as other:  # a second connection, same settings
            assert other.request(18, 0).error_code == 0


@pytest.fixture(scope="class")
def sasl_ssl() -> Iterator[KafkaNativeTarget]:
    yield from _started("kafka-native:security=sasl_ssl")


@pytest.fixture(scope="class")
def ssl_only() -> Iterator[KafkaNativeTarget]:
    yield from _started("kafka-native:security=ssl")


class TestSaslSsl:
    @pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    def test_mechanism_authenticates_over_tls(self, sasl_ssl, mechanism):
        _round_trip(sasl_ssl, _security(sasl_ssl, **{"sasl.mechanism": mechanism}))

    def test_oauthbearer_unsecured_jwt(self, sasl_ssl):
        sec = _security(sasl_ssl, **{"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.config": "principal=kipcheck"})
        _round_trip(sasl_ssl, sec)

    @pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
    def test_wrong_password_is_a_clear_error_within_seconds(self, sasl_ssl, mechanism):
        sec = _security(sasl_ssl, **{"sasl.mechanism": mechanism, "sasl.password": "wrong"})
        t0 = time.monotonic()
        with pytest.raises(AuthenticationError) as info:
            RawClient.connect(sasl_ssl.bootstrap_servers, timeout=FAIL_FAST_S, security=sec)
        assert time.monotonic() - t0 < FAIL_FAST_S
        msg = str(info.value)
        assert "SASL_AUTHENTICATION_FAILED" in msg and mechanism in msg and "wrong" not in msg

    def test_untrusted_certificate_and_plaintext_fail_fast(self, sasl_ssl):
        t0 = time.monotonic()
        with pytest.raises(ConnectionError, match="TLS handshake"):
            RawClient.connect(sasl_ssl.bootstrap_servers, timeout=FAIL_FAST_S,
                              security=_security(sasl_ssl, **{"ssl.ca.location": "probe"}))
        # A plaintext request to a TLS listener: the broker answers with a TLS alert, which
        # does not parse as a Kafka frame (or closes the connection) -- an error, never a hang.
        with pytest.raises((ConnectionError, TimeoutError, FrameError)):
            with RawClient.connect(sasl_ssl.bootstrap_servers, timeout=3.0) as plain:
                plain.request(18, 0)
        assert time.monotonic() - t0 < 2 * FAIL_FAST_S

    def test_properties_file_serves_librdkafka_and_the_external_target(self, sasl_ssl):
        path = sasl_ssl.client_properties_path
        assert path is not None and path.is_file() and (path.stat().st_mode & 0o077) == 0
        md = AdminClient(sasl_ssl.client_config()).list_topics(timeout=30)
        assert set(md.brokers) == set(sasl_ssl.node_ids)
        ext = create_target(f"external:{sasl_ssl.bootstrap_servers}:config={path}:timeout=20")
        ext.start()
        try:
            assert ext.describe()["raw_client_supported"] is True
            assert ext.capabilities_source == "raw ApiVersions"
            assert ext.capabilities().feature("transaction.version") >= 1  # feature levels, not just ranges
        finally:
            ext.stop()



class TestTargetUp:
    def test_target_up_prints_the_properties_path(self):
        """`kipcheck target up kafka-native:security=sasl_ssl`: client_config= follows bootstrap=."""
        repo = Path(__file__).resolve().parents[2]
        proc = subprocess.Popen(
            [sys.executable, "-m", "targets.target_up", "kafka-native:security=sasl_plaintext"],
            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(repo)},
        )
        try:
            first = proc.stdout.readline()  # bounded: the provider's own startup timeout
            second = proc.stdout.readline()
            assert first.startswith("bootstrap="), first
            assert second.startswith("client_config=")
            props = Path(second.strip().split("=", 1)[1]).read_text()
            assert "security.protocol=SASL_PLAINTEXT" in props
        finally:
            proc.terminate()
            proc.communicate(timeout=60)


class TestSsl:
    def test_tls_without_sasl(self, ssl_only):
        sec = _security(ssl_only)
        assert sec.tls and not sec.sasl
        _round_trip(ssl_only, sec)

    def test_localhost_is_in_the_certificate(self, ssl_only):
        port = int(ssl_only.bootstrap_servers.rsplit(":", 1)[1])
        with RawClient("localhost", port, timeout=FAIL_FAST_S, security=_security(ssl_only)) as c:
            assert c.request(18, 0).error_code == 0
