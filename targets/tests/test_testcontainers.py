"""testcontainers target: real Docker engine detection, skip-with-reason, optional extra kept optional."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from targets.docker_engine import DockerUnavailable, docker_available, docker_engine
from targets.target import NotSupportedByTarget, TargetError
from targets.factory import create_target
from targets.testcontainers_target import STALL_S, TestcontainersTarget
from reference_impl.protocol.api_keys import ApiKey

# A container start waits while the brokers make progress: up to two attempts of 600 s.
pytestmark = pytest.mark.deadline(1300)

REPO = Path(__file__).resolve().parents[2]


def _start_or_skip(target: TestcontainersTarget) -> None:
    """The test layer's rule: DockerUnavailable / missing extra -> skip, with the reason."""
    try:
        target.start()
    except NotSupportedByTarget as exc:
        print(f"testcontainers target not available: {exc.reason}")
        pytest.skip(f"{type(exc).__name__}: {exc.reason}")


# --- against whatever this machine has ----------------------------------------------------


def _roundtrip(target: TestcontainersTarget) -> None:
    """Produce one record, read it back: the advertised listener works from the host."""
    topic = f"kipcheck-tc-{uuid.uuid4().hex[:8]}"
    producer = Producer({**target.client_config(), "acks": "all"})
    producer.produce(topic, b"hello container", partition=0)
    assert producer.flush(60) == 0
    consumer = Consumer({**target.client_config(), "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline, got = time.monotonic() + 60, None
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got = msg.value()
        assert got == b"hello container"
    finally:
        consumer.close()


def _transactional_commit(target: TestcontainersTarget) -> None:
    """A transactional commit needs the coordinator to reach the partition leaders (itself)."""
    p = Producer({**target.client_config(), "transactional.id": f"kc-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(f"kipcheck-tc-txn-{uuid.uuid4().hex[:6]}", b"v", partition=0)
    p.commit_transaction(60)


@pytest.mark.parametrize("spec, features", [
    ("testcontainers", {"transaction.version": 2}),
    pytest.param("testcontainers:3.9", {}, marks=pytest.mark.nightly),
])
def test_kafka_container_roundtrip(spec: str, features: dict[str, int]) -> None:
    """apache/kafka (4.4.0, 3.9.2) in Docker: features finalized as kafka-native, produce/consume, a
    transactional commit (the broker reaches its own advertised listener)."""
    target = create_target(spec)
    assert isinstance(target, TestcontainersTarget)
    _start_or_skip(target)
    try:
        caps = target.capabilities()
        assert caps.supports_api(ApiKey.PRODUCE) and caps.supports_api(ApiKey.API_VERSIONS)
        assert caps.finalized_features, "a KRaft broker advertises finalized feature levels"
        for name, level in features.items():
            assert caps.feature(name) == level, caps.finalized_features
        if spec == "testcontainers":
            assert caps.feature("share.version") >= 1 and caps.feature("group.version") >= 1
        _roundtrip(target)
        _transactional_commit(target)
        assert target.describe()["image_source"] in ("present", "loaded", "pulled", "built")
        logs = target.log_paths()
        assert logs and "Kafka Server started" in logs[0].read_text()
    finally:
        target.stop()


def test_restart_keeps_the_advertised_port() -> None:
    target = create_target("testcontainers")
    _start_or_skip(target)
    try:
        before = target.bootstrap_servers
        target.kill_node(1)
        assert target.container(1).status == "exited"
        target.restart_node(1)
        assert target.bootstrap_servers == before
        _transactional_commit(target)
    finally:
        target.stop()


def test_engine_detection_matches_the_machine() -> None:
    """docker_available() must really ask the engine, not assume: compare with `docker info`."""
    ok, detail = docker_available()
    print(f"docker_available: {ok} ({detail})")
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("no docker CLI to cross-check against")
    cli_ok = info.returncode == 0 and bool(info.stdout.strip())
    if os.environ.get("DOCKER_HOST", "").startswith("ssh://"):
        pytest.skip("ssh:// Docker hosts are not checked by kipcheck")
    assert ok == cli_ok, (detail, info.stdout, info.stderr)
    if not ok:
        assert "no Docker engine reachable" in detail


def test_start_without_engine_raises_docker_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "no-docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{missing}")
    target = create_target("testcontainers")
    with pytest.raises(DockerUnavailable) as info:
        target.start()
    assert isinstance(info.value, NotSupportedByTarget)
    assert f"unix://{missing}" in info.value.reason and "DOCKER_HOST" in info.value.reason
    assert target.describe()["bootstrap"] is None


def test_tcp_engine_that_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    with pytest.raises(DockerUnavailable) as info:
        docker_engine()
    assert f"tcp://127.0.0.1:{port}" in info.value.reason


# --- a fake engine on a unix socket: proves the check speaks the Docker API ---------------


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """A unix-socket HTTP server answering GET /_ping like dockerd (status configurable)."""
    path = f"/tmp/kipcheck-fake-docker-{uuid.uuid4().hex[:8]}.sock"  # short: AF_UNIX path limit
    state = {"status": 200, "requests": [], "path": path}
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(2)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    data += chunk
                state["requests"].append(data.split(b"\r\n", 1)[0].decode())
                body = b"OK" if state["status"] == 200 else b"boom"
                reason = b"OK" if state["status"] == 200 else b"Internal Server Error"
                conn.sendall(
                    b"HTTP/1.1 %d %s\r\nApi-Version: 1.47\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                    % (state["status"], reason, len(body), body)
                )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    try:
        yield state
    finally:
        stop.set()
        thread.join(2)
        server.close()
        os.unlink(path)


def test_fake_engine_is_detected(fake_engine: dict) -> None:
    url, api = docker_engine()
    assert url == f"unix://{fake_engine['path']}" and api == "1.47"
    assert fake_engine["requests"] == ["GET /_ping HTTP/1.1"]
    ok, detail = docker_available()
    assert ok and "API 1.47" in detail


def test_engine_answering_500_is_unavailable(fake_engine: dict) -> None:
    fake_engine["status"] = 500
    with pytest.raises(DockerUnavailable) as info:
        docker_engine()
    assert "HTTP 500" in info.value.reason


# --- packaging ----------------------------------------------------------------------------


def test_testcontainers_is_a_pinned_dependency() -> None:
    """CI runs the containerized target, so the package is always installed (and pinned)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert any(dep.lower().startswith("testcontainers[kafka]==") for dep in project["dependencies"])


def test_importing_the_provider_does_not_import_testcontainers() -> None:
    code = (
        "import sys, targets.testcontainers_target as t, targets.factory as f\n"
        "f.create_target('testcontainers')\n"
        "print('testcontainers' in sys.modules, 'docker' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_a_broker_that_exits_fails_the_start_without_waiting_out_the_timeout() -> None:
    """A container that exited will not become ready: the start says so at once (with the
    container's state and log), instead of waiting out the 600 s readiness timeout twice."""
    target = create_target("testcontainers:KAFKA_PROCESS_ROLES=nonsense")
    t0 = time.monotonic()
    with pytest.raises(TargetError) as info:
        _start_or_skip(target)
    took = time.monotonic() - t0
    assert "exited while starting" in str(info.value) and "status=exited" in str(info.value), info.value
    assert took < 2 * STALL_S, f"the failed start took {took:.0f}s"
    assert target.describe()["bootstrap"] is None
