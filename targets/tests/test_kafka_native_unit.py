"""kafka-native without a JVM: versions, spec options, server.properties, format
arguments, jar resolution (with a fake Maven) and process hygiene helpers."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from targets.kafka_native import config as cfg
from targets.kafka_native import jars
from targets.kafka_native.provider import (
    KafkaNativeTarget,
    allocate_ports,
    processes_of_run,
)
from targets.kafka_native.versions import DEFAULT_VERSION, RELEASES, resolve_release, supported_versions
from targets.target import TargetError, parse_target_spec
from targets.factory import create_target

# -- versions -----------------------------------------------------------------------------


def test_default_is_newest_4x():
    newest_4x = max((v for v in RELEASES if v.startswith("4.")), key=lambda v: tuple(map(int, v.split("."))))
    assert DEFAULT_VERSION == newest_4x == "4.4.0"
    assert resolve_release(None).version == DEFAULT_VERSION
    assert resolve_release("default").version == DEFAULT_VERSION


def test_supported_lines_and_exact_versions():
    assert supported_versions() == ["3.9.2", "4.0.2", "4.1.2", "4.2.1", "4.3.1", "4.4.0"]
    for line, exact in {"3.9": "3.9.2", "4.0": "4.0.2", "4.1": "4.1.2", "4.2": "4.2.1", "4.3": "4.3.1", "4.4": "4.4.0"}.items():
        assert resolve_release(line).version == exact
        assert resolve_release(exact).version == exact


@pytest.mark.parametrize("bad", ["4.2.9", "5.0", "4", "3.8", "4.2.1-SNAPSHOT", "latest-ish"])
def test_unknown_version_lists_supported(bad):
    with pytest.raises(ValueError) as err:
        resolve_release(bad)
    msg = str(err.value)
    assert repr(bad) in msg
    for v in supported_versions():
        assert v in msg


def test_unknown_version_fails_at_target_creation():
    with pytest.raises(ValueError, match="supported: 3.9.2, 4.0.2"):
        create_target("kafka-native:4.2.7")


def test_logging_backend_per_release():
    assert resolve_release("3.9").maven_properties == {"kafka.version": "3.9.2", "reload4j.version": "1.2.25"}
    assert resolve_release("3.9").logging_config_name == "log4j.properties"
    expected_log4j = {"4.0.2": "2.25.3", "4.1.2": "2.25.3", "4.2.1": "2.25.4", "4.3.1": "2.25.4", "4.4.0": "2.25.5"}
    for v, log4j in expected_log4j.items():
        r = resolve_release(v)
        assert r.maven_properties == {"kafka.version": v, "log4j.version": log4j}
        assert r.logging_config_name == "log4j2.properties"
    pkg = Path(cfg.__file__).parent
    assert (pkg / "log4j2.properties").is_file() and (pkg / "log4j.properties").is_file()


def test_feature_policy_per_release():
    # transaction.version=2 is formatted on every 4.x, never on 3.9
    assert dict(resolve_release("3.9").format_features) == {}
    for v in ("4.0.2", "4.1.2", "4.2.1", "4.3.1", "4.4.0"):
        assert dict(resolve_release(v).format_features)["transaction.version"] == 2
    # share.version: explicit only on 4.1; never on 4.0 (early access) or 3.9; >=1 expected from 4.1
    assert "share.version" not in dict(resolve_release("4.0").format_features)
    assert dict(resolve_release("4.1").format_features)["share.version"] == 1
    for v in ("4.2.1", "4.3.1", "4.4.0"):
        assert "share.version" not in dict(resolve_release(v).format_features)
        assert cfg.expected_features(resolve_release(v))["share.version"] == (">=", 1)
    assert "share.version" not in cfg.expected_features(resolve_release("4.0"))
    # a spec override replaces the release's format feature and its expectation
    exp = cfg.expected_features(resolve_release("4.2"), {"transaction.version": 1, "share.version": 0})
    assert exp["transaction.version"] == ("==", 1) and exp["share.version"] == ("==", 0)


# -- spec options -----------------------------------------------------------------------------


def test_spec_options_parse():
    spec = parse_target_spec("kafka-native:4.4.0:nodes=3:broker.foo=bar:feature.share.version=1:heap=768m:keep_logs=1")
    assert (spec.version, spec.nodes) == ("4.4.0", 3)
    opts = cfg.parse_options(spec.options)
    assert opts.broker_properties == {"foo": "bar"}
    assert opts.features == {"share.version": 1}
    assert opts.heap == "768m" and opts.keep_logs is True and opts.quorum == "dynamic"
    t = create_target(spec)
    assert isinstance(t, KafkaNativeTarget) and t.version == "4.4.0" and t.node_ids == [1, 2, 3]


@pytest.mark.parametrize(
    "option, message",
    [
        (("nonsense", "1"), "unknown option 'nonsense'"),
        (("heap", "lots"), "heap must look like"),
        (("quorum", "raft"), "quorum must be"),
        (("feature.share.version", "x"), "feature level"),
        (("startup_timeout", "-3"), "positive number"),
        (("keep_logs", "maybe"), "boolean"),
    ],
)
def test_bad_options_are_errors(option, message):
    with pytest.raises(ValueError, match=message):
        cfg.parse_options((option,))


def test_target_not_started_state():
    t = create_target("kafka-native:4.2")
    assert t.version == "4.2.1"
    with pytest.raises(TargetError, match="not started"):
        _ = t.bootstrap_servers
    d = t.describe()
    assert d["version"] == "4.2.1" and d["nodes"] == 1 and d["run_dir"] is None
    t.stop()  # no-op before start
    assert t.log_paths() == []


def test_keep_logs_env(monkeypatch):
    monkeypatch.setenv("KIPCHECK_KEEP_LOGS", "1")
    assert create_target("kafka-native").keep_logs is True
    assert create_target("kafka-native:keep_logs=0").keep_logs is False
    monkeypatch.delenv("KIPCHECK_KEEP_LOGS")
    assert create_target("kafka-native").keep_logs is False


# -- server.properties ------------------------------------------------------------------------


def _layouts(n: int) -> list[cfg.NodeLayout]:
    return cfg.layout_nodes(Path("/run/x"), [10000 + i for i in range(2 * n)], n)


def test_one_node_properties():
    r = resolve_release("4.4.0")
    (node,) = _layouts(1)
    p = cfg.server_properties(r, [node], node)
    assert p["process.roles"] == "broker,controller"
    assert p["node.id"] == "1"
    assert p["controller.quorum.bootstrap.servers"] == "127.0.0.1:10001"
    assert "controller.quorum.voters" not in p
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:10000,CONTROLLER://127.0.0.1:10001"
    assert p["advertised.listeners"] == "PLAINTEXT://127.0.0.1:10000,CONTROLLER://127.0.0.1:10001"
    assert p["log.dirs"] == "/run/x/node1/data"
    for k in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "min.insync.replicas",
        "default.replication.factor",
    ):
        assert p[k] == "1", k
    for k in ("offsets.topic.num.partitions", "transaction.state.log.num.partitions", "share.coordinator.state.topic.num.partitions"):
        assert p[k] == "3", k
    assert p["group.initial.rebalance.delay.ms"] == "0"
    assert p["log.retention.ms"] == "-1"  # fixed old record timestamps must not be deleted mid-run
    assert int(p["transaction.abort.timed.out.transaction.cleanup.interval.ms"]) <= 1000
    assert int(p["transaction.remove.expired.transaction.cleanup.interval.ms"]) <= 60000
    args = cfg.format_args(r, node, "CID", nodes=1, quorum="dynamic", features=cfg.format_features(r))
    assert args[:5] == ["format", "--cluster-id", "CID", "--config", "/run/x/node1/server.properties"]
    assert "--standalone" in args and "--initial-controllers" not in args
    assert args[args.index("--feature") + 1] == "transaction.version=2"


def test_three_node_properties_dynamic_quorum():
    r = resolve_release("4.2")
    nodes = _layouts(3)
    voters = "127.0.0.1:10001,127.0.0.1:10003,127.0.0.1:10005"
    ic = cfg.initial_controllers(nodes, {1: "A" * 22, 2: "B" * 22, 3: "C" * 22})
    assert ic == f"1@127.0.0.1:10001:{'A' * 22},2@127.0.0.1:10003:{'B' * 22},3@127.0.0.1:10005:{'C' * 22}"
    for node in nodes:
        p = cfg.server_properties(r, nodes, node)
        assert p["node.id"] == str(node.node_id)
        assert p["controller.quorum.bootstrap.servers"] == voters
        assert p["listeners"] == f"PLAINTEXT://127.0.0.1:{node.client_port},CONTROLLER://127.0.0.1:{node.controller_port}"
        for k in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                  "share.coordinator.state.topic.replication.factor", "default.replication.factor"):
            assert p[k] == "3", k
        for k in ("transaction.state.log.min.isr", "share.coordinator.state.topic.min.isr", "min.insync.replicas"):
            assert p[k] == "2", k
        args = cfg.format_args(r, node, "CID", nodes=3, quorum="dynamic", initial_controllers_value=ic)
        assert args[args.index("--initial-controllers") + 1] == ic and "--standalone" not in args
    with pytest.raises(ValueError):
        cfg.format_args(r, nodes[0], "CID", nodes=3, quorum="dynamic")


def test_static_quorum_and_extra_properties():
    r = resolve_release("4.3")
    nodes = _layouts(3)
    p = cfg.server_properties(r, nodes, nodes[1], quorum="static", extra={"min.insync.replicas": "3", "foo.bar": "x"})
    assert p["controller.quorum.voters"] == "1@127.0.0.1:10001,2@127.0.0.1:10003,3@127.0.0.1:10005"
    assert "controller.quorum.bootstrap.servers" not in p
    assert p["min.insync.replicas"] == "3" and p["foo.bar"] == "x"
    args = cfg.format_args(r, nodes[1], "CID", nodes=3, quorum="static")
    assert "--standalone" not in args and "--initial-controllers" not in args


def test_kafka_39_properties():
    r = resolve_release("3.9")
    (node,) = _layouts(1)
    p = cfg.server_properties(r, [node], node)
    assert p["advertised.listeners"] == "PLAINTEXT://127.0.0.1:10000"  # 3.x rejects controller listeners here
    assert not any(k.startswith("share.") for k in p)
    assert p["transaction.state.log.replication.factor"] == "1"
    args = cfg.format_args(r, node, "CID", nodes=1, quorum="dynamic", features=cfg.format_features(r))
    assert "--feature" not in args and "--standalone" in args
    jvm = cfg.jvm_args(r, Path("/l"), Path("/p/log4j.properties"), heap="512m")
    assert "-Dlog4j.configuration=file:///p/log4j.properties" in jvm


def test_jvm_args_broker_and_tool():
    r = resolve_release("4.4")
    jvm = cfg.jvm_args(r, Path("/l"), Path("/p/log4j2.properties"), heap="640m", markers={"run": "/r"})
    assert "-Xmx640m" in jvm and "-XX:+UseG1GC" in jvm and "-Dkipcheck.run=/r" in jvm
    assert "-Dlog4j2.configurationFile=/p/log4j2.properties" in jvm and "-Dkafka.logs.dir=/l" in jvm
    tool = cfg.jvm_args(r, Path("/l"), Path("/p/log4j2.properties"), heap="256m", root_level="WARN", tool=True)
    assert "-XX:+UseG1GC" not in tool and "-Dkipcheck.root.level=WARN" in tool


def test_render_properties_escapes():
    text = cfg.render_properties({"a.b": "c", "weird key=x": "back\\slash"}, "header line")
    assert text.splitlines() == ["# header line", "a.b=c", "weird\\ key\\=x=back\\\\slash"]


# -- jars -----------------------------------------------------------------------------------------


def test_pom_pins_plugin_and_has_logging_profiles():
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(jars.POM).getroot()
    plugin = root.find("m:build/m:plugins/m:plugin", ns)
    assert plugin.findtext("m:artifactId", namespaces=ns) == "maven-dependency-plugin"
    assert plugin.findtext("m:version", namespaces=ns) == "3.8.1"
    deps = {d.findtext("m:artifactId", namespaces=ns) for d in root.iter("{http://maven.apache.org/POM/4.0.0}dependency")}
    assert {"kafka_2.13", "log4j-slf4j-impl", "log4j-core", "log4j-api", "reload4j", "slf4j-reload4j"} <= deps
    profiles = {p.findtext("m:id", namespaces=ns): p.findtext("m:activation/m:property/m:name", namespaces=ns)
                for p in root.find("m:profiles", ns)}
    assert profiles == {"log4j2": "log4j.version", "reload4j": "reload4j.version"}


def test_mvn_command(monkeypatch, tmp_path):
    monkeypatch.setenv("KIPCHECK_MAVEN_REPO", str(tmp_path / "m2"))
    cmd = jars.mvn_command("mvn", resolve_release("4.2"), Path("/x/pom.xml"), Path("/x/libs"))
    assert cmd[:5] == ["mvn", "-q", "-B", "-f", "/x/pom.xml"]
    assert "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies" in cmd
    assert "-DincludeScope=runtime" in cmd and "-DoutputDirectory=/x/libs" in cmd
    assert "-Dkafka.version=4.2.1" in cmd and "-Dlog4j.version=2.25.4" in cmd
    assert f"-Dmaven.repo.local={tmp_path / 'm2'}" in cmd


def test_cache_layout(monkeypatch, tmp_path):
    monkeypatch.setenv("KIPCHECK_CACHE", str(tmp_path))
    assert jars.libs_dir("4.4.0") == tmp_path / "kafka" / "4.4.0" / "libs"
    monkeypatch.delenv("KIPCHECK_CACHE")
    assert jars.cache_root() == Path.home() / ".cache" / "kipcheck"


def test_missing_mvn_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("KIPCHECK_CACHE", str(tmp_path))
    monkeypatch.delenv("KIPCHECK_MVN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(jars.JarResolutionError, match=r"Maven \(mvn\) is not on PATH"):
        jars.ensure_jars("4.2.1")
    monkeypatch.setenv("KIPCHECK_MVN", str(tmp_path / "nope"))
    with pytest.raises(jars.JarResolutionError, match="KIPCHECK_MVN"):
        jars.ensure_jars("4.2.1")


def _fake_mvn(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "fake-mvn"
    script.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    script.chmod(0o755)
    return script


def test_failed_resolution_shows_mvn_tail(monkeypatch, tmp_path):
    monkeypatch.setenv("KIPCHECK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KIPCHECK_MVN", str(_fake_mvn(tmp_path, """
        echo "[ERROR] Could not find artifact org.apache.kafka:kafka_2.13:jar:4.2.1 in central"
        exit 1
    """)))
    with pytest.raises(jars.JarResolutionError) as err:
        jars.ensure_jars("4.2.1")
    assert "Could not find artifact org.apache.kafka:kafka_2.13" in str(err.value)
    assert "exit 1" in str(err.value)
    assert not jars.is_resolved("4.2.1")
    assert not list((tmp_path / "cache" / "kafka" / "4.2.1").glob(".resolve-*"))  # temp dir cleaned up


def test_incomplete_resolution_is_rejected(monkeypatch, tmp_path):
    monkeypatch.setenv("KIPCHECK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KIPCHECK_MVN", str(_fake_mvn(tmp_path, "exit 0\n")))
    with pytest.raises(jars.JarResolutionError, match="incomplete"):
        jars.ensure_jars("4.2.1")


def test_resolution_is_atomic_and_locked(monkeypatch, tmp_path):
    """Parallel callers (threads here; xdist workers are processes, same flock) resolve once."""
    calls = tmp_path / "calls"
    monkeypatch.setenv("KIPCHECK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KIPCHECK_MVN", str(_fake_mvn(tmp_path, f"""
        echo call >> {calls}
        for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${{a#-DoutputDirectory=}}";; esac; done
        mkdir -p "$out"
        sleep 1
        for j in kafka_2.13-4.3.1 kafka-clients-4.3.1 kafka-raft-4.3.1 scala-library-2.13.18; do : > "$out/$j.jar"; done
    """)))
    results: list[Path] = []
    errors: list[BaseException] = []

    def resolve() -> None:
        try:
            results.append(jars.ensure_jars("4.3"))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=resolve) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert calls.read_text().count("call") == 1
    assert {str(p) for p in results} == {str(tmp_path / "cache" / "kafka" / "4.3.1" / "libs")}
    assert len(list(results[0].glob("*.jar"))) == 4
    assert jars.classpath(results[0]).endswith("/libs/*")
    # cached now: no further Maven call
    assert jars.ensure_jars("4.3.1") == results[0]
    assert calls.read_text().count("call") == 1
    # the CLI prefetch entry point reports the cached release
    assert jars.main(["4.3"]) == 0
    assert jars.main(["9.9"]) == 2


# -- process hygiene ------------------------------------------------------------------------------


def test_allocate_ports_distinct():
    ports = allocate_ports(6)
    assert len(set(ports)) == 6 and all(1024 < p < 65536 for p in ports)


def test_processes_of_run_finds_marked_process(tmp_path):
    marker = f"-Dkipcheck.run={tmp_path}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        deadline = time.monotonic() + 5
        while proc.pid not in processes_of_run(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.pid in processes_of_run(tmp_path)
        assert processes_of_run(str(tmp_path) + "-other") == []
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in processes_of_run(tmp_path)


def test_spawned_children_die_with_their_parent(tmp_path):
    """A JVM (here: a sleeper) started through the provider's spawner gets SIGKILLed when
    the Python process that started it dies without cleaning up."""
    pidfile = tmp_path / "grandchild.pid"
    code = textwrap.dedent(f"""
        import os, sys, time, threading
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from targets.kafka_native.provider import _SPAWNER
        result = []
        # spawn from a short-lived worker thread: the death signal must follow the process, not it
        t = threading.Thread(target=lambda: result.append(_SPAWNER.popen([sys.executable, "-c", "import time; time.sleep(120)"])))
        t.start(); t.join()
        open({str(pidfile)!r}, "w").write(str(result[0].pid))
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchild = int(pidfile.read_text())
        time.sleep(0.5)  # the worker thread has exited by now; the grandchild must still live
        assert _alive(grandchild)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"

