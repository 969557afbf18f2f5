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
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chaos.nemesis.base import FaultSpec, NEMESIS_PROCESS, Nemesis
from chaos.nemesis.container import ContainerNemesis
from targets.target import NotSupportedByTarget
from targets.factory import create_target
from checkers.history import NEMESIS_FS
from checkers.recorder import Recorder
from reference_impl.client.raw_client import ClusterClient

# A container start waits while the brokers make progress: up to two attempts of 600 s.
pytestmark = pytest.mark.deadline(1300)



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
    admin = AdminClient(cluster.client_config())
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(60)


def _producer(cluster, tid: str):
    p = Producer({**cluster.client_config(), "transactional.id": tid, "transaction.timeout.ms": 60000,
                  "message.timeout.ms": 60000, "socket.timeout.ms": 10000})
    p.init_transactions(120)
    return p


def _commit_one(p, topic: str, value: int, timeout_s: float, rec=None) -> None:
    """One transaction writing `value` to each of the 3 partitions; recorded as a txn op."""
    inv = rec.invoke(0, "txn", _sends(topic, value)) if rec else None
    p.begin_transaction()
    for part in range(3):
        p.produce(topic, str(value).encode(), partition=part)
    try:
        p.commit_transaction(timeout_s)
    except Exception as exc:
        if rec:
            rec.complete(inv, "info", error=exc)
        raise
    if rec:
        rec.complete(inv, "ok")


def _sends(topic: str, value: int) -> list:
    return [["send", f"{topic}-{part}", value] for part in range(3)]


def _coordinator_seen_by_majority(cluster, tid: str, isolated: int) -> tuple[int, int]:
    """FindCoordinator(key type 1) asked to a broker on the other side of the cut."""
    other = next(n for n in cluster.node_ids if n != isolated)
    with ClusterClient(cluster.node_bootstrap(other), timeout=10.0) as cc:
        return cc.find_coordinator(tid, 1)


def test_partition_isolating_the_txn_coordinator(cluster, nemesis) -> None:
    """The cut is visible in the recorded history: the nemesis op names the isolated
    coordinator with effective=True, the transaction whose commit falls in the window does
    not complete ok inside it (unless a majority-side coordinator took over), and one
    commits after the heal."""
    topic, tid = f"kc-part-{uuid.uuid4().hex[:8]}", f"kc-tid-{uuid.uuid4().hex[:8]}"
    rec = Recorder()
    _create_topic(cluster, topic)
    p = _producer(cluster, tid)
    _commit_one(p, topic, 1, 60, rec)  # baseline: commits on the healthy cluster

    during = rec.invoke(0, "txn", _sends(topic, 2))
    p.begin_transaction()  # the transaction is open and has data before the cut
    for part in range(3):
        p.produce(topic, b"2", partition=part)
    assert p.flush(60) == 0

    spec = FaultSpec("partition", target="role", role="txn-coordinator", params=(("key", tid),))
    start = rec.invoke(NEMESIS_PROCESS, "start-fault", {"fault": spec.name})
    record = nemesis.invoke(spec)
    rec.complete(start, "ok", record.to_dict())
    assert record.effective, record.evidence
    coordinator = record.nodes[0]
    assert coordinator in cluster.node_ids

    t0 = time.monotonic()
    try:
        p.commit_transaction(30)
        outcome = "committed"
        rec.complete(during, "ok")
    except KafkaException as exc:
        outcome = f"failed: {exc}"
    took = time.monotonic() - t0
    error, seen = _coordinator_seen_by_majority(cluster, tid, coordinator)
    moved = error == 0 and seen != coordinator
    print(f"commit during the partition: {outcome} after {took:.1f}s; majority side's coordinator: "
          f"node {seen} (error {error}), isolated node {coordinator}")

    stop = rec.invoke(NEMESIS_PROCESS, "stop-fault", {"fault": spec.name})
    nemesis.heal(record)
    rec.complete(stop, "ok", record.to_dict())
    assert all(record.details["reachable_after_heal"].values()), record.details
    cluster._wait_all(cluster.node_ids, "cluster after the heal")
    if outcome != "committed":
        _recover(cluster, p, tid, topic, during, rec)
    _commit_one(p if outcome == "committed" else _producer(cluster, tid), topic, 4, 120, rec)

    history = rec.history()
    ops = list(history)
    print("\n".join(f"{op.process} {op.type} {op.f} {op.error or ''}" for op in ops))
    fault = [op for op in ops if op.f in NEMESIS_FS and op.type == "ok"]
    assert [op.f for op in fault] == ["start-fault", "stop-fault"]
    assert list(fault[0].value["nodes"]) == [coordinator] and fault[0].value["effective"] is True
    cut_from, cut_to = fault[0].time_ns, next(op for op in ops if op.f == "stop-fault").time_ns
    txns = [op for op in ops if op.f == "txn" and op.type != "invoke"]
    in_cut = [op for op in txns if cut_from <= op.time_ns < cut_to]
    # The isolated coordinator cannot replicate its transaction log (min ISR 2 of 3): a commit
    # inside the cut completes ok only if Kafka moved the coordinator to the majority side.
    assert moved or all(op.type != "ok" for op in in_cut), in_cut
    assert txns[0].type == "ok" and txns[0].time_ns < cut_from, "no baseline commit before the cut"
    assert txns[-1].type == "ok" and txns[-1].time_ns > cut_to, "no commit after the heal"


def _recover(cluster, p, tid: str, topic: str, during: dict, rec) -> None:
    """After the heal the pending commit completes on retry, or is aborted (recorded fail)."""
    deadline, last = time.monotonic() + 240, None
    while time.monotonic() < deadline:
        try:
            p.commit_transaction(30)
            rec.complete(during, "ok")
            return
        except KafkaException as exc:
            last = exc.args[0]
            if last.txn_requires_abort():
                p.abort_transaction(60)
                rec.complete(during, "fail", error=last)
                return
            if last.fatal():
                rec.complete(during, "info", error=last)
                return
    raise AssertionError(f"the pending commit neither completed nor aborted within 240 s after the heal: {last}")


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
