"""The offline image's contract, without Docker: KAFKA_* -> properties, mirror choice, guardian."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from targets import kafka_image_files
from targets.kafka_image import apt_mirror, recipe
from targets.kafka_native.config import cluster_defaults
from targets.kafka_native.versions import resolve_release
from targets.testcontainers_target import node_properties, property_env_name, resolve_image

REPO = Path(__file__).resolve().parents[2]


def _configure(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """Run the image's configure script (bash) with env; parse what it wrote."""
    script = tmp_path / "configure"
    script.write_text(kafka_image_files.CONFIGURE)
    out = tmp_path / "server.properties"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
    subprocess.run(["bash", str(script), str(out)], env={**clean, **env}, check=True, timeout=30)
    return dict(line.split("=", 1) for line in out.read_text().splitlines())


def test_env_names_map_to_properties_as_upstream(tmp_path: Path) -> None:
    props = _configure({
        "KAFKA_NODE_ID": "3",
        "KAFKA_LISTENER_NAME_INTERNAL_SSL_KEYSTORE_LOCATION": "/k",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "A:PLAINTEXT,B:PLAINTEXT",
        "KAFKA_SOME__UNDERSCORE": "u",
        "KAFKA_WITH___DASH": "d",
        "KAFKA_HEAP_OPTS": "-Xmx1g",
        "CLUSTER_ID": "x",
    }, tmp_path)
    assert props == {
        "node.id": "3",
        "listener.name.internal.ssl.keystore.location": "/k",
        "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT",
        "some_underscore": "u",
        "with-dash": "d",
    }


def test_target_properties_round_trip_through_the_image_script(tmp_path: Path) -> None:
    """Every property the target sets survives property -> KAFKA_* -> configure unchanged."""
    release = resolve_release("4.4.0")
    want = node_properties(release, 2, 3, 40123, "localhost")
    want["share.coordinator.state.topic.min.isr"] = "2"
    got = _configure({property_env_name(k): v for k, v in want.items()}, tmp_path)
    assert got == want
    assert got["inter.broker.listener.name"] == "INTERNAL"
    assert "PLAINTEXT://:40123" in got["listeners"] and "PLAINTEXT://localhost:40123" in got["advertised.listeners"]
    assert set(cluster_defaults(3, release)) <= set(got)


def test_versions_resolve_to_upstream_tags() -> None:
    assert resolve_image(None) == "apache/kafka:4.4.0"
    assert resolve_image("3.9") == "apache/kafka:3.9.2"
    assert resolve_image("4.1") == "apache/kafka:4.1.2"
    assert resolve_image("confluentinc/cp-kafka:7.6.0") == "confluentinc/cp-kafka:7.6.0"
    assert resolve_image("9.9.9") == "apache/kafka:9.9.9"  # not pinned: left to a registry


def test_mirror_is_the_one_apt_uses() -> None:
    mirror = apt_mirror()
    sources = "".join(p.read_text() for p in Path("/etc/apt").rglob("*") if p.is_file()
                      and (p.suffix in (".list", ".sources") or p.name == "sources.list"))
    assert mirror.startswith("http") and "security" not in mirror
    assert mirror in sources or mirror == "http://deb.debian.org/debian"


def test_guardian_stops_the_daemon_it_watches_when_users_are_gone(tmp_path: Path) -> None:
    """A stand-in daemon (a real process) is stopped once the only registered user dies."""
    env = {**os.environ, "KIPCHECK_CACHE": str(tmp_path), "DOCKER_HOST": f"unix://{tmp_path}/none.sock",
           "PYTHONPATH": str(REPO)}
    daemon = subprocess.Popen(["sleep", "300"])
    user = subprocess.Popen(["sleep", "300"])
    try:
        state = tmp_path / "docker"
        state.mkdir()
        (state / "dockerd.pid").write_text(f"{daemon.pid}\n")
        (state / "users").write_text(f"{user.pid}\n")
        guard = subprocess.Popen([sys.executable, "-m", "targets.docker_engine", "guard", str(daemon.pid)],
                                 env=env, cwd=REPO)
        assert daemon.poll() is None
        user.kill()
        user.wait(10)
        guard.wait(60)  # 10 s grace + polling
        assert daemon.wait(30) is not None, "the guardian did not stop the daemon"
        assert not (state / "dockerd.pid").exists()
    finally:
        for p in (daemon, user):
            if p.poll() is None:
                p.kill()
                p.wait(10)


def test_recipe_changes_with_the_entry_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached image built from other scripts is stale (rebuilt by ensure_image)."""
    release = resolve_release("4.4.0")
    before = recipe(release)
    assert before == recipe(release) and before != recipe(resolve_release("3.9"))
    monkeypatch.setattr(kafka_image_files, "RUN", kafka_image_files.RUN + "# changed\n")
    assert recipe(release) != before

