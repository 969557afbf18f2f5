"""Transaction coordinator over the wire: raw-protocol paths and a real transactional client.

Runs the in-process reference cluster with 1 and 3 brokers. Until ReferenceState owns a
transaction coordinator, the fixture attaches one (and per-partition producer state, and
a tick hook) itself.
"""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.model.broker_state import BrokerConfig
from reference_impl.model.transaction_coordinator import TransactionConfig, TransactionCoordinator
from reference_impl.model.transaction_state import TransactionState
from reference_impl.protocol import framing, payloads
from reference_impl.protocol import records as r
from reference_impl.server.broker_server import ThreadedReferenceCluster

TIMEOUT = datetime.timedelta(seconds=60)
S = TransactionState


def _cluster(brokers: int, tv: int):
    c = ThreadedReferenceCluster(brokers=brokers, config=BrokerConfig(finalized_features={"transaction.version": tv}))
    c.start()
    return c


@pytest.fixture(scope="module", params=[1, 3], ids=["brokers=1", "brokers=3"])
def cluster(request):
    c = _cluster(request.param, 2)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def tv1_cluster():
    c = _cluster(3, 1)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture()
def client(cluster):
    with ClusterClient(cluster.bootstrap_servers) as cc:
        yield cc


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def nested(api_key: int, version: int, class_name: str, /, **fields):
    return payloads.build(payloads.nested(framing.request_schema(api_key, version), class_name), **fields)


def create_topic(client: ClusterClient, name: str, partitions: int = 2) -> None:
    req = payloads.build(
        framing.request_schema(19, 7),
        topics=(nested(19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1,
                       assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=10), validate_only=False,
    )
    resp = client.bootstrap.send(req)
    assert resp.topics[0].error_code == ErrorCode.none, resp


def coordinator(client: ClusterClient, tid: str) -> RawClient:
    return client.coordinator_for(tid, key_type=1)


def non_coordinator(cluster, client: ClusterClient, tid: str) -> RawClient | None:
    coord = cluster.cluster.state.coordinator_for(tid)
    others = [n for n in client.nodes if n != coord]
    return client.node(others[0]) if others else None


def init_pid(node: RawClient, tid: str | None, *, version: int = 5, timeout=TIMEOUT, pid: int = -1, epoch: int = -1):
    return node.send(payloads.build(
        framing.request_schema(22, version), transactional_id=tid, transaction_timeout=timeout,
        producer_id=pid, producer_epoch=epoch,
    ))


def init_until_ok(node: RawClient, tid: str, **kw):
    deadline = time.monotonic() + 10
    while True:
        resp = init_pid(node, tid, **kw)
        if resp.error_code != ErrorCode.concurrent_transactions or time.monotonic() > deadline:
            return resp
        time.sleep(0.02)


def add_partitions(node: RawClient, tid: str, pid: int, epoch: int, parts: dict[str, list[int]], *, version: int = 3):
    topics = tuple(nested(24, version, "AddPartitionsToTxnTopic", name=t, partitions=tuple(ps)) for t, ps in parts.items())
    resp = node.send(payloads.build(
        framing.request_schema(24, version), v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics,
    ))
    return {(t.name, int(p.partition_index)): p.partition_error_code
            for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(node: RawClient, tid: str, pid: int, epoch: int, committed: bool, *, version: int = 5):
    return node.send(payloads.build(
        framing.request_schema(26, version), transactional_id=tid, producer_id=pid, producer_epoch=epoch,
        committed=committed,
    ))


def produce_txn(client: ClusterClient, tid: str, topic: str, partition: int, pid: int, epoch: int, seq: int,
                values: list[bytes], *, version: int = 12):
    batch = r.build_batch([r.NewRecord(value=v) for v in values], producer_id=pid, producer_epoch=epoch,
                          base_sequence=seq, transactional=True, timestamp_ms=int(time.time() * 1000))
    req = payloads.build(
        framing.request_schema(0, version), transactional_id=tid, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(nested(0, version, "TopicProduceData", name=topic, partition_data=(
            nested(0, version, "PartitionProduceData", index=partition, records=batch),)),),
    )
    return client.leader_for(topic, partition).send(req).responses[0].partition_responses[0]


def wait_state(cluster, tid: str, state: TransactionState, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cluster.cluster.state.transactions.metadata(tid)
        if v is not None and v.state is state:
            return
        time.sleep(0.02)
    raise AssertionError(f"{tid} never reached {state.state_name}: {cluster.cluster.state.transactions.metadata(tid)}")


def control_markers(cluster, topic: str, partition: int) -> list[tuple[r.ControlType, int, int]]:
    log = cluster.cluster.state.topics.log(topic, partition)
    out = []
    for b in log.batches:
        if b.is_control:
            out.append((r.parse_control_record(b.decode()[0])[0], b.producer_id, b.header.producer_epoch))
    return out


# -- InitProducerId -------------------------------------------------------------------------


def test_init_producer_id_placement_and_errors(cluster, client: ClusterClient) -> None:
    tid = unique("tx")
    other = non_coordinator(cluster, client, tid)
    if other is not None:
        assert init_pid(other, tid).error_code == ErrorCode.not_coordinator
        # Validation before placement, as Kafka.
        big = datetime.timedelta(milliseconds=900_001)
        assert init_pid(other, tid, timeout=big).error_code == ErrorCode.invalid_transaction_timeout
    coord = coordinator(client, tid)
    first, second = init_pid(coord, tid), init_pid(coord, tid)
    assert (first.error_code, first.producer_epoch, second.producer_epoch) == (ErrorCode.none, 0, 1)
    assert first.producer_id == second.producer_id >= 0
    too_long = init_pid(coord, tid, timeout=datetime.timedelta(milliseconds=900_001))
    assert (too_long.error_code, too_long.producer_id) == (ErrorCode.invalid_transaction_timeout, -1)
    assert init_pid(coord, tid, pid=first.producer_id).error_code == ErrorCode.invalid_request
    # KIP-360: a stale (pid, epoch) is fenced; v3 reads PRODUCER_FENCED as INVALID_PRODUCER_EPOCH.
    assert init_pid(coord, tid, pid=first.producer_id, epoch=0).error_code == ErrorCode.producer_fenced
    assert init_pid(coord, tid, version=3, pid=first.producer_id, epoch=0).error_code == ErrorCode.invalid_producer_epoch
    # Idempotent producers: any node, epoch 0.
    for node_id in client.nodes:
        idem = init_pid(client.node(node_id), None)
        assert (idem.error_code, idem.producer_epoch) == (ErrorCode.none, 0) and idem.producer_id >= 0


# -- TV2 producer (implicit add, EndTxn v5) -----------------------------------------------------


def test_tv2_transaction_commit_and_abort(cluster, client: ClusterClient) -> None:
    topic, tid = unique("t"), unique("tx")
    create_topic(client, topic)
    coord = coordinator(client, tid)
    init = init_pid(coord, tid)
    pid, epoch = init.producer_id, init.producer_epoch
    for p in (0, 1):
        resp = produce_txn(client, tid, topic, p, pid, epoch, 0, [b"a", b"b"])
        assert resp.error_code == ErrorCode.none, resp
    md = cluster.cluster.state.transactions.metadata(tid)
    assert md.state is S.ONGOING and md.partition_set() == {(topic, 0), (topic, 1)}
    end = end_txn(coord, tid, pid, epoch, True)
    assert (end.error_code, end.producer_id, end.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    wait_state(cluster, tid, S.COMPLETE_COMMIT)
    assert control_markers(cluster, topic, 0) == [(r.ControlType.COMMIT, pid, epoch + 1)]
    log = cluster.cluster.state.topics.log(topic, 0)
    assert log.last_stable_offset == log.log_end_offset == 3
    # Idempotent retry of the EndTxn.
    retry = end_txn(coord, tid, pid, epoch, True)
    assert (retry.error_code, retry.producer_epoch) == (ErrorCode.none, epoch + 1)
    # Next transaction with the bumped epoch, aborted.
    assert produce_txn(client, tid, topic, 0, pid, epoch + 1, 0, [b"c"]).error_code == ErrorCode.none
    assert log.last_stable_offset == 3 < log.log_end_offset
    ab = end_txn(coord, tid, pid, epoch + 1, False)
    assert (ab.error_code, ab.producer_epoch) == (ErrorCode.none, epoch + 2)
    wait_state(cluster, tid, S.COMPLETE_ABORT)
    assert control_markers(cluster, topic, 0)[-1] == (r.ControlType.ABORT, pid, epoch + 2)
    assert log.last_stable_offset == log.log_end_offset
    # The old epoch is fenced on the data path.
    stale = produce_txn(client, tid, topic, 0, pid, epoch, 5, [b"zombie"])
    assert stale.error_code in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced), stale


def test_fencing_an_open_transaction(cluster, client: ClusterClient) -> None:
    topic, tid = unique("t"), unique("tx")
    create_topic(client, topic, 1)
    coord = coordinator(client, tid)
    a = init_pid(coord, tid)
    assert produce_txn(client, tid, topic, 0, a.producer_id, a.producer_epoch, 0, [b"x"]).error_code == ErrorCode.none
    b = init_pid(coord, tid)
    assert b.error_code == ErrorCode.concurrent_transactions
    b = init_until_ok(coord, tid)
    assert b.error_code == ErrorCode.none and b.producer_epoch > a.producer_epoch + 1
    assert control_markers(cluster, topic, 0)[-1][0] == r.ControlType.ABORT
    assert end_txn(coord, tid, a.producer_id, a.producer_epoch, True).error_code == ErrorCode.producer_fenced
    assert end_txn(coord, tid, a.producer_id, a.producer_epoch, True, version=1).error_code == ErrorCode.invalid_producer_epoch
    assert add_partitions(coord, tid, a.producer_id, a.producer_epoch, {topic: [0]}) == {
        (topic, 0): ErrorCode.producer_fenced}


def test_concurrent_transactions_while_markers_pend_and_failover(cluster, client: ClusterClient) -> None:
    topic, tid = unique("t"), unique("tx")
    create_topic(client, topic, 1)
    coord = coordinator(client, tid)
    init = init_pid(coord, tid)
    pid, epoch = init.producer_id, init.producer_epoch
    assert produce_txn(client, tid, topic, 0, pid, epoch, 0, [b"x"]).error_code == ErrorCode.none
    tc = cluster.cluster.state.transactions
    tc.txn_config.marker_delay_ms = 3_600_000  # hold the markers back
    try:
        end = end_txn(coord, tid, pid, epoch, True)
        assert (end.error_code, end.producer_epoch) == (ErrorCode.none, epoch + 1)
        assert tc.metadata(tid).state is S.PREPARE_COMMIT
        time.sleep(0.1)  # several ticks: still pending
        assert init_pid(coord, tid).error_code == ErrorCode.concurrent_transactions
        assert produce_txn(client, tid, topic, 0, pid, epoch + 1, 0, [b"y"]).error_code == ErrorCode.not_enough_replicas
        assert end_txn(coord, tid, pid, epoch, True).error_code == ErrorCode.concurrent_transactions
        # Coordinator fail-over: the new one rebuilds from the transaction log and finishes the commit.
        rebuilt = TransactionCoordinator.rebuild(tc)
        assert rebuilt.snapshot() == tc.snapshot()
        rebuilt.txn_config = TransactionConfig()
        cluster.cluster.state.transactions = rebuilt
    finally:
        tc.txn_config.marker_delay_ms = 0
    wait_state(cluster, tid, S.COMPLETE_COMMIT)
    assert control_markers(cluster, topic, 0) == [(r.ControlType.COMMIT, pid, epoch + 1)]
    assert init_until_ok(coord, tid).producer_epoch == epoch + 2


# -- TV1 producer (AddPartitionsToTxn, verification) ---------------------------------------------


def test_tv1_transaction_with_add_partitions(tv1_cluster) -> None:
    with ClusterClient(tv1_cluster.bootstrap_servers) as client:
        topic, tid = unique("t"), unique("tx")
        create_topic(client, topic)
        coord = coordinator(client, tid)
        other = non_coordinator(tv1_cluster, client, tid)
        init = init_pid(coord, tid, version=4)
        pid, epoch = init.producer_id, init.producer_epoch
        # Not added yet: the leader's verification refuses the batch (Produce v9: INVALID_TXN_STATE).
        refused = produce_txn(client, tid, topic, 0, pid, epoch, 0, [b"x"], version=9)
        assert refused.error_code == ErrorCode.invalid_txn_state
        # Produce v11 understands TRANSACTION_ABORTABLE.
        assert produce_txn(client, tid, topic, 0, pid, epoch, 0, [b"x"], version=11).error_code == ErrorCode.transaction_abortable
        if other is not None:
            assert add_partitions(other, tid, pid, epoch, {topic: [0]}) == {(topic, 0): ErrorCode.not_coordinator}
        assert add_partitions(coord, tid, pid, epoch, {topic: [0], "missing-" + topic: [0]}) == {
            (topic, 0): ErrorCode.operation_not_attempted, ("missing-" + topic, 0): ErrorCode.unknown_topic_or_partition}
        assert add_partitions(coord, tid, pid, epoch, {"__consumer_offsets": [0]}) == {
            ("__consumer_offsets", 0): ErrorCode.topic_authorization_failed}
        assert add_partitions(coord, tid, pid + 1, epoch, {topic: [0]}) == {
            (topic, 0): ErrorCode.invalid_producer_id_mapping}
        assert add_partitions(coord, tid, pid, epoch, {topic: [0, 1]}) == {
            (topic, 0): ErrorCode.none, (topic, 1): ErrorCode.none}
        assert produce_txn(client, tid, topic, 0, pid, epoch, 0, [b"x"], version=9).error_code == ErrorCode.none
        assert end_txn(coord, tid, pid, epoch, True, version=3).error_code == ErrorCode.none
        wait_state(tv1_cluster, tid, S.COMPLETE_COMMIT)
        assert control_markers(tv1_cluster, topic, 0) == [(r.ControlType.COMMIT, pid, epoch)]
        assert control_markers(tv1_cluster, topic, 1) == [(r.ControlType.COMMIT, pid, epoch)]
        assert end_txn(coord, tid, pid, epoch, True, version=3).error_code == ErrorCode.none
        assert end_txn(coord, tid, pid, epoch, False, version=3).error_code == ErrorCode.invalid_txn_state
        # AddOffsetsToTxn: the group joins the transaction.
        offs = coord.send(payloads.build(framing.request_schema(25, 3), transactional_id=tid, producer_id=pid,
                                         producer_epoch=epoch, group_id="g-" + tid))
        assert offs.error_code == ErrorCode.none
        assert tv1_cluster.cluster.state.transactions.metadata(tid).groups == ("g-" + tid,)


def test_broker_side_verify_only(cluster, client: ClusterClient) -> None:
    topic, tid = unique("t"), unique("tx")
    create_topic(client, topic)
    coord = coordinator(client, tid)
    init = init_pid(coord, tid)
    assert produce_txn(client, tid, topic, 0, init.producer_id, init.producer_epoch, 0, [b"x"]).error_code == ErrorCode.none

    def txn(verify_only: bool, epoch: int):
        return nested(24, 5, "AddPartitionsToTxnTransaction", transactional_id=tid, producer_id=init.producer_id,
                      producer_epoch=epoch, verify_only=verify_only,
                      topics=(nested(24, 5, "AddPartitionsToTxnTopic", name=topic, partitions=(0, 1)),))

    resp = coord.send(payloads.build(framing.request_schema(24, 5), transactions=(txn(True, init.producer_epoch),)))
    got = {(t.name, int(p.partition_index)): p.partition_error_code
           for t in resp.results_by_transaction[0].topic_results for p in t.results_by_partition}
    assert got == {(topic, 0): ErrorCode.none, (topic, 1): ErrorCode.transaction_abortable}
    resp = coord.send(payloads.build(framing.request_schema(24, 5), transactions=(txn(True, init.producer_epoch + 1),)))
    assert {p.partition_error_code for t in resp.results_by_transaction[0].topic_results
            for p in t.results_by_partition} == {ErrorCode.producer_fenced}


def test_write_txn_markers(cluster, client: ClusterClient) -> None:
    topic = unique("t")
    create_topic(client, topic, 1)
    leader = client.leader_for(topic, 0)
    others = [client.node(n) for n in client.nodes if client.node(n) is not leader]

    def request(node: RawClient, name: str):
        marker = nested(27, 2, "WritableTxnMarker", producer_id=4242, producer_epoch=3, transaction_result=False,
                        coordinator_epoch=0, transaction_version=2,
                        topics=(nested(27, 2, "WritableTxnMarkerTopic", name=name, partition_indexes=(0,)),))
        resp = node.send(payloads.build(framing.request_schema(27, 2), markers=(marker,)))
        return resp.markers[0].producer_id, resp.markers[0].topics[0].partitions[0].error_code

    assert request(leader, topic) == (4242, ErrorCode.none)
    assert control_markers(cluster, topic, 0) == [(r.ControlType.ABORT, 4242, 3)]
    assert request(leader, "missing-" + topic) == (4242, ErrorCode.unknown_topic_or_partition)
    for node in others:
        assert request(node, topic) == (4242, ErrorCode.not_leader_or_follower)


# -- a real client --------------------------------------------------------------------------------


def test_confluent_transactional_producer(cluster, client: ClusterClient) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic, tid = unique("t"), unique("tx")
    create_topic(client, topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid,
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=f"committed-{i}".encode(), partition=i % 2)
    producer.commit_transaction(15)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted", partition=0)
    producer.flush(10)
    producer.abort_transaction(15)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": unique("g"),
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 6 and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        time.sleep(0.5)
        m = consumer.poll(0.5)
        assert m is None or m.error() is not None or m.value() != b"aborted"
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"committed-{i}".encode() for i in range(6))


def test_confluent_send_offsets_to_transaction(cluster, client: ClusterClient) -> None:
    """AddOffsetsToTxn + TxnOffsetCommit: the offsets become the group's only on commit."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic, tid, group = unique("t"), unique("tx"), unique("g")
    create_topic(client, topic, 1)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        producer.init_transactions(15)
        for offset, commit in ((5, False), (7, True)):
            producer.begin_transaction()
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, 0, offset)], consumer.consumer_group_metadata(), 15)
            if commit:
                producer.commit_transaction(15)
            else:
                producer.abort_transaction(15)
            wait_state(cluster, tid, S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
            committed = consumer.committed([TopicPartition(topic, 0)], 10)[0].offset
            assert committed == (7 if commit else -1001), (offset, committed)
    finally:
        consumer.close()
