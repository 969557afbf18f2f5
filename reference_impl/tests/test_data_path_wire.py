"""The reference broker's data path over the wire, with 1 and 3 brokers.

confluent-kafka clients (Producer, Consumer with assign(), AdminClient) check that a
real client works end to end; the raw client drives the error paths and protocol
details (CRC, wrong node, fetch sessions, long polling, ListOffsets) a client hides.
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol import framing, payloads
from reference_impl.protocol import records as r
from reference_impl.protocol.records import Compression, NewRecord
from reference_impl.server.broker_server import ThreadedReferenceCluster

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
WAIT = datetime.timedelta(milliseconds=0)
TS = 1_700_000_000_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def nested(api_key: int, version: int, class_name: str, /, **fields):
    return payloads.build(payloads.nested(framing.request_schema(api_key, version), class_name), **fields)


def create_topic(client: ClusterClient, name: str, partitions: int = 1, rf: int = 1, configs=()) -> None:
    resp = client.bootstrap.request(
        19,
        7,
        topics=(
            nested(
                19,
                7,
                "CreatableTopic",
                name=name,
                num_partitions=partitions,
                replication_factor=rf,
                assignments=(),
                configs=tuple(nested(19, 7, "CreatableTopicConfig", name=k, value=v) for k, v in configs),
            ),
        ),
        timeout=datetime.timedelta(seconds=10),
        validate_only=False,
    )
    assert resp.topics[0].error_code == ErrorCode.none, resp


def topic_id(client: ClusterClient, name: str) -> uuid.UUID:
    md = client.refresh([name])
    return next(t.topic_id for t in md.topics if t.name == name)


def leader_of(client: ClusterClient, topic: str, partition: int = 0) -> int:
    md = client.refresh([topic])
    t = next(t for t in md.topics if t.name == topic)
    return int(next(p for p in t.partitions if p.partition_index == partition).leader_id)


def produce(
    node: RawClient, topic: str, data: bytes, partition: int = 0, *, version: int = 9, acks: int = -1,
    transactional_id: str | None = None,
):
    req = payloads.build(
        framing.request_schema(0, version),
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            nested(
                0,
                version,
                "TopicProduceData",
                name=topic,
                partition_data=(nested(0, version, "PartitionProduceData", index=partition, records=data),),
            ),
        ),
    )
    if acks == 0:
        node.send(req, expect_response=False)
        return None
    return node.send(req).responses[0].partition_responses[0]


def fetch(
    node: RawClient,
    parts: list[tuple[uuid.UUID | str, int, int]],
    *,
    version: int = 16,
    session_id: int = 0,
    epoch: int = -1,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50_000_000,
    partition_max_bytes: int = 1_000_000,
    isolation: int = 0,
    forgotten: tuple = (),
    timeout: float | None = None,
):
    by_topic: dict[uuid.UUID, list] = {}
    for tid, p, off in parts:
        by_topic.setdefault(tid, []).append(
            nested(1, version, "FetchPartition", partition=p, fetch_offset=off, partition_max_bytes=partition_max_bytes)
        )
    req = payloads.build(
        framing.request_schema(1, version),
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=session_id,
        session_epoch=epoch,
        topics=tuple(
            nested(1, version, "FetchTopic", topic_id=tid, topic=tid, partitions=tuple(ps)) for tid, ps in by_topic.items()
        ),
        forgotten_topics_data=tuple(
            nested(1, version, "ForgottenTopic", topic_id=tid, partitions=tuple(ps)) for tid, ps in forgotten
        ),
        rack_id="",
    )
    return node.send(req, timeout=timeout)


def partitions_of(resp) -> dict[tuple[uuid.UUID, int], object]:
    return {
        (payloads.get(t, "topic_id") or payloads.get(t, "topic"), int(p.partition_index)): p
        for t in resp.responses
        for p in t.partitions
    }


# --- confluent-kafka round trips -------------------------------------------------------


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 20.0) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("g"),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is None:
                continue
            assert m.error() is None or m.error().code() == KafkaError._PARTITION_EOF, m.error()
            if m.error() is None:
                got.append(m)
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_producer_consumer_round_trip(cluster, codec: str) -> None:
    topic = unique(f"rt-{codec}")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "compression.type": codec, "linger.ms": 5})
    errors: list = []
    sent = []
    for round_ in range(3):  # several produce requests -> several batches per partition
        for i in range(10):
            n = round_ * 10 + i
            key, value = f"k{n}".encode(), (f"{codec}-{n}-" + "x" * (n % 7)).encode()
            headers = [("h", f"{n}".encode()), ("empty", b"")]
            ts = TS + n * 1001 + 7
            producer.produce(
                topic, key=key, value=value, headers=headers, timestamp=ts, partition=n % 3,
                on_delivery=lambda e, m: errors.append(e) if e else None,
            )
            sent.append((n % 3, key, value, headers, ts))
        assert producer.flush(10) == 0
    assert errors == []
    got = consume_all(cluster.bootstrap_servers, topic, 3, len(sent))
    received = sorted((m.partition(), m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in got)
    assert received == sorted(sent)
    for p in range(3):
        offsets = [m.offset() for m in got if m.partition() == p]
        assert offsets == list(range(len(offsets)))


@pytest.mark.parametrize("acks", [0, 1])
def test_producer_acks(cluster, acks: int) -> None:
    topic = unique(f"acks{acks}")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": acks})
    reports: list = []
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2, on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(10) == 0
    assert [e for e, _ in reports if e] == []
    if acks == 1:
        assert sorted(m.offset() for _, m in reports) == sorted(list(range(10)) * 2)
    got = consume_all(cluster.bootstrap_servers, topic, 2, 20)
    assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(20))


# --- AdminClient ------------------------------------------------------------------------


def test_admin_create_list_delete_describe(cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    nodes = len(cluster.cluster.state.nodes)
    name = unique("adm")
    admin.create_topics([NewTopic(name, num_partitions=4, replication_factor=nodes)])[name].result(10)
    md = admin.list_topics(timeout=10)
    assert name in md.topics and len(md.topics[name].partitions) == 4
    assert all(len(p.replicas) == nodes for p in md.topics[name].partitions.values())
    assert sorted(md.brokers) == list(range(1, nodes + 1))

    with pytest.raises(Exception) as exc:
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(10)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    bad = unique("rf")
    with pytest.raises(Exception) as exc:
        admin.create_topics([NewTopic(bad, num_partitions=1, replication_factor=nodes + 1)])[bad].result(10)
    assert exc.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    with pytest.raises(Exception) as exc:
        admin.create_topics([NewTopic("bad name!", num_partitions=1, replication_factor=1)])["bad name!"].result(10)
    assert exc.value.args[0].code() == KafkaError.TOPIC_EXCEPTION

    desc = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert desc.cluster_id == cluster.cluster.state.config.cluster_id
    assert sorted(n.id for n in desc.nodes) == list(range(1, nodes + 1))
    assert desc.controller is not None and desc.authorized_operations

    admin.delete_topics([name], operation_timeout=10)[name].result(10)
    assert name not in admin.list_topics(timeout=10).topics
    with pytest.raises(Exception) as exc:
        admin.delete_topics([name])[name].result(10)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# --- raw protocol -------------------------------------------------------------------------


def test_api_versions_advertise_data_path(client: ClusterClient) -> None:
    versions = client.bootstrap.api_versions()
    assert versions[0] == (3, 13) and versions[1] == (4, 18) and versions[2] == (1, 10)
    assert versions[3] == (0, 13) and versions[19] == (2, 7) and versions[20] == (1, 6) and versions[60] == (0, 2)


@pytest.mark.parametrize(
    "codec, snappy_framing",
    [(c, "xerial") for c in Compression] + [(Compression.SNAPPY, "raw")],
    ids=[c.name.lower() for c in Compression] + ["snappy-raw"],
)
def test_raw_produce_fetch_every_codec(client: ClusterClient, codec: Compression, snappy_framing: str) -> None:
    topic = unique("raw")
    create_topic(client, topic)
    leader = client.leader_for(topic, 0)
    recs = [NewRecord(value=b"v%d" % i, key=b"k%d" % i, headers=(("h", b"%d" % i),), timestamp=TS + i) for i in range(5)]
    first = produce(leader, topic, r.build_batch(recs[:2], compression=codec, snappy_framing=snappy_framing))
    second = produce(leader, topic, r.build_batch(recs[2:], compression=codec, snappy_framing=snappy_framing))
    assert (first.error_code, first.base_offset, second.error_code, second.base_offset) == (0, 0, 0, 2)
    assert first.log_append_time is None and first.log_start_offset == 0
    tid = topic_id(client, topic)
    p = partitions_of(fetch(leader, [(tid, 0, 0)]))[(tid, 0)]
    assert p.error_code == ErrorCode.none and p.high_watermark == 5 and p.last_stable_offset == 5
    assert p.aborted_transactions is None
    batches = r.decode_batches(p.records)
    assert [b.header.base_offset for b in batches] == [0, 2]
    assert all(b.header.compression is codec and b.header.partition_leader_epoch == 0 for b in batches)
    got = [(x.offset, x.key, x.value, x.headers, x.timestamp) for b in batches for x in b.records]
    assert got == [(i, n.key, n.value, n.headers, n.timestamp) for i, n in enumerate(recs)]


def test_bad_crc_is_corrupt_message(client: ClusterClient) -> None:
    topic = unique("crc")
    create_topic(client, topic)
    leader = client.leader_for(topic, 0)
    bad = r.with_crc(r.build_batch([b"x"]), 0xDEADBEEF)
    resp = produce(leader, topic, bad)
    assert resp.error_code == ErrorCode.corrupt_message and resp.base_offset == -1
    # Nothing was appended.
    assert produce(leader, topic, r.build_batch([b"ok"])).base_offset == 0


@pytest.mark.parametrize(
    "data, code",
    [
        (r.build_batch([b"a"]) + r.build_batch([b"b"]), ErrorCode.invalid_record),  # two batches
        (b"", ErrorCode.invalid_record),  # no batch
        (r.build_batch([b"a", b"b"], last_offset_delta=7), ErrorCode.invalid_record),
        (r.build_batch([b"a"], base_offset=3), ErrorCode.invalid_record),
        (r.build_batch([b"a"], producer_id=4, producer_epoch=0, base_sequence=-1), ErrorCode.invalid_record),
    ],
    ids=["two-batches", "no-batch", "offset-delta", "base-offset", "no-sequence"],
)
def test_invalid_batches(client: ClusterClient, data: bytes, code: ErrorCode) -> None:
    topic = unique("inv")
    create_topic(client, topic)
    assert produce(client.leader_for(topic, 0), topic, data).error_code == code


def test_producer_id_batches(client: ClusterClient) -> None:
    topic = unique("pid")
    create_topic(client, topic)
    leader = client.leader_for(topic, 0)
    idem = r.build_batch([b"a"], producer_id=4, producer_epoch=0, base_sequence=17)
    assert produce(leader, topic, idem).error_code == ErrorCode.none  # unknown producer: accepted
    # A different producer, so sequence checks of producer 4 play no part below.
    txn = r.build_batch([b"a"], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    assert produce(leader, topic, txn).error_code == ErrorCode.transactional_id_authorization_failed
    # The coordinator does not know "tx": Kafka 4.4.0 answers INVALID_PRODUCER_ID_MAPPING.
    assert produce(leader, topic, txn, transactional_id="tx").error_code == ErrorCode.invalid_producer_id_mapping


def test_zstd_needs_produce_v7(client: ClusterClient) -> None:
    topic = unique("zstd")
    create_topic(client, topic)
    leader = client.leader_for(topic, 0)
    data = r.build_batch([b"z"], compression=Compression.ZSTD)
    assert produce(leader, topic, data, version=6).error_code == ErrorCode.unsupported_compression_type
    assert produce(leader, topic, data, version=7).error_code == ErrorCode.none


def test_produce_v13_to_an_unknown_topic_id(client: ClusterClient) -> None:
    """Produce v13 names the topic by id (KIP-516): an id no topic has is answered
    UNKNOWN_TOPIC_ID, never a handler crash (Hypothesis' mutated-request test found the
    reference reading the name that v13 does not carry)."""
    req = payloads.build(
        framing.request_schema(0, 13), transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(nested(0, 13, "TopicProduceData", topic_id=uuid.uuid4(), partition_data=(
            nested(0, 13, "PartitionProduceData", index=0, records=r.build_batch([b"x"])),)),),
    )
    part = client.bootstrap.send(req).responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.unknown_topic_id


def test_unknown_topic_and_partition(client: ClusterClient) -> None:
    node = client.bootstrap
    assert produce(node, unique("none"), r.build_batch([b"x"])).error_code == ErrorCode.unknown_topic_or_partition
    topic = unique("one")
    create_topic(client, topic)
    leader = client.leader_for(topic, 0)
    assert produce(leader, topic, r.build_batch([b"x"]), partition=5).error_code == ErrorCode.unknown_topic_or_partition
    resp = fetch(leader, [(uuid.uuid4(), 0, 0)])
    assert [p.error_code for p in partitions_of(resp).values()] == [ErrorCode.unknown_topic_id]


def test_wrong_node_is_not_leader_or_follower(client3: ClusterClient) -> None:
    client = client3
    topic = unique("nl")
    create_topic(client, topic, partitions=3)
    tid = topic_id(client, topic)
    for partition in range(3):
        leader = leader_of(client, topic, partition)
        other = next(n for n in sorted(client.nodes) if n != leader)
        wrong = client.node(other)
        resp = produce(wrong, topic, r.build_batch([b"x"]), partition=partition, version=10)
        assert resp.error_code == ErrorCode.not_leader_or_follower
        assert resp.current_leader.leader_id == leader
        p = partitions_of(fetch(wrong, [(topic, partition, 0)], version=10))[(topic, partition)]
        assert p.error_code == ErrorCode.not_leader_or_follower and p.high_watermark == -1
        full = fetch(wrong, [(tid, partition, 0)], version=16)
        p16 = partitions_of(full)[(tid, partition)]
        assert p16.current_leader.leader_id == leader
        assert [int(e.node_id) for e in full.node_endpoints] == [leader]
        lo = wrong.request(
            2, 7, replica_id=-1, isolation_level=0,
            topics=(nested(2, 7, "ListOffsetsTopic", name=topic, partitions=(nested(2, 7, "ListOffsetsPartition", partition_index=partition, timestamp=-1),)),),
        )
        assert lo.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
        assert produce(client.node(leader), topic, r.build_batch([b"x"]), partition=partition).error_code == ErrorCode.none


def test_leaders_spread_over_nodes(cluster, client: ClusterClient) -> None:
    nodes = len(cluster.cluster.state.nodes)
    topic = unique("spread")
    create_topic(client, topic, partitions=nodes * 2)
    leaders = {leader_of(client, topic, p) for p in range(nodes * 2)}
    assert leaders == set(range(1, nodes + 1))


def test_fetch_sessions(client: ClusterClient) -> None:
    topic = unique("sess")
    create_topic(client, topic, partitions=2, rf=len(client.nodes))
    tid = topic_id(client, topic)
    leader = client.node(leader_of(client, topic, 0))
    for p in range(2):
        produce(client.node(leader_of(client, topic, p)), topic, r.build_batch([b"a", b"b"]), partition=p)
    # Every node is a replica (rf = nodes), so one node serves both partitions to a
    # v11+ consumer fetch even when it leads only one of them (KIP-392).
    full = fetch(leader, [(tid, 0, 0), (tid, 1, 0)], epoch=0)
    assert full.error_code == ErrorCode.none and full.session_id != 0
    assert set(partitions_of(full)) == {(tid, 0), (tid, 1)}
    sid = full.session_id
    # Incremental with nothing new: no partitions in the response.
    inc = fetch(leader, [(tid, 0, 2), (tid, 1, 2)], session_id=sid, epoch=1)
    assert inc.error_code == ErrorCode.none and inc.session_id == sid
    assert partitions_of(inc) == {}
    # New data on partition 1 only: only partition 1 comes back (offsets from the session).
    produce(client.node(leader_of(client, topic, 1)), topic, r.build_batch([b"c"]), partition=1)
    inc = fetch(leader, [], session_id=sid, epoch=2)
    got = partitions_of(inc)
    assert list(got) == [(tid, 1)] and got[(tid, 1)].high_watermark == 3
    assert [x.value for x in r.iter_records(got[(tid, 1)].records)] == [b"c"]
    # Wrong epoch, unknown session, topic-id mismatch by version.
    assert fetch(leader, [], session_id=sid, epoch=7).error_code == ErrorCode.invalid_fetch_session_epoch
    assert fetch(leader, [], session_id=sid + 1000, epoch=1).error_code == ErrorCode.fetch_session_id_not_found
    old = leader.request(
        1, 12, replica_id=-1, max_wait=WAIT, min_bytes=1, max_bytes=1000, isolation_level=0,
        session_id=sid, session_epoch=3, topics=(), forgotten_topics_data=(), rack_id="",
    )
    assert old.error_code == ErrorCode.fetch_session_topic_id_error
    # Forgetting every partition ends the session; epoch -1 closes explicitly.
    gone = fetch(leader, [], session_id=sid, epoch=3, forgotten=((tid, (0, 1)),))
    assert gone.error_code == ErrorCode.none and gone.session_id == 0
    assert fetch(leader, [], session_id=sid, epoch=4).error_code == ErrorCode.fetch_session_id_not_found
    again = fetch(leader, [(tid, 0, 0)], epoch=0)
    closed = fetch(leader, [(tid, 0, 0)], session_id=again.session_id, epoch=-1)
    assert closed.session_id == 0 and partitions_of(closed)[(tid, 0)].error_code == ErrorCode.none
    assert fetch(leader, [], session_id=again.session_id, epoch=1).error_code == ErrorCode.fetch_session_id_not_found


def test_fetch_offsets_and_limits(client: ClusterClient) -> None:
    topic = unique("lim")
    create_topic(client, topic)
    tid = topic_id(client, topic)
    leader = client.leader_for(topic, 0)
    sizes = []
    for i in range(4):
        data = r.build_batch([b"%d" % i * 100])
        sizes.append(len(data))
        produce(leader, topic, data)
    p = partitions_of(fetch(leader, [(tid, 0, 0)], partition_max_bytes=1))[(tid, 0)]
    assert len(p.records) == sizes[0]  # first batch even if larger than the limit
    p = partitions_of(fetch(leader, [(tid, 0, 1)], partition_max_bytes=sizes[0] * 2))[(tid, 0)]
    assert [b.header.base_offset for b in r.decode_batches(p.records)] == [1, 2]
    p = partitions_of(fetch(leader, [(tid, 0, 4)]))[(tid, 0)]
    assert p.error_code == ErrorCode.none and p.records == b"" and p.high_watermark == 4
    p = partitions_of(fetch(leader, [(tid, 0, 5)]))[(tid, 0)]
    assert p.error_code == ErrorCode.offset_out_of_range and p.high_watermark == -1


def test_fetch_long_poll(client: ClusterClient) -> None:
    topic = unique("poll")
    create_topic(client, topic)
    tid = topic_id(client, topic)
    leader = client.leader_for(topic, 0)
    t0 = time.monotonic()
    resp = fetch(leader, [(tid, 0, 0)], max_wait_ms=300)
    waited = time.monotonic() - t0
    assert 0.25 <= waited < 3 and partitions_of(resp)[(tid, 0)].records == b""
    host, port = client.nodes[leader_of(client, topic)]
    producer = RawClient(host, port)

    def later():
        time.sleep(0.3)
        produce(producer, topic, r.build_batch([b"wake"]))

    th = threading.Thread(target=later)
    th.start()
    t0 = time.monotonic()
    resp = fetch(leader, [(tid, 0, 0)], max_wait_ms=10_000, timeout=15)
    waited = time.monotonic() - t0
    th.join()
    producer.close()
    assert waited < 5
    assert [x.value for x in r.iter_records(partitions_of(resp)[(tid, 0)].records)] == [b"wake"]


def test_list_offsets(client: ClusterClient) -> None:
    topic = unique("lo")
    create_topic(client, topic)
    leader = client.leader_for(topic, 0)
    produce(leader, topic, r.build_batch([NewRecord(b"a", timestamp=TS), NewRecord(b"b", timestamp=TS + 50)]))
    produce(leader, topic, r.build_batch([NewRecord(b"c", timestamp=TS + 20)]))

    def lookup(ts: int, version: int = 7):
        resp = leader.request(
            2, version, replica_id=-1, isolation_level=0,
            topics=(nested(2, version, "ListOffsetsTopic", name=topic, partitions=(nested(2, version, "ListOffsetsPartition", partition_index=0, timestamp=ts),)),),
        )
        p = resp.topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp

    assert lookup(-2) == (ErrorCode.none, 0, -1)
    assert lookup(-1) == (ErrorCode.none, 3, -1)
    assert lookup(-3) == (ErrorCode.none, 1, TS + 50)
    assert lookup(TS + 10) == (ErrorCode.none, 1, TS + 50)
    assert lookup(TS + 51) == (ErrorCode.none, -1, -1)
    assert lookup(-3, version=6)[0] == ErrorCode.unsupported_version


def test_metadata_auto_create_and_ids(client: ClusterClient) -> None:
    node = client.bootstrap
    name = unique("auto")

    def md(allow: bool, topics):
        return node.request(
            3, 12, topics=topics, allow_auto_topic_creation=allow, include_topic_authorized_operations=False
        )

    t = md(False, (nested(3, 12, "MetadataRequestTopic", name=name, topic_id=None),)).topics[0]
    assert t.error_code == ErrorCode.unknown_topic_or_partition
    t = md(True, (nested(3, 12, "MetadataRequestTopic", name=name, topic_id=None),)).topics[0]
    assert t.error_code == ErrorCode.leader_not_available
    t = md(True, (nested(3, 12, "MetadataRequestTopic", name=name, topic_id=None),)).topics[0]
    assert t.error_code == ErrorCode.none and len(t.partitions) == 1 and t.topic_id is not None
    by_id = md(False, (nested(3, 12, "MetadataRequestTopic", name=None, topic_id=t.topic_id),)).topics[0]
    assert by_id.name == name
    missing = md(False, (nested(3, 12, "MetadataRequestTopic", name=None, topic_id=uuid.uuid4()),)).topics[0]
    assert missing.error_code == ErrorCode.unknown_topic_id and missing.name is None
    bad = md(True, (nested(3, 12, "MetadataRequestTopic", name="no way", topic_id=None),)).topics[0]
    assert bad.error_code == ErrorCode.invalid_topic_exception


def test_acks_zero_failure_closes_connection(client: ClusterClient) -> None:
    host, port = client.nodes[min(client.nodes)]
    with RawClient(host, port) as node:
        produce(node, unique("nope"), r.build_batch([b"x"]), acks=0)
        assert node.is_closed_by_peer(5)


def test_log_append_time_topic(client: ClusterClient) -> None:
    topic = unique("lat")
    create_topic(client, topic, configs=[("message.timestamp.type", "LogAppendTime")])
    leader = client.leader_for(topic, 0)
    before = int(time.time() * 1000)
    resp = produce(leader, topic, r.build_batch([NewRecord(b"x", timestamp=5)]))
    assert resp.error_code == ErrorCode.none
    append_ms = round(resp.log_append_time.timestamp() * 1000)
    assert append_ms >= before - 1000
    tid = topic_id(client, topic)
    batch = r.decode_batches(partitions_of(fetch(leader, [(tid, 0, 0)]))[(tid, 0)].records)[0]
    assert batch.header.timestamp_type is r.TimestampType.LOG_APPEND_TIME
    assert batch.records[0].timestamp == append_ms


def test_producer_auto_creates_topic_and_consumer_offsets(cluster) -> None:
    topic = unique("autop")
    bootstrap = cluster.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap})
    errors: list = []
    for i in range(5):
        producer.produce(topic, value=b"%d" % i, timestamp=TS + i * 100, on_delivery=lambda e, m: errors.append(e) if e else None)
    assert producer.flush(15) == 0 and errors == []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 5)
        found = consumer.offsets_for_times([TopicPartition(topic, 0, TS + 150)], timeout=10)
        assert found[0].offset == 2
        # Start from the end: nothing until a new record arrives.
        consumer.assign([TopicPartition(topic, 0, -1)])  # OFFSET_END
        assert consumer.poll(0.5) is None
        producer.produce(topic, value=b"late")
        producer.flush(10)
        deadline = time.monotonic() + 10
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
        assert msg is not None and msg.error() is None and (msg.offset(), msg.value()) == (5, b"late")
    finally:
        consumer.close()


def test_create_delete_by_id_and_validate_only(client: ClusterClient) -> None:
    node = client.bootstrap
    name = unique("byid")

    def create(validate_only: bool):
        return node.request(
            19, 7,
            topics=(nested(19, 7, "CreatableTopic", name=name, num_partitions=2, replication_factor=1, assignments=(),
                           configs=(nested(19, 7, "CreatableTopicConfig", name="retention.ms", value="1000"),)),),
            timeout=datetime.timedelta(seconds=5), validate_only=validate_only,
        ).topics[0]

    dry = create(True)
    assert dry.error_code == ErrorCode.none and dry.num_partitions == 2
    assert name not in {t.name for t in client.refresh().topics}
    made = create(False)
    assert made.error_code == ErrorCode.none and made.topic_id is not None
    configs = {c.name: (c.value, c.config_source) for c in made.configs}
    assert configs["retention.ms"] == ("1000", 1) and configs["cleanup.policy"] == ("delete", 5)
    resp = node.request(
        20, 6,
        topics=(nested(20, 6, "DeleteTopicState", name=None, topic_id=made.topic_id),
                nested(20, 6, "DeleteTopicState", name=None, topic_id=uuid.uuid4()),
                nested(20, 6, "DeleteTopicState", name="x", topic_id=uuid.uuid4())),
        timeout=datetime.timedelta(seconds=5),
    )
    assert [(x.name, x.error_code) for x in resp.responses] == [
        (name, ErrorCode.none), (None, ErrorCode.unknown_topic_id), ("x", ErrorCode.invalid_request)]


def test_node_failure_moves_leadership() -> None:
    with ThreadedReferenceCluster(brokers=3) as cluster, ClusterClient(cluster.bootstrap_servers) as client:
        replicated, single = unique("rf3"), unique("rf1")
        create_topic(client, replicated, rf=3)
        create_topic(client, single, partitions=3)
        old_leader = leader_of(client, replicated)
        victim_single = next(p for p in range(3) if leader_of(client, single, p) == old_leader)
        cluster.stop_node(old_leader)
        survivor = next(n for n in (1, 2, 3) if n != old_leader)
        host, port = client.nodes[survivor]
        with RawClient(host, port) as node:
            md = node.request(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
            assert old_leader not in {b.node_id for b in md.brokers}
            topics = {t.name: t for t in md.topics}
            p = topics[replicated].partitions[0]
            assert p.leader_id != old_leader and p.leader_epoch == 1 and old_leader in p.offline_replicas
            q = topics[single].partitions[victim_single]
            assert (q.error_code, q.leader_id, q.leader_epoch) == (ErrorCode.leader_not_available, -1, 1)
            new_leader = client.node(int(p.leader_id))
            assert produce(new_leader, replicated, r.build_batch([b"x"])).error_code == ErrorCode.none
            cluster.start_node(old_leader)
            md = node.request(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
            q = {t.name: t for t in md.topics}[single].partitions[victim_single]
            assert (q.error_code, q.leader_id, q.leader_epoch) == (ErrorCode.none, old_leader, 2)


def test_every_advertised_version_answers(client: ClusterClient) -> None:
    """One ordinary request per advertised version of each data-path API."""
    node = client.bootstrap
    topic = unique("sweep")
    create_topic(client, topic, rf=1)
    tid = topic_id(client, topic)
    leader = client.leader_for(topic, 0)
    for v in range(0, 14):
        md = node.request(
            3, v,
            topics=(nested(3, v, "MetadataRequestTopic", name=topic, topic_id=None),),
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        assert [t.error_code for t in md.topics] == [ErrorCode.none], v
    for v in range(3, 14):
        req = payloads.build(
            framing.request_schema(0, v), transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
            topic_data=(nested(0, v, "TopicProduceData", name=topic, topic_id=tid,
                               partition_data=(nested(0, v, "PartitionProduceData", index=0, records=r.build_batch([b"%d" % v])),)),),
        )
        p = leader.send(req).responses[0].partition_responses[0]
        assert (p.error_code, p.base_offset) == (ErrorCode.none, v - 3), v
    for v in range(4, 19):
        key = tid if v >= 13 else topic
        p = partitions_of(fetch(leader, [(key, 0, 0)], version=v))[(key, 0)]
        assert p.error_code == ErrorCode.none and p.high_watermark == 11, v
        assert [x.value for x in r.iter_records(p.records)] == [b"%d" % i for i in range(3, 14)]
    for v in range(1, 11):
        resp = leader.request(
            2, v, replica_id=-1, isolation_level=0, timeout=datetime.timedelta(seconds=1),
            topics=(nested(2, v, "ListOffsetsTopic", name=topic,
                           partitions=(nested(2, v, "ListOffsetsPartition", partition_index=0, timestamp=-1),)),),
        )
        assert (resp.topics[0].partitions[0].error_code, resp.topics[0].partitions[0].offset) == (ErrorCode.none, 11), v
    for v in range(2, 8):
        name = unique(f"c{v}")
        resp = node.request(
            19, v, topics=(nested(19, v, "CreatableTopic", name=name, num_partitions=1, replication_factor=1,
                                  assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=5), validate_only=False,
        )
        assert resp.topics[0].error_code == ErrorCode.none, v
        d = node.request(20, min(v, 6), topic_names=(name,),
                         topics=(nested(20, 6, "DeleteTopicState", name=name, topic_id=None),),
                         timeout=datetime.timedelta(seconds=5))
        assert [x.error_code for x in d.responses] == [ErrorCode.none], v
    for v in range(0, 3):
        resp = node.request(60, v, include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=False)
        assert resp.error_code == ErrorCode.none and len(resp.brokers) == len(client.nodes), v
