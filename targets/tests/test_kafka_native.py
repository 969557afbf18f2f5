"""kafka-native against real JVMs: the default release with 1 node, and 3 nodes with a
node killed and restarted.

Needs Java 17+ and Maven (or jars prefetched with `python -m targets.kafka_native.jars`).
Set KIPCHECK_SKIP_KAFKA_NATIVE=1 to skip (the skip names that variable); otherwise a
missing Java/Maven is a failure, not a skip.

Clusters are session-scoped and started lazily, once per pytest process; the module's last
test for a cluster stops it (checking that nothing is left), and a test that still needs it
afterwards gets a fresh one. Under pytest-xdist, run with `--dist loadfile` (or
`loadscope`) so one worker runs this module and starts each cluster once. The module also
carries `xdist_group("kafka_native")` for `--dist loadgroup`, but with pytest 9.2 and
pytest-xdist 3.8.0 loadgroup ignores groups (pytest-xdist issue #1386).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from targets.kafka_native.provider import KafkaNativeTarget, processes_of_run, processes_referencing
from targets.kafka_native.versions import DEFAULT_VERSION
from targets.target import TargetError, probe_capabilities
from targets.factory import create_target
from reference_impl.protocol.api_keys import ApiKey
from reference_impl.client.raw_client import ClusterClient

pytestmark = [
    pytest.mark.xdist_group("kafka_native"),
    pytest.mark.skipif(
        os.environ.get("KIPCHECK_SKIP_KAFKA_NATIVE", "") == "1", reason="KIPCHECK_SKIP_KAFKA_NATIVE=1"
    ),
]

TIMEOUT_S = 60.0


class _LazyCluster:
    """One cluster per pytest process, started on first use (again if a test stopped it);
    a failed start is remembered so later tests fail fast with the same error."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.target: KafkaNativeTarget | None = None
        self.error: BaseException | None = None

    def get(self) -> KafkaNativeTarget:
        if self.error is not None:
            raise TargetError(f"{self.spec} failed to start earlier in this session: {self.error}")
        if self.target is None or not self.target.started:
            target = create_target(self.spec)
            assert isinstance(target, KafkaNativeTarget)
            try:
                target.start()
            except BaseException as exc:
                self.error = exc
                raise
            self.target = target
        return self.target

    def close(self) -> None:
        if self.target is not None:
            self.target.stop()


@pytest.fixture(scope="session")
def _kafka1_cluster() -> Iterator[_LazyCluster]:
    lazy = _LazyCluster("kafka-native")
    yield lazy
    lazy.close()


@pytest.fixture(scope="session")
def _kafka3_cluster() -> Iterator[_LazyCluster]:
    lazy = _LazyCluster("kafka-native:nodes=3")
    yield lazy
    lazy.close()


@pytest.fixture
def kafka1(_kafka1_cluster: _LazyCluster) -> KafkaNativeTarget:
    return _kafka1_cluster.get()


@pytest.fixture
def kafka3(_kafka3_cluster: _LazyCluster) -> KafkaNativeTarget:
    return _kafka3_cluster.get()


# -- helpers (confluent-kafka) --------------------------------------------------------------


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _create_topic(bootstrap: str, topic: str, partitions: int = 1, rf: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf)])[topic]
    fut.result(timeout=TIMEOUT_S)


def _produce(bootstrap: str, topic: str, values: list[bytes], **conf: object) -> None:
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, _msg: errors.append(err) if err else None)
    remaining = producer.flush(TIMEOUT_S)
    assert remaining == 0, f"{remaining} message(s) not delivered within {TIMEOUT_S}s"
    assert not errors, errors


def _consume(bootstrap: str, topic: str, count: int, **conf: object) -> list[bytes]:
    """Consume `count` values from the beginning as a member of a fresh group (subscribe:
    exercises the group coordinator and __consumer_offsets)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **conf,
        }
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def _node_log_text(target: KafkaNativeTarget, node_id: int) -> str:
    return (target.run_dir / f"node{node_id}" / "logs" / f"node{node_id}.log").read_text(errors="replace")


def _assert_gone(run_dir: Path) -> None:
    deadline = time.monotonic() + 10
    while (processes_of_run(run_dir) or processes_referencing(str(run_dir))) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_of_run(run_dir) == []
    assert processes_referencing(str(run_dir)) == []


# -- one node, default release ---------------------------------------------------------------


def test_single_node_started(kafka1: KafkaNativeTarget):
    assert kafka1.version == DEFAULT_VERSION
    assert kafka1.startup_seconds is not None and kafka1.startup_seconds > 0
    d = kafka1.describe()
    assert d["version"] == DEFAULT_VERSION and d["nodes"] == 1
    assert d["run_dir"] == str(kafka1.run_dir) and kafka1.run_dir.is_dir()
    assert d["startup_seconds"] == kafka1.startup_seconds
    assert any(p.name == "node1.log" for p in kafka1.log_paths())
    assert "Kafka Server started" in _node_log_text(kafka1, 1)


def test_single_node_features(kafka1: KafkaNativeTarget):
    caps = probe_capabilities(kafka1.bootstrap_servers)
    assert caps.feature("transaction.version") == 2, caps.finalized_features
    major, minor = (int(x) for x in kafka1.version.split(".")[:2])
    if (major, minor) >= (4, 2):
        assert caps.feature("share.version") >= 1, caps.finalized_features
        assert caps.supports_api(ApiKey.SHARE_GROUP_HEARTBEAT), "ShareGroupHeartbeat not advertised"  # share groups usable
    assert caps.supports_api(ApiKey.PRODUCE) and caps.supports_api(ApiKey.API_VERSIONS)


def test_single_node_produce_consume(kafka1: KafkaNativeTarget):
    topic = _topic("native1")
    _create_topic(kafka1.bootstrap_servers, topic)
    _produce(kafka1.bootstrap_servers, topic, [b"hello kipcheck"])
    assert _consume(kafka1.bootstrap_servers, topic, 1) == [b"hello kipcheck"]


def test_single_node_transaction(kafka1: KafkaNativeTarget):
    """The transaction state log (RF=1 on one node) works: commit one message, read_committed sees it."""
    topic = _topic("native1-txn")
    _create_topic(kafka1.bootstrap_servers, topic)
    producer = Producer({"bootstrap.servers": kafka1.bootstrap_servers, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(TIMEOUT_S)
    assert _consume(kafka1.bootstrap_servers, topic, 1, **{"isolation.level": "read_committed"}) == [b"committed"]


def test_single_node_pause_resume(kafka1: KafkaNativeTarget):
    kafka1.pause_node(1)
    try:
        with pytest.raises(Exception):
            probe_capabilities(kafka1.bootstrap_servers, timeout=1.0)
    finally:
        kafka1.resume_node(1)
    assert probe_capabilities(kafka1.bootstrap_servers, timeout=10.0).feature("transaction.version") == 2


def test_single_node_stop_leaves_nothing(kafka1: KafkaNativeTarget):
    """Last test of the 1-node cluster: stop() ends every JVM of its run dir and removes the dir."""
    run_dir = kafka1.run_dir
    assert processes_of_run(run_dir), "the broker JVM should be running before stop()"
    keep = kafka1.keep_logs
    kafka1.stop()
    _assert_gone(run_dir)
    assert run_dir.exists() == keep


# -- start-up failures ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, expected",
    [
        # StorageTool parses the config first: its own error comes back
        ("kafka-native:broker.num.io.threads=many", "num.io.threads"),
        # the broker cannot be ready within 1s: timeout error with the node log tail
        ("kafka-native:startup_timeout=1", "did not become ready within 1s"),
    ],
    ids=["bad-property", "startup-timeout"],
)
def test_start_failure_is_a_clear_error_and_cleans_up(spec: str, expected: str):
    target = create_target(spec)
    with pytest.raises(TargetError) as err:
        target.start()
    assert expected in str(err.value)
    if "timeout" in spec:
        assert "--- node 1" in str(err.value)  # the node log tail is part of the message
    assert target.run_dir is not None
    _assert_gone(target.run_dir)
    assert target.run_dir.exists() == target.keep_logs


# -- three nodes --------------------------------------------------------------------------------


@pytest.mark.slow
def test_three_nodes_kill_and_restart(kafka3: KafkaNativeTarget):
    bootstrap = kafka3.bootstrap_servers
    assert len(bootstrap.split(",")) == 3
    with ClusterClient(bootstrap, timeout=10.0) as cc:
        assert sorted(cc.nodes) == [1, 2, 3]
    caps = kafka3.capabilities()
    assert caps.feature("transaction.version") == 2

    topic = _topic("native3")
    _create_topic(bootstrap, topic, partitions=1, rf=3)
    _produce(bootstrap, topic, [b"before"])

    # kill the partition leader, so the cluster must elect a new one
    with ClusterClient(bootstrap, timeout=10.0) as cc:
        md = cc.refresh([topic])
        leader = next(int(p.leader_id) for t in md.topics if t.name == topic for p in t.partitions)
    assert leader in (1, 2, 3)
    run_dir = kafka3.run_dir
    kafka3.kill_node(leader)
    assert not kafka3.node_alive(leader)
    survivors = [n for n in (1, 2, 3) if n != leader]
    survivor_bootstrap = ",".join(kafka3.node_bootstrap(n) for n in survivors)
    # min.insync.replicas=2 with 2 of 3 alive: acks=all still succeeds once a new leader is elected
    _produce(survivor_bootstrap, topic, [b"during"])

    kafka3.restart_node(leader)
    assert kafka3.node_alive(leader)
    with ClusterClient(kafka3.node_bootstrap(leader), timeout=10.0) as cc:
        assert sorted(cc.nodes) == [1, 2, 3]
    _produce(bootstrap, topic, [b"after"])
    assert sorted(_consume(bootstrap, topic, 3)) == [b"after", b"before", b"during"]
    assert "Kafka Server started" in _node_log_text(kafka3, leader).split("=== kipcheck: starting node")[-1]

    kafka3.stop()
    _assert_gone(run_dir)
