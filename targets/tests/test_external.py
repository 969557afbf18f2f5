"""external target: reachability, client properties, capabilities through raw and librdkafka probes."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from targets.external import (
    ENV_CONFIG,
    ENV_TIMEOUT,
    ExternalTarget,
    load_client_properties,
    parse_apiversion_log,
)
from targets.target import NotSupportedByTarget, TargetError, probe_capabilities
from targets.factory import create_target
from reference_impl.protocol.api_keys import ApiKey
from reference_impl.handlers.registry import lookup  # the package registers every handler on import
from reference_impl.server.broker_server import ThreadedReferenceCluster


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_CONFIG, raising=False)
    monkeypatch.delenv(ENV_TIMEOUT, raising=False)


@pytest.fixture(scope="module")
def mock_bootstrap() -> Iterator[str]:
    """A PLAINTEXT cluster to point at: librdkafka's mock with 2 brokers."""
    mock = create_target("librdkafka-mock:nodes=2")
    mock.start()
    try:
        yield mock.bootstrap_servers
    finally:
        mock.stop()


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reference_serves_metadata() -> bool:
    return any(lookup(3, v) is not None for v in range(0, 14))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


# --- reachability -----------------------------------------------------------------------


def test_unused_port_fails_fast_naming_the_bootstrap() -> None:
    port = _unused_port()
    target = create_target(f"external:127.0.0.1:{port}")
    t0 = time.monotonic()
    with pytest.raises(TargetError) as info:
        target.start()
    assert time.monotonic() - t0 < 3
    msg = str(info.value)
    assert f"127.0.0.1:{port}" in msg and "unreachable" in msg and "refused" in msg.lower()


def test_unresolvable_host_fails_fast() -> None:
    target = create_target("external:kipcheck-no-such-host.invalid:9092:timeout=2")
    t0 = time.monotonic()
    with pytest.raises(TargetError) as info:
        target.start()
    assert time.monotonic() - t0 < 5
    assert "kipcheck-no-such-host.invalid:9092" in str(info.value)


def test_silent_listener_times_out_within_the_configured_timeout() -> None:
    """Accepts TCP but never answers: the protocol round trip fails after `timeout`."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        target = create_target(f"external:127.0.0.1:{port}:timeout=2")
        t0 = time.monotonic()
        with pytest.raises(TargetError) as info:
            target.start()
        elapsed = time.monotonic() - t0
    assert elapsed < 15
    assert f"127.0.0.1:{port}" in str(info.value)


def test_reference_broker_as_external_cluster() -> None:
    if not _reference_serves_metadata():
        pytest.skip("the reference broker does not serve Metadata yet (reference_impl/handlers)")

    with ThreadedReferenceCluster(brokers=1) as cluster:
        target = create_target(f"external:{cluster.bootstrap_servers}")
        target.start()
        try:
            assert target.node_ids == [1]
            assert target.capabilities().supports_api(ApiKey.API_VERSIONS)
            assert target.capabilities_source == "raw ApiVersions"
            assert target.describe()["raw_client_supported"] is True
        finally:
            target.stop()


def test_mock_cluster_through_the_librdkafka_probe(mock_bootstrap: str) -> None:
    """The log-parsing probe (the SASL/TLS route) agrees with the raw ApiVersions probe."""
    target = create_target(f"external:{mock_bootstrap}:probe=librdkafka")
    target.start()
    assert target.node_ids == [1, 2]
    assert target.cluster_id
    raw = probe_capabilities(mock_bootstrap)
    assert target.capabilities().api_versions == raw.api_versions
    assert target.capabilities(refresh=True).api_versions == raw.api_versions
    assert "librdkafka" in target.describe()["capabilities_source"]


def test_sasl_config_against_plaintext_cluster_fails_clearly(tmp_path: Path, mock_bootstrap: str) -> None:
    path = _write(
        tmp_path,
        "# vendor cluster\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.username=alice\nsasl.password=s3cret\n",
    )
    target = create_target(f"external:{mock_bootstrap}:config={path}:timeout=2")
    assert target.raw_client_supported is True
    t0 = time.monotonic()
    with pytest.raises(TargetError) as info:
        target.start()
    assert time.monotonic() - t0 < 10
    msg = str(info.value)
    assert mock_bootstrap in msg and "SASL_PLAINTEXT" in msg
    assert "s3cret" not in msg


# --- client properties ------------------------------------------------------------------


def test_properties_pass_through_to_client_config(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "security.protocol=SASL_SSL\n"
        "sasl.mechanisms = SCRAM-SHA-512\n"
        "sasl.username=alice\n"
        "sasl.password=p=ss:word\n"
        "! comment\n\n"
        "ssl.ca.location=/etc/ssl/ca.pem\n"
        "bootstrap.servers=ignored:1\n",
    )
    target = create_target(f"external:k1:9093,k2:9093:config={path}")
    conf = target.client_config()
    assert conf == {
        "bootstrap.servers": "k1:9093,k2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "p=ss:word",
        "ssl.ca.location": "/etc/ssl/ca.pem",
    }
    d = target.describe()
    assert d["security_protocol"] == "SASL_SSL" and d["sasl_mechanism"] == "SCRAM-SHA-512"
    assert "sasl.password" not in d["config_keys"]
    assert "p=ss:word" not in repr(d)
    assert target.raw_client_supported is True


def test_security_the_raw_client_cannot_speak_falls_back_to_librdkafka(tmp_path: Path) -> None:
    path = _write(tmp_path, "security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    target = create_target(f"external:k1:9093:config={path}")
    assert target.raw_client_supported is False
    assert "GSSAPI" in target.describe()["raw_client_unsupported_reason"]
    with pytest.raises(NotSupportedByTarget, match="GSSAPI"):
        target.raw_security()
    with pytest.raises(ValueError, match="probe=raw impossible"):
        create_target(f"external:k1:9093:config={path}:probe=raw")


def test_config_file_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "security.protocol=SSL\nssl.ca.location=/ca.pem\n")
    monkeypatch.setenv(ENV_CONFIG, str(path))
    monkeypatch.setenv(ENV_TIMEOUT, "4")
    target = create_target("external:k1:9093")
    assert target.config_path == str(path)
    assert target.client_config()["security.protocol"] == "SSL"
    assert target.timeout == 4.0
    # the spec option wins over the environment
    assert create_target("external:k1:9093:timeout=1").timeout == 1.0


@pytest.mark.parametrize(
    "text, message",
    [
        ("sasl.jaas.config=org.apache.kafka...PlainLoginModule required;\n", "Java client property"),
        ("ssl.truststore.location=/x.jks\n", "use ssl.ca.location"),
        ("sasl.login.callback.handler.class=com.x.Handler\n", "Java client property"),
        ("security.protocol=TLS\n", "security.protocol='TLS' is not one of"),
        ("just-a-word\n", ":1: expected key=value"),
        ("=value\n", "empty property name"),
    ],
)
def test_bad_properties_files(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(TargetError) as info:
        load_client_properties(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_properties_file(tmp_path: Path) -> None:
    with pytest.raises(TargetError) as info:
        create_target(f"external:k1:9093:config={tmp_path / 'nope.properties'}")
    assert "cannot read client config" in str(info.value) and "nope.properties" in str(info.value)


def test_unknown_librdkafka_property_rejected_at_start(tmp_path: Path, mock_bootstrap: str) -> None:
    path = _write(tmp_path, "security.protocol=SASL_PLAINTEXT\nsasl.usernmae=typo\n")
    target = create_target(f"external:{mock_bootstrap}:config={path}:timeout=2")
    with pytest.raises(TargetError) as info:
        target.start()
    assert "sasl.usernmae" in str(info.value)


# --- lifecycle and log parsing ----------------------------------------------------------


def test_no_lifecycle() -> None:
    target = create_target("external:127.0.0.1:9092")
    assert isinstance(target, ExternalTarget)
    for op in (target.kill_node, target.restart_node, target.pause_node, target.resume_node):
        with pytest.raises(NotSupportedByTarget) as info:
            op(1)
        assert "does not control" in info.value.reason
    target.stop()  # nothing to tear down, never raises


def test_parse_apiversion_log() -> None:
    lines = [
        "APIVERSION [rdkafka#producer-2] [thrd:b1:9092/bootstrap]: b1:9092/bootstrap: Broker API support:",
        "APIVERSION [rdkafka#producer-2] [thrd:b1:9092/bootstrap]: b1:9092/bootstrap:   ApiKey Produce (0) Versions 0..12",
        "APIVERSION [rdkafka#producer-2] [thrd:b1:9092/bootstrap]: b1:9092/bootstrap:   ApiKey EndTxn (26) Versions 0..5",
        "APIVERSION [rdkafka#producer-2] [thrd:b2:9092/2]: b2:9092/2:   ApiKey Produce (0) Versions 3..12",
        "FEATURE [rdkafka#producer-2] [thrd:b1:9092/bootstrap]: b1:9092/bootstrap: Updated enabled protocol features",
    ]
    assert parse_apiversion_log(lines) == {0: (0, 12), 26: (0, 5)}
    assert parse_apiversion_log([]) == {}
