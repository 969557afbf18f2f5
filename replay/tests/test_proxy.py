"""The capture proxy in front of a 3-broker reference cluster: real clients work through
it, every connection goes through it, and the trace holds one row per exchange."""

from __future__ import annotations

import asyncio
import collections
import datetime
import hashlib
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import RawClient
from reference_impl.protocol import framing, payloads
from reference_impl.protocol import records as rec
from reference_impl.server.broker_server import ThreadedReferenceCluster
from replay import address_rewrite
from replay.proxy import CaptureProxy, ThreadedCaptureProxy, produce_acks
from replay.trace_reader import read_trace
from replay.trace_writer import RawExchange, TraceWriter, build_row


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster():
    with ThreadedReferenceCluster(brokers=3) as c:
        yield c


def consume(bootstrap: str, topic: str, partitions: int, expected: int, group: str) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
        consumer.commit(asynchronous=False)
        return got
    finally:
        consumer.close()


def run_clients(bootstrap: str, topic: str, n: int = 30, value_prefix: str = "v") -> tuple[list, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list = []
    for i in range(n):
        producer.produce(topic, key=f"k{i}".encode(), value=f"{value_prefix}{i}".encode(), partition=i % 3,
                         headers=[("h", b"hv")], on_delivery=lambda e, m: errors.append(e) if e else None)
    assert producer.flush(10) == 0
    assert errors == []
    group = unique("g")
    got = consume(bootstrap, topic, 3, n, group)
    md = admin.list_topics(timeout=10)
    assert topic in md.topics
    return got, group


@pytest.fixture(scope="module")
def keep_trace(cluster, tmp_path_factory):
    """One recorded session through the proxy (payloads=keep)."""
    out = tmp_path_factory.mktemp("trace-keep")
    writer = TraceWriter(str(out), "keep", flush_seconds=0.1).start()
    before = cluster.cluster.stats["connections"]
    topic = unique("cap")
    with ThreadedCaptureProxy(cluster.bootstrap_servers.split(",")[0], sink=writer) as proxy:
        got, group = run_clients(proxy.bootstrap_servers, topic)
        # DescribeCluster (librdkafka answers describe_cluster from Metadata) over the raw client
        host, port = proxy.bootstrap_servers.split(":")
        with RawClient(host, int(port)) as raw:
            dc = raw.request(60, 1, include_cluster_authorized_operations=False, endpoint_type=1)
            fc = raw.request(10, 3, key=group, key_type=0)
            fc4 = raw.request(10, 4, key_type=0, coordinator_keys=(group,))
            md = raw.request(3, 12, topics=None, allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)
        stats = proxy.proxy.stats
        mapping = proxy.proxy.mapping()
    writer.close()
    table, report = read_trace(str(out))
    return dict(table=table, report=report, got=got, topic=topic, group=group, stats=stats, mapping=mapping,
                connections=cluster.cluster.stats["connections"] - before, dc=dc, fc=fc, fc4=fc4, md=md,
                writer=writer)


def proxy_ports(mapping: dict[str, str]) -> set[int]:
    return {int(v.rsplit(":", 1)[1]) for v in mapping.values()}


def test_clients_work_end_to_end_through_the_proxy(keep_trace) -> None:
    assert sorted(m.value() for m in keep_trace["got"]) == sorted(f"v{i}".encode() for i in range(30))


def test_every_connection_goes_through_the_proxy(cluster, keep_trace) -> None:
    mapping = keep_trace["mapping"]
    # one listener per broker, opened as brokers were first seen in Metadata
    assert set(mapping) == set(cluster.bootstrap_servers.split(","))
    assert len(proxy_ports(mapping)) == 3
    # every broker connection of the session came from the proxy
    assert keep_trace["connections"] == keep_trace["stats"].connections
    t = keep_trace["table"]
    assert set(t["upstream"].to_pylist()) == set(cluster.bootstrap_servers.split(","))
    # the raw client saw only proxy endpoints
    ports = proxy_ports(mapping)
    assert {b.port for b in keep_trace["md"].brokers} == ports
    assert {b.port for b in keep_trace["dc"].brokers} == ports
    assert keep_trace["fc"].port in ports
    assert {c.port for c in keep_trace["fc4"].coordinators} <= ports


def test_trace_has_one_row_per_exchange(keep_trace) -> None:
    t = keep_trace["table"]
    ex = [r for r in t.to_pylist() if r["kind"] == "exchange"]
    assert keep_trace["report"].skipped == []
    assert len(ex) == keep_trace["stats"].requests
    keys = [(r["connection_id"], r["correlation_id"]) for r in ex]
    assert len(keys) == len(set(keys))
    assert sorted(r["seq"] for r in ex) == list(range(1, len(ex) + 1))
    assert not [r for r in t.to_pylist() if r["kind"] == "gap"]
    names = collections.Counter(r["api_name"] for r in ex)
    for api in ("api_versions", "metadata", "create_topics", "init_producer_id", "produce", "fetch",
                "find_coordinator", "offset_commit", "describe_cluster"):
        assert names[api] >= 1, (api, names)
    for r in ex:
        assert r["api_key"] == framing.request_schema(r["api_key"], r["api_version"]).__api_key__
        assert r["client_id"]
        assert r["request_wall_ms"] > 0 and r["request_mono_ns"] > 0
        if r["status"] == "ok":
            assert r["response_mono_ns"] >= r["request_mono_ns"]
            # the stored frames carry the right correlation id
            assert int.from_bytes(r["response_bytes"][:4], "big", signed=True) == r["correlation_id"]
            assert framing.peek_request_header(r["request_bytes"])[2] == r["correlation_id"]
            assert r["decode_error"] is None, r["decode_error"]
            assert r["response_json"]
    md = [r for r in ex if r["api_name"] == "metadata" and r["status"] == "ok"]
    assert all(r["addresses_rewritten"] == 3 for r in md)


def test_trace_structured_fields(keep_trace) -> None:
    ex = [r for r in keep_trace["table"].to_pylist() if r["kind"] == "exchange" and r["status"] == "ok"]
    topic, group = keep_trace["topic"], keep_trace["group"]
    init = [r for r in ex if r["api_name"] == "init_producer_id"]
    pid = init[0]["producer_id"]
    assert pid is not None and pid >= 0
    produce = [r for r in ex if r["api_name"] == "produce"]
    assert all(r["producer_id"] == pid and r["producer_epoch"] == init[0]["producer_epoch"] for r in produce)
    assert all(topic in r["topics"] for r in produce)
    batches = [b for r in produce for b in r["batches"] if b["side"] == "request"]
    assert sum(b["record_count"] for b in batches) == 30
    assert {b["partition"] for b in batches} == {0, 1, 2}
    assert all(b["base_sequence"] >= 0 for b in batches)
    assert sorted(s for r in produce for s in r["base_sequences"]) == sorted(b["base_sequence"] for b in batches)
    resp_parts = [p for r in produce for p in r["partitions"] if p["side"] == "response"]
    assert resp_parts and all(p["error_code"] == 0 and p["base_offset"] >= 0 for p in resp_parts)
    fetch = [r for r in ex if r["api_name"] == "fetch"]
    hw = [p["high_watermark"] for r in fetch for p in r["partitions"] if p["side"] == "response"]
    assert max(hw) >= 10
    assert any(p["fetch_offset"] == 0 for r in fetch for p in r["partitions"] if p["side"] == "request")
    commit = [r for r in ex if r["api_name"] == "offset_commit"]
    assert commit and commit[0]["group_id"] == group
    assert {p["partition"] for p in commit[0]["partitions"] if p["side"] == "request"} == {0, 1, 2}
    fc = [r for r in ex if r["api_name"] == "find_coordinator"]
    assert any(r["group_id"] == group for r in fc)


@pytest.mark.parametrize("mode", ["hash", "drop"])
def test_payload_policy_through_the_proxy(cluster, tmp_path, mode) -> None:
    writer = TraceWriter(str(tmp_path), mode, flush_seconds=0.1).start()
    secret = f"SECRET{uuid.uuid4().hex[:6]}-"
    with ThreadedCaptureProxy(cluster.bootstrap_servers.split(",")[0], sink=writer) as proxy:
        got, _ = run_clients(proxy.bootstrap_servers, unique(f"pl-{mode}"), n=9, value_prefix=secret)
    assert len(got) == 9
    writer.close()
    t, _ = read_trace(str(tmp_path))
    rows = t.to_pylist()
    for r in rows:
        for col in ("request_bytes", "response_bytes"):
            assert secret.encode() not in (r[col] or b"")
        for col in ("request_json", "response_json"):
            assert secret not in (r[col] or "")
    values = []
    for r in rows:
        if r["api_name"] == "produce" and r["status"] == "ok":
            req = framing.decode_request(r["request_bytes"])
            for td in req.body.topic_data:
                for pd in td.partition_data:
                    for b in rec.decode_batches(pd.records):
                        assert b.header.base_sequence >= 0
                        values += [(x.key, x.value, x.headers) for x in b.records]
        if r["api_name"] == "fetch" and r["status"] == "ok":
            _, body = framing.decode_response(r["response_bytes"], 1, r["api_version"])
            for tr in body.responses:
                for pr in tr.partitions:
                    rec.decode_batches(pr.records)  # still valid batches (CRC recomputed)
    assert len(values) == 9
    if mode == "hash":
        want = {(hashlib.sha256(f"k{i}".encode()).digest(), hashlib.sha256(f"{secret}{i}".encode()).digest())
                for i in range(9)}
        assert {(k, v) for k, v, _ in values} == want
        assert all(h == (("h", hashlib.sha256(b"hv").digest()),) for _, _, h in values)
    else:
        assert all(k is None and v is None and h == () for k, v, h in values)


# --- unit level: rewriting, SASL, acks=0, back-pressure ---------------------------------------


def _resp(api_key: int, version: int, **fields):
    return payloads.build(framing.response_schema(api_key, version), **fields)


def _nested_resp(api_key: int, version: int, name: str, **fields):
    return payloads.build(payloads.nested(framing.response_schema(api_key, version), name), **fields)


def test_rewrite_covers_every_endpoint_carrier() -> None:
    table = {("b", 9092): ("p", 1), ("c", 9093): ("p", 2)}
    m = table.get
    fc3 = _resp(10, 3, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None, node_id=1,
                host="b", port=9092)
    new, n = address_rewrite.rewrite(fc3, m)
    assert (new.host, new.port, n) == ("p", 1, 1)
    err = _resp(10, 3, throttle_time=datetime.timedelta(0), error_code=ErrorCode(15), error_message=None, node_id=-1,
                host="", port=-1)
    assert address_rewrite.rewrite(err, m) == (err, 0)
    fetch = _resp(1, 16, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0, responses=(),
                  node_endpoints=(_nested_resp(1, 16, "NodeEndpoint", node_id=2, host="c", port=9093, rack=None),))
    new, n = address_rewrite.rewrite(fetch, m)
    assert n == 1 and new.node_endpoints[0].port == 2
    for key, ver in ((0, 10), (1, 16), (3, 12), (10, 0), (10, 5), (60, 0), (78, 1), (79, 1)):
        assert address_rewrite.needs_rewrite_check(key, ver), (key, ver)
    for key, ver in ((0, 9), (1, 15), (18, 3), (8, 8)):
        assert not address_rewrite.needs_rewrite_check(key, ver), (key, ver)


def _exchange(req_payload, resp_payload, corr=7) -> RawExchange:
    req = framing.encode_request(req_payload, corr)[4:]
    resp = None if resp_payload is None else framing.encode_response(resp_payload, corr)[4:]
    k, v, c = framing.peek_request_header(req)
    return RawExchange(seq=1, connection_id=1, listener="l", upstream="u", client_host="h", client_port=1,
                       api_key=k, api_version=v, correlation_id=c, request_mono_ns=1, request_wall_ms=1,
                       request_frame=req, response_mono_ns=2, response_wall_ms=2, response_frame=resp)


def test_sasl_authenticate_payloads_are_never_written() -> None:
    req = payloads.build(framing.request_schema(36, 2), auth_bytes=b"\x00user\x00hunter2")
    resp = _resp(36, 2, error_code=ErrorCode.none, error_message=None, auth_bytes=b"server-token-hunter2",
                 session_lifetime=datetime.timedelta(0))
    row = build_row(_exchange(req, resp), "keep")
    assert row["request_bytes"] is None and row["response_bytes"] is None
    assert "hunter2" not in row["request_json"] and "hunter2" not in row["response_json"]
    assert row["api_name"] == "sasl_authenticate"


def test_produce_acks_peek() -> None:
    for version in (3, 7, 9, 11):
        for acks in (0, 1, -1):
            p = payloads.build(framing.request_schema(0, version), transactional_id="tx" if version > 5 else None,
                               acks=acks, timeout=datetime.timedelta(seconds=1), topic_data=())
            assert produce_acks(framing.encode_request(p, 3)[4:], version) == acks


class SlowSink:
    """Refuses the first `refuse` offers: the proxy must wait, not drop."""

    def __init__(self, refuse: int) -> None:
        self.refuse = refuse
        self.items: list = []
        self.gaps: list = []

    def offer(self, item) -> bool:
        if self.refuse > 0:
            self.refuse -= 1
            return False
        self.items.append(item)
        return True

    def record_gap(self, count, reason, connection_id=None) -> None:
        self.gaps.append((count, reason))


def test_backpressure_waits_instead_of_dropping(cluster) -> None:
    sink = SlowSink(refuse=20)
    with ThreadedCaptureProxy(cluster.bootstrap_servers.split(",")[0], sink=sink) as proxy:
        host, port = proxy.bootstrap_servers.split(":")
        with RawClient(host, int(port)) as raw:
            for _ in range(5):
                raw.api_versions()
        deadline = time.monotonic() + 5
        while len(sink.items) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.proxy.stats.backpressure_waits >= 1
    assert len(sink.items) == 5 and sink.gaps == []


def test_gap_recorded_when_max_block_exceeded(cluster) -> None:
    sink = SlowSink(refuse=10**9)
    with ThreadedCaptureProxy(cluster.bootstrap_servers.split(",")[0], sink=sink, max_block_s=0.05) as proxy:
        host, port = proxy.bootstrap_servers.split(":")
        with RawClient(host, int(port)) as raw:
            raw.api_versions()
            raw.api_versions()
    assert sink.items == []
    assert [c for c, _ in sink.gaps] == [1, 1]
    assert "backlog" in sink.gaps[0][1]


def test_proxy_listen_port_sequence(cluster) -> None:
    async def go():
        p = CaptureProxy(cluster.bootstrap_servers, "127.0.0.1:0")
        await p.start()
        try:
            return p.bootstrap_servers
        finally:
            await p.stop()

    assert len(asyncio.run(go()).split(",")) == 3


def _req(api_key: int, version: int, **fields):
    return payloads.build(framing.request_schema(api_key, version), **fields)


def _nested_req(api_key: int, version: int, name: str, **fields):
    return payloads.build(payloads.nested(framing.request_schema(api_key, version), name), **fields)


def test_share_fetch_fields_are_extracted() -> None:
    tid = uuid.uuid4()
    ack = _nested_req(78, 1, "AcknowledgementBatch", first_offset=3, last_offset=4, acknowledge_types=(1, 2))
    req = _req(78, 1, group_id="sg", member_id="m-1", share_session_epoch=2, max_wait=datetime.timedelta(0),
               min_bytes=1, max_bytes=1000, max_records=10, batch_size=10,
               topics=(_nested_req(78, 1, "FetchTopic", topic_id=tid, partitions=(
                   _nested_req(78, 1, "FetchPartition", partition_index=1, acknowledgement_batches=(ack,)),)),),
               forgotten_topics_data=())
    batch = rec.build_batch([rec.NewRecord(value=b"v", key=b"k")], base_offset=5)
    acq = _nested_resp(78, 1, "AcquiredRecords", first_offset=5, last_offset=5, delivery_count=1)
    part = _nested_resp(78, 1, "PartitionData", partition_index=1, error_code=ErrorCode.none, error_message=None,
                        acknowledge_error_code=ErrorCode.none, acknowledge_error_message=None,
                        current_leader=_nested_resp(78, 1, "LeaderIdAndEpoch", leader_id=1, leader_epoch=0),
                        records=batch, acquired_records=(acq,))
    resp = _resp(78, 1, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None,
                 acquisition_lock_timeout=datetime.timedelta(seconds=30),
                 responses=(_nested_resp(78, 1, "ShareFetchableTopicResponse", topic_id=tid, partitions=(part,)),),
                 node_endpoints=())
    row = build_row(_exchange(req, resp), "hash")
    assert row["decode_error"] is None, row["decode_error"]
    assert (row["group_id"], row["member_id"], row["share_session_epoch"]) == ("sg", "m-1", 2)
    assert row["topic_ids"] == [str(tid)]
    assert row["acknowledgement_batches"] == [{"side": "request", "topic_id": str(tid), "partition": 1,
                                               "first_offset": 3, "last_offset": 4, "acknowledge_types": [1, 2]}]
    assert row["acquired_records"] == [{"topic_id": str(tid), "partition": 1, "first_offset": 5, "last_offset": 5,
                                        "delivery_count": 1}]
    assert [b["base_offset"] for b in row["batches"]] == [5]
    _, body = framing.decode_response(row["response_bytes"], 78, 1)
    [r] = rec.decode_batches(body.responses[0].partitions[0].records)[0].records
    assert (r.key, r.value, r.offset) == (hashlib.sha256(b"k").digest(), hashlib.sha256(b"v").digest(), 5)


def test_purpose_specific_error_codes_are_collected() -> None:
    """error_codes holds `*_error_code` fields too: a ShareFetch acknowledgement error."""
    tid = uuid.uuid4()
    req = _req(78, 1, group_id="sg", member_id="m-1", share_session_epoch=1, max_wait=datetime.timedelta(0),
               min_bytes=1, max_bytes=1000, max_records=10, batch_size=10, topics=(), forgotten_topics_data=())
    part = _nested_resp(78, 1, "PartitionData", partition_index=0, error_code=ErrorCode.none, error_message=None,
                        acknowledge_error_code=ErrorCode.invalid_record_state, acknowledge_error_message=None,
                        current_leader=_nested_resp(78, 1, "LeaderIdAndEpoch", leader_id=1, leader_epoch=0),
                        records=b"", acquired_records=())
    resp = _resp(78, 1, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None,
                 acquisition_lock_timeout=datetime.timedelta(seconds=30),
                 responses=(_nested_resp(78, 1, "ShareFetchableTopicResponse", topic_id=tid, partitions=(part,)),),
                 node_endpoints=())
    row = build_row(_exchange(req, resp), "keep")
    assert row["error_codes"] == [int(ErrorCode.invalid_record_state)]


def test_fetch_aborted_transactions_and_lso_are_extracted() -> None:
    aborted = _nested_resp(1, 12, "AbortedTransaction", producer_id=7, first_offset=2)
    part = _nested_resp(1, 12, "PartitionData", partition_index=0, error_code=ErrorCode.none, high_watermark=10,
                        last_stable_offset=2, log_start_offset=0, aborted_transactions=(aborted,),
                        preferred_read_replica=-1, records=None)
    resp = _resp(1, 12, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
                 responses=(_nested_resp(1, 12, "FetchableTopicResponse", topic="t", partitions=(part,)),))
    req = _req(1, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1000, isolation_level=1,
               session_id=0, session_epoch=-1, topics=(), forgotten_topics_data=(), rack_id="")
    row = build_row(_exchange(req, resp), "keep")
    assert row["aborted_transactions"] == [{"topic": "t", "topic_id": None, "partition": 0, "producer_id": 7,
                                            "first_offset": 2}]
    [p] = [p for p in row["partitions"] if p["side"] == "response"]
    assert (p["topic"], p["high_watermark"], p["last_stable_offset"]) == ("t", 10, 2)
    assert row["producer_id"] is None  # the aborted producer is not "the" producer of the exchange


def test_find_coordinator_keys() -> None:
    row = build_row(_exchange(_req(10, 4, key_type=1, coordinator_keys=("tx-1",)), None), "keep")
    assert row["transactional_id"] == "tx-1" and row["group_id"] is None
    row = build_row(_exchange(_req(10, 3, key="g-1", key_type=0), None), "keep")
    assert row["group_id"] == "g-1"


def test_slow_trace_writer_backpressures_without_gaps(cluster, tmp_path, monkeypatch) -> None:
    writer = TraceWriter(str(tmp_path), "keep", queue_size=1, flush_seconds=0.05)
    original = writer._add

    def slow_add(item):
        time.sleep(0.02)
        original(item)

    monkeypatch.setattr(writer, "_add", slow_add)
    writer.start()
    with ThreadedCaptureProxy(cluster.bootstrap_servers.split(",")[0], sink=writer) as proxy:
        host, port = proxy.bootstrap_servers.split(":")
        with RawClient(host, int(port)) as raw:
            # pipeline 20 requests: responses arrive faster than the writer takes them
            for i in range(20):
                raw.send_frame(framing.encode_request(_req(18, 3, client_software_name="t",
                                                           client_software_version="1"), 100 + i),
                               expect_response=False)
            for i in range(20):
                assert int.from_bytes(raw.read_frame()[:4], "big") == 100 + i
        stats = proxy.proxy.stats
    writer.close()
    assert stats.backpressure_waits >= 1
    t, _ = read_trace(str(tmp_path))
    assert t["kind"].to_pylist().count("exchange") == 20 and "gap" not in t["kind"].to_pylist()
    assert sorted(t["correlation_id"].to_pylist()) == list(range(100, 120))


def test_transactional_producer_through_the_proxy(cluster, tmp_path) -> None:
    writer = TraceWriter(str(tmp_path), "keep", flush_seconds=0.1).start()
    topic, txid = unique("txp"), unique("tx")
    with ThreadedCaptureProxy(cluster.bootstrap_servers.split(",")[0], sink=writer) as proxy:
        bs = proxy.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(10)
        p = Producer({"bootstrap.servers": bs, "transactional.id": txid})
        p.init_transactions(10)
        p.begin_transaction()
        for i in range(4):
            p.produce(topic, value=b"x%d" % i, partition=i % 2)
        p.commit_transaction(10)
        p.flush(5)
        del p
    writer.close()
    t, _ = read_trace(str(tmp_path))
    ex = [r for r in t.to_pylist() if r["kind"] == "exchange" and r["status"] == "ok"]
    names = {r["api_name"] for r in ex}
    assert {"find_coordinator", "init_producer_id", "add_partitions_to_txn", "produce", "end_txn"} <= names
    for api in ("init_producer_id", "add_partitions_to_txn", "end_txn", "produce"):
        rows = [r for r in ex if r["api_name"] == api]
        assert all(r["transactional_id"] == txid for r in rows), api
    pid = next(r["producer_id"] for r in ex if r["api_name"] == "init_producer_id")
    assert pid >= 0
    produce = [r for r in ex if r["api_name"] == "produce"]
    assert all(b["transactional"] and b["producer_id"] == pid for r in produce for b in r["batches"]
               if b["side"] == "request")
    assert {r["api_name"] for r in ex if r["transactional_id"] == txid and r["producer_id"] is not None} >= {"end_txn"}
