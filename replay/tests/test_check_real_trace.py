"""`kipcheck check` over clean traces of real workloads gives zero violations.

A transactional producer (confluent-kafka: committed and aborted transactions, offsets sent
to the transaction), a read_committed consumer that commits offsets, and a share consumer
(the reference client, explicit acks with accept/release/reject) run through the capture
proxy. The recorded trace must give no violation with the pure checker and with Spark.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients import wire
from reference_impl.client.raw_client import ClusterClient
from reference_impl.client.share_consumer import AcknowledgeType, ShareConsumer
from replay.proxy import ThreadedCaptureProxy
from replay.trace_writer import TraceWriter
from reference_impl.protocol.api_keys import ApiKey
from replay import check_cmd
from replay.check_pure import Normalizer, check_table, exchange_rows
from replay.trace_reader import read_trace
from targets.factory import create_target

INCREMENTAL_ALTER_CONFIGS, GROUP_RESOURCE, SET = ApiKey.INCREMENTAL_ALTER_CONFIGS, 32, 0


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def set_share_reset_earliest(bootstrap: str, group: str) -> None:
    with ClusterClient(bootstrap) as cc:
        r = wire.Req(cc.bootstrap, INCREMENTAL_ALTER_CONFIGS, 1)
        resp = r.send(
            resources=(r.part("AlterConfigsResource", resource_type=GROUP_RESOURCE, resource_name=group,
                              configs=(r.part("AlterableConfig", name="share.auto.offset.reset",
                                              config_operation=SET, value="earliest"),)),),
            validate_only=False)
        assert int(resp.responses[0].error_code) == 0


def transactional_workload(bootstrap: str, topic: str, group: str, txns: int = 6) -> None:
    """Committed and aborted transactions, each also committing consumer offsets."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": uid("tx"), "linger.ms": 2})
    p.init_transactions(30)
    meta = Consumer({"bootstrap.servers": bootstrap, "group.id": group}).consumer_group_metadata()
    for i in range(txns):
        p.begin_transaction()
        for j in range(5):
            p.produce(topic, value=f"t{i}-{j}".encode(), partition=j % 2)
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 10 * (i + 1))], meta, 30)
        if i % 3 == 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    p.flush(10)


def read_committed_consumer(bootstrap: str, topic: str, want: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uid("rc"), "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got, deadline = 0, time.monotonic() + 30
    while got < want and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += 1
    c.commit(asynchronous=False)
    c.close()
    return got


def share_workload(bootstrap: str, topic: str, group: str, want: int) -> int:
    """Explicit acks: accept most records, release some (redelivered), reject some."""
    sc = ShareConsumer(bootstrap, group, "explicit")
    sc.subscribe([topic])
    seen: set[tuple[int, int]] = set()
    done = 0
    deadline = time.monotonic() + 40
    while done < want and time.monotonic() < deadline:
        for r in sc.poll(300):
            key = (r.partition, r.offset)
            if r.offset % 7 == 3 and key not in seen:
                sc.acknowledge(r, AcknowledgeType.RELEASE)
            elif r.offset % 11 == 5:
                sc.acknowledge(r, AcknowledgeType.REJECT)
                done += 1
            else:
                sc.acknowledge(r, AcknowledgeType.ACCEPT)
                done += 1
            seen.add(key)
        sc.commit_sync()
    sc.close()
    return done


def record_workload(upstream: str, out_dir: str) -> dict:
    """Run the three workloads through a capture proxy in front of `upstream`."""
    writer = TraceWriter(out_dir, "drop", flush_seconds=0.1).start()
    topic, share_topic, group, share_group = uid("txn"), uid("shr"), uid("g"), uid("sg")
    with ThreadedCaptureProxy(upstream, sink=writer) as proxy:
        bs = proxy.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        for t in admin.create_topics([NewTopic(topic, 2, 1), NewTopic(share_topic, 2, 1)]).values():
            t.result(20)
        set_share_reset_earliest(bs, share_group)
        transactional_workload(bs, topic, group)
        committed = read_committed_consumer(bs, topic, want=20)
        p = Producer({"bootstrap.servers": bs, "linger.ms": 2})
        for i in range(40):
            p.produce(share_topic, value=f"s{i}".encode(), partition=i % 2)
        p.flush(10)
        shared = share_workload(bs, share_topic, share_group, want=40)
    writer.close()
    return {"committed_read": committed, "share_done": shared}


def coverage(table) -> dict[str, int]:
    """What the rules had to look at in a trace (so a clean verdict is not vacuous)."""
    n = Normalizer(exchange_rows(table))
    kinds = Counter(e["kind"] for e in n.share_events()) + Counter(e["kind"] for e in n.group_events())
    return {"txn": len(n.txn_events()), "aborted_ranges": len(n.aborted_ranges()), "sessions": len(n.session_events()),
            **kinds}


def assert_covers_every_entity_kind(table) -> None:
    c = coverage(table)
    assert c["txn"] >= 20 and c["aborted_ranges"] >= 1 and c["sessions"] >= 4, c
    assert c["acq"] >= 2 and c["ack"] >= 2 and c["txn_commit"] >= 6 and c["txn_end"] >= 6 and c["fetch"] >= 1, c


@pytest.fixture(scope="module")
def kafka_trace(tmp_path_factory):
    target = create_target("kafka-native")
    target.start()
    try:
        d = tmp_path_factory.mktemp("kafka-trace")
        done = record_workload(target.bootstrap_servers.split(",")[0], str(d))
    finally:
        target.stop()
    return str(d), done


def test_clean_trace_of_real_kafka_has_no_violation(kafka_trace, tmp_path):
    path, done = kafka_trace
    assert done == {"committed_read": 20, "share_done": 40}
    table, report = read_trace(path)
    assert report.skipped == []
    assert_covers_every_entity_kind(table)
    assert check_table(table) == []
    assert check_cmd.main([path, "--out", str(tmp_path / "rep"), "--engine", "pure"]) == 0
