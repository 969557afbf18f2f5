"""Tansu target: spec checks, the broker's command line, the build's progress counting (fast,
no build), and one start of the real broker when the binary is in the cache.

The build itself (about 25 minutes) never runs here: `python -m targets.tansu.build` makes it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from targets.factory import create_target
from targets.tansu import build
from targets.tansu.provider import NODE_ID, TansuTarget, broker_argv, check_spec
from targets.target import NotSupportedByTarget, parse_target_spec
from targets.tests.netcheck import refused
from reference_impl.client.raw_client import parse_bootstrap
from reference_impl.protocol.api_keys import ApiKey

REPO = Path(__file__).resolve().parents[2]

CARGO_OUTPUT = """\
    Updating crates.io index
 Downloading crates ...
  Downloaded tansu v0.6.0
   Compiling proc-macro2 v1.0.103
   Compiling unicode-ident v1.0.22
warning: unused import
   Compiling tansu-sans-io v0.6.0
  Installing /c/install/bin/tansu
   Installed package `tansu v0.6.0` (executable `tansu`)
"""


@pytest.mark.parametrize(
    ("text", "storage", "timeout"),
    [("tansu", "memory", 60.0), ("tansu:storage=sqlite", "sqlite", 60.0),
     ("tansu:0.6.0:storage=memory:timeout=5", "memory", 5.0)],
)
def test_spec_gives_the_storage_and_timeout(text: str, storage: str, timeout: float) -> None:
    target = create_target(text)
    assert isinstance(target, TansuTarget)
    assert (target.storage, target.timeout) == (storage, timeout)
    assert target.node_ids == [NODE_ID] and target.version == f"tansu-0.6.0 ({storage})"


@pytest.mark.parametrize(
    ("text", "message"),
    [("tansu:storage=postgres", "storage must be one of memory, sqlite, got 'postgres'"),
     ("tansu:nodes=3", "tansu runs one broker (every Tansu broker is node 111), not nodes=3"),
     ("tansu:timeout=soon", "timeout must be a positive integer (seconds), got 'soon'")],
)
def test_bad_values_are_refused_before_anything_starts(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_spec(parse_target_spec(text))


@pytest.mark.parametrize(("storage", "engine"), [("memory", "memory://tansu/"), ("sqlite", "sqlite://tansu.db")])
def test_broker_command_line(storage: str, engine: str) -> None:
    assert broker_argv("/b/tansu", storage, 9123) == [
        "/b/tansu", "broker", "--cluster-id", "kipcheck-tansu", "--listener-url", "tcp://127.0.0.1:9123",
        "--advertised-listener-url", "tcp://127.0.0.1:9123", "--storage-engine", engine]


def test_the_build_command_is_the_pinned_cargo_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIPCHECK_CACHE", str(tmp_path))
    assert build.cargo_command("cargo") == [
        "cargo", "install", "tansu", "--version", "0.6.0", "--features", "dynostore,libsql", "--locked",
        "--root", str(tmp_path / "tansu" / "0.6.0" / "install")]
    assert build.binary_path() == tmp_path / "tansu" / "0.6.0" / "install" / "bin" / "tansu"


def test_progress_counts_the_compiling_lines() -> None:
    assert build.count_compiled(CARGO_OUTPUT.splitlines()) == 3
    assert build.progress_line(3) == (
        f"kipcheck: building Tansu 0.6.0 with cargo (about 25 minutes on 2 cores) — progress: "
        f"3/{build.EXPECTED_CRATES} crates")


def test_missing_cargo_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """No cargo on PATH or in ~/.cargo/bin, nothing cached: a one-line reason, no traceback."""
    env = {"PATH": "/nonexistent", "HOME": str(tmp_path), "KIPCHECK_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "targets.tansu.build"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "kipcheck: error: tansu target not supported here: building Tansu needs cargo (Rust toolchain, "
        "https://rustup.rs), which is not installed"]


def test_memory_storage_has_no_kill_or_restart() -> None:
    target = create_target("tansu")
    for op in (target.kill_node, target.stop_node, target.restart_node):
        with pytest.raises(NotSupportedByTarget, match="memory engine keeps nothing"):
            op(NODE_ID)


def test_the_real_broker_starts_answers_and_stops(tmp_path: Path) -> None:
    """The cached binary (never built here): start with sqlite, ApiVersions and Metadata
    answered, a kill and a restart on the same port, stop leaves no listener."""
    if not build.binary_path().exists():
        reason = "Tansu binary not built: run python -m targets.tansu.build"
        print(reason)
        pytest.skip(reason)
    target = create_target("tansu:storage=sqlite:timeout=60")
    assert isinstance(target, TansuTarget)
    target.start()
    try:
        caps = target.capabilities()
        assert caps.supports_api(ApiKey.API_VERSIONS) and caps.supports_api(ApiKey.PRODUCE)
        with target.cluster_client(timeout=10.0) as cc:
            assert list(cc.nodes) == [NODE_ID]
        target.kill_node(NODE_ID)
        target.restart_node(NODE_ID)
        assert target.capabilities(refresh=True).supports_api(ApiKey.API_VERSIONS)
        host, port = parse_bootstrap(target.bootstrap_servers)[0]
    finally:
        target.stop()
    assert refused(host, port)
