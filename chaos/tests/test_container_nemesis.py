"""Container faults on a real 3-broker containerized cluster (testcontainers:nodes=3).

The partition test isolates the transaction coordinator's broker (FindCoordinator key type 1)
from its peers: a transactional commit cannot complete while the coordinator cannot replicate
its transaction log, and a transaction commits again after the heal.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from chaos.nemesis.base import FaultSpec, Nemesis
from chaos.nemesis.container import ContainerNemesis
from fixtures.target import NotSupportedByTarget
from fixtures.targets import create_target

# A container start may take two attempts of half the start-up timeout (360 s) each.
pytestmark = pytest.mark.deadline(600)



@pytest.fixture(scope="module")
def cluster() -> Iterator:
    target = create_target("testcontainers:nodes=3")
    try:
        target.start()
    except NotSupportedByTarget as exc:
        print(f"no Docker engine: {exc.reason}")
        pytest.skip(f"{type(exc).__name__}: {exc.reason}")
    try:
        yield target
    finally:
        target.stop()


@pytest.fixture
def nemesis(cluster) -> Iterator[ContainerNemesis]:
    n = ContainerNemesis()
    n.setup(cluster)
    try:
        yield n
    finally:
        n.teardown()


def _create_topic(cluster, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(cluster.client_config())
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(60)


def _producer(cluster, tid: str):
    from confluent_kafka import Producer

    p = Producer({**cluster.client_config(), "transactional.id": tid, "transaction.timeout.ms": 60000,
                  "message.timeout.ms": 60000, "socket.timeout.ms": 10000})
    p.init_transactions(120)
    return p


def _commit_one(p, topic: str, value: bytes, timeout_s: float) -> None:
    p.begin_transaction()
    for part in range(3):
        p.produce(topic, value, partition=part)
    p.commit_transaction(timeout_s)


def _coordinator_seen_by_majority(cluster, tid: str, isolated: int) -> tuple[int, int]:
    """FindCoordinator(key type 1) asked to a broker on the other side of the cut."""
    from reference_impl.client.raw_client import ClusterClient

    other = next(n for n in cluster.node_ids if n != isolated)
    with ClusterClient(cluster.node_bootstrap(other), timeout=10.0) as cc:
        return cc.find_coordinator(tid, 1)


def test_partition_isolating_the_txn_coordinator(cluster, nemesis) -> None:
    from confluent_kafka import KafkaException

    topic, tid = f"kc-part-{uuid.uuid4().hex[:8]}", f"kc-tid-{uuid.uuid4().hex[:8]}"
    _create_topic(cluster, topic)
    p = _producer(cluster, tid)
    _commit_one(p, topic, b"before", 60)  # baseline: commits on the healthy cluster

    p.begin_transaction()  # the transaction is open and has data before the cut
    for part in range(3):
        p.produce(topic, b"during", partition=part)
    assert p.flush(60) == 0

    spec = FaultSpec("partition", target="role", role="txn-coordinator", params=(("key", tid),))
    record = nemesis.invoke(spec)
    print(record.to_dict())
    assert record.effective, record.evidence
    coordinator = record.nodes[0]
    assert coordinator in cluster.node_ids

    t0 = time.monotonic()
    try:
        p.commit_transaction(30)
        outcome = "committed"
    except KafkaException as exc:
        outcome = f"failed: {exc}"
    took = time.monotonic() - t0
    error, seen = _coordinator_seen_by_majority(cluster, tid, coordinator)
    moved = error == 0 and seen != coordinator
    print(f"commit during the partition: {outcome} after {took:.1f}s; majority side's coordinator: "
          f"node {seen} (error {error}), isolated node {coordinator}")
    # The isolated coordinator cannot replicate its transaction log (min ISR 2 of 3): either the
    # commit does not complete, or Kafka fenced the isolated broker and the transaction was
    # completed by a new coordinator on the majority side - never by the isolated one.
    assert outcome != "committed" or moved, "a commit completed while its coordinator was isolated"

    nemesis.heal(record)
    assert all(record.details["reachable_after_heal"].values()), record.details
    cluster._wait_all(cluster.node_ids, "cluster after the heal")
    if outcome == "committed":
        _commit_one(p, topic, b"after", 120)
        return

    # Recovery: the pending commit completes on retry, or is aborted and a new one commits.
    deadline, committed, last = time.monotonic() + 240, False, None
    while not committed and time.monotonic() < deadline:
        try:
            p.commit_transaction(30)
            committed = True
        except KafkaException as exc:
            last = exc.args[0]
            if last.txn_requires_abort():
                p.abort_transaction(60)
                _commit_one(p, topic, b"after", 60)
                committed = True
            elif last.fatal():
                p = _producer(cluster, tid)
                _commit_one(p, topic, b"after", 60)
                committed = True
    assert committed, f"no transaction committed within 240 s after the heal: {last}"


def test_kill_pause_restart_each_bite_and_heal(cluster, nemesis) -> None:
    assert isinstance(nemesis, Nemesis)
    node = cluster.node_ids[-1]
    for kind in ("pause", "kill", "restart"):
        record = nemesis.invoke(FaultSpec(kind, params=(("nodes", (node,)),)))
        assert record.nodes == (node,)
        assert record.effective, f"{kind}: {record.evidence}"
        nemesis.heal(record)
        assert record.healed_ns is not None
        if kind != "restart":
            assert record.details["answers_after_heal"] == {node: True}, record.details
    cluster._wait_all(cluster.node_ids, "cluster after the faults")


def test_unknown_fault_and_wrong_target_are_not_supported(nemesis) -> None:
    with pytest.raises(NotSupportedByTarget):
        nemesis.invoke(FaultSpec("latency"))
    with pytest.raises(NotSupportedByTarget):
        ContainerNemesis().setup(create_target("reference"))
