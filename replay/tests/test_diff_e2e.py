"""End to end: the same confluent-kafka + share-group workload recorded several times
through the capture proxy against fresh reference brokers, then `kipcheck diff`.

Clean runs of the same target agree once noise learned from a third run is cancelled;
a broker configured differently (share-group heartbeat interval) is found, with the
field, the requirement id and sample exchanges in a readable report."""

from __future__ import annotations

import json
import os
import time

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reference_impl.client.share_consumer import ShareConsumer
from reference_impl.model.broker_state import BrokerConfig
from reference_impl.server.broker_server import ThreadedReferenceCluster
from replay.diff_cmd import main as diff_main
from replay.proxy import ThreadedCaptureProxy
from replay.trace_writer import TraceWriter

TOPIC, SHARE_TOPIC, GROUP, SHARE_GROUP = "kc-orders", "kc-jobs", "kc-group", "kc-share-group"


def _txn_producer(bootstrap: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "client.id": "kc-txn-producer", "transactional.id": "kc-txn",
                  "linger.ms": 0})
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(5):
        p.produce(TOPIC, key=b"k%d" % i, value=b"committed-%d" % i, partition=0)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(2):
        p.produce(TOPIC, value=b"aborted-%d" % i, partition=0)
    p.abort_transaction(15)


def _read_committed(bootstrap: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "client.id": "kc-consumer", "group.id": GROUP,
                  "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def _share_group(bootstrap: str) -> list[bytes]:
    sc = ShareConsumer(bootstrap, SHARE_GROUP, client_id="kc-share")
    try:
        sc.subscribe([SHARE_TOPIC])
        deadline = time.monotonic() + 20
        while not sc.assignment and time.monotonic() < deadline:
            sc.poll(100)
        p = Producer({"bootstrap.servers": bootstrap, "client.id": "kc-plain", "linger.ms": 0})
        for i in range(5):
            p.produce(SHARE_TOPIC, value=b"job-%d" % i, partition=0)
        assert p.flush(10) == 0
        got: list[bytes] = []
        while len(got) < 5 and time.monotonic() < deadline:
            got += [r.value for r in sc.poll(500)]
        sc.commit_sync()
        return got
    finally:
        sc.close()


def workload(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kc-admin"})
    for fut in admin.create_topics([NewTopic(TOPIC, 1, 1), NewTopic(SHARE_TOPIC, 1, 1)]).values():
        fut.result(10)
    _txn_producer(bootstrap)
    assert _read_committed(bootstrap) == [b"committed-%d" % i for i in range(5)]
    assert sorted(_share_group(bootstrap)) == [b"job-%d" % i for i in range(5)]


def record(directory: str, config: BrokerConfig | None = None) -> str:
    """One run of the workload through the capture proxy against a fresh reference broker."""
    with ThreadedReferenceCluster(brokers=1, config=config) as cluster:
        writer = TraceWriter(directory, "keep", flush_seconds=0.1).start()
        try:
            with ThreadedCaptureProxy(cluster.bootstrap_servers, sink=writer) as proxy:
                workload(proxy.bootstrap_servers)
        finally:
            writer.close()
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("diff-e2e")
    return {
        "a": record(str(base / "a")),
        "b": record(str(base / "b")),
        "noise": record(str(base / "noise")),
        "other": record(str(base / "other"), BrokerConfig(group_share_heartbeat_interval_ms=4_000)),
        "base": base,
    }


def _summary(out: str) -> dict:
    with open(os.path.join(out, "summary.json")) as fh:
        return json.load(fh)


def test_two_clean_runs_agree_after_noise_cancellation(runs) -> None:
    out = str(runs["base"] / "report-clean")
    assert diff_main([runs["a"], runs["b"], "--noise", runs["noise"], "--out", out, "--engine", "pure"]) == 0
    s = _summary(out)
    assert s["divergences"]["rows"] == 0, s["divergences"]["groups"]
    al = s["alignment"]
    assert al["pairs_connection"] + al["pairs_client"] >= 30
    # the runs really differed (ids, timings); what differs between two clean runs is noise
    learned = {(e["api_name"], e["field"]) for e in s["noise"]["learned"]}
    assert all(api for api, _ in learned)


def test_differently_configured_broker_is_found(runs) -> None:
    out = str(runs["base"] / "report-other")
    assert diff_main([runs["a"], runs["other"], "--noise", runs["noise"], "--out", out, "--engine", "pure"]) == 1
    s = _summary(out)
    groups = {(g["api_name"], g["field"]): g for g in s["divergences"]["groups"]}
    g = groups[("share_group_heartbeat", "json:heartbeat_interval")]
    assert g["requirement_ids"] == ["KIP-932.HB.004"]
    assert {(x["a_value"], x["b_value"]) for x in g["samples"]} == {("5000", "4000")}
    table = pq.read_table(os.path.join(out, "divergences.parquet")).to_pylist()
    assert any(r["field"] == "json:heartbeat_interval" and not r["noise"] for r in table)
    md = open(os.path.join(out, "summary.md")).read()
    assert "json:heartbeat_interval" in md and "KIP-932.HB.004" in md
    assert "<table>" in open(os.path.join(out, "summary.html")).read()
