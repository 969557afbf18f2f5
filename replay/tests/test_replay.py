"""kipcheck replay end to end: workloads recorded through the capture proxy are replayed
into a fresh cluster; the new trace must line up with the recorded one exchange by
exchange (same seq / connection / correlation id), with identifiers remapped.

Workload (confluent-kafka, plus the reference share consumer): an idempotent producer, a
transactional producer (one committed, one aborted transaction), a classic-group consumer
that commits, and a share-group consumer. The replay target gets a few producer ids
allocated first, so producer ids really differ between the two clusters.
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kio.schema.errors import ErrorCode
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reference_impl.client.raw_client import RawClient
from reference_impl.client.share_consumer import ShareConsumer
from reference_impl.protocol import framing
from reference_impl.protocol import records as rec_mod
from reference_impl.server.broker_server import ThreadedReferenceCluster
from replay import diff_cmd, replay_cmd
from replay import trace_schema as ts
from replay.proxy import ProcessTraceSink, ThreadedCaptureProxy
from replay.replayer import REPORT_FILE, replay
from replay.trace_reader import read_trace
from replay.trace_writer import Gap, RawExchange, TraceWriter, build_row, gap_row
from targets.factory import create_target


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run_workload(bootstrap: str, names: dict[str, str]) -> dict:
    """The recorded workload; returns what the clients saw."""
    topic, share_topic, group, share_group, txid = (names[k] for k in ("topic", "share_topic", "group",
                                                                         "share_group", "txid"))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 3, 1), NewTopic(share_topic, 1, 1)]).values():
        f.result(20)
    idem = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(12):
        idem.produce(topic, key=b"k%d" % i, value=b"idem-%d" % i, partition=i % 3)
    assert idem.flush(20) == 0
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid, "linger.ms": 5})
    tx.init_transactions(20)
    tx.begin_transaction()
    for i in range(4):
        tx.produce(topic, value=b"committed-%d" % i, partition=i % 3)
    tx.commit_transaction(20)
    tx.begin_transaction()
    for i in range(3):
        tx.produce(topic, value=b"aborted-%d" % i, partition=i % 3)
    tx.flush(10)
    tx.abort_transaction(20)
    del tx
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    consumed: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(consumed) < 16 and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            consumed.append(m.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    share = ShareConsumer(bootstrap, share_group, "explicit")
    share.subscribe([share_topic])
    deadline = time.monotonic() + 30
    while not share.assignment and time.monotonic() < deadline:
        share.poll(200)
    share.poll(200)  # the share partition is initialised (at the log end) by this fetch
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(6):
        p.produce(share_topic, value=b"share-%d" % i)
    assert p.flush(20) == 0
    shared = []
    deadline = time.monotonic() + 30
    while len(shared) < 6 and time.monotonic() < deadline:
        for r in share.poll(300):
            shared.append(r.value)
            share.acknowledge(r)
    share.commit_sync()
    share.close()
    return {"consumed": consumed, "shared": shared}


def record(upstream: str, out: str, names: dict[str, str]) -> dict:
    writer = TraceWriter(out, "keep", flush_seconds=0.1).start()
    with ThreadedCaptureProxy(upstream, sink=writer) as proxy:
        seen = run_workload(proxy.bootstrap_servers, names)
    writer.close()
    return seen


def burn_producer_ids(bootstrap: str, n: int = 3) -> None:
    """Allocate producer ids so the replay target's ids differ from the recording's."""
    with RawClient.connect(bootstrap) as c:
        for _ in range(n):
            r = c.request(22, 0, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60))
            assert r.error_code == 0


def rows(directory: str) -> list[dict]:
    table, _ = read_trace(directory)
    return [r for r in table.to_pylist() if r["kind"] == "exchange"]


@pytest.fixture(scope="module")
def reference_replay(tmp_path_factory):
    names = {"topic": uid("rt"), "share_topic": uid("rs"), "group": uid("g"), "share_group": uid("sg"),
             "txid": uid("tx")}
    recorded, replayed = tmp_path_factory.mktemp("recorded"), tmp_path_factory.mktemp("replayed")
    with ThreadedReferenceCluster() as source:
        seen = record(source.bootstrap_servers, str(recorded), names)
    with ThreadedReferenceCluster() as target:
        burn_producer_ids(target.bootstrap_servers)
        report = replay(str(recorded), target.bootstrap_servers, str(replayed))
    return dict(names=names, seen=seen, report=report, recorded=rows(str(recorded)),
                replayed=rows(str(replayed)), out=str(replayed), recorded_dir=str(recorded))


def assert_only_cut_off_requests_skipped(report, recorded: list[dict]) -> None:
    """A client that exits with a request in flight leaves a connection_closed row (no
    recorded outcome): the only exchanges a workload trace may not replay."""
    cut = sum(1 for r in recorded if r["status"] == "connection_closed")
    reason = "recorded connection closed before the response: no recorded outcome to compare"
    assert dict(report.not_replayed) == ({reason: cut} if cut else {}), report.summary()


def completed(rs: list[dict]) -> list[dict]:
    return [r for r in rs if r["status"] != "connection_closed"]


def by_seq(rs: list[dict]) -> dict[int, dict]:
    return {r["seq"]: r for r in rs}


def test_workload_ran(reference_replay) -> None:
    seen = reference_replay["seen"]
    assert sorted(seen["consumed"]) == sorted([b"idem-%d" % i for i in range(12)] + [b"committed-%d" % i for i in range(4)])
    assert sorted(seen["shared"]) == [b"share-%d" % i for i in range(6)]


def test_every_exchange_is_replayed_or_reported(reference_replay) -> None:
    report, rec, rep = reference_replay["report"], reference_replay["recorded"], reference_replay["replayed"]
    assert report.recorded_exchanges == len(rec)
    assert report.replayed + report.not_replayed_total == len(rec)
    assert report.problems == [], report.summary()
    assert_only_cut_off_requests_skipped(report, rec)
    assert len(rep) == report.replayed
    # aligned: same seq, connection, correlation id, api and version
    r_by, p_by = by_seq(rec), by_seq(rep)
    assert set(r_by) == set(p_by) | {r["seq"] for r in rec if r["status"] == "connection_closed"}
    for seq, p in p_by.items():
        r = r_by[seq]
        key = ("connection_id", "correlation_id", "api_key", "api_version", "status")
        assert tuple(p[k] for k in key) == tuple(r[k] for k in key), seq
        assert p["decode_error"] is None, (seq, p["decode_error"])
    # connections open in the recorded order (a diff numbers a client's connections so)
    def opening_order(rs):
        first: dict[int, int] = {}
        for r in rs:
            first[r["connection_id"]] = min(first.get(r["connection_id"], r["request_mono_ns"]), r["request_mono_ns"])
        return sorted(first, key=lambda c: (first[c], c))
    assert opening_order(rep) == opening_order(completed(rec))
    saved = json.load(open(os.path.join(reference_replay["out"], REPORT_FILE)))
    assert saved["replayed"] == report.replayed and saved["ok"] is report.ok


def test_responses_line_up(reference_replay) -> None:
    rec, rep = by_seq(completed(reference_replay["recorded"])), by_seq(reference_replay["replayed"])
    diffs = []
    for seq, r in rec.items():
        p = rep[seq]
        # Retriable answers are timing: the reference too answers CONCURRENT_TRANSACTIONS to an
        # AddPartitionsToTxn sent while the last transaction's markers are in flight (seen in CI
        # when recording; the replay came later): compare the decisive codes.
        if (_decisive(_listed(r["error_code"])), _decisive(r["error_codes"])) != (
                _decisive(_listed(p["error_code"])), _decisive(p["error_codes"])):
            diffs.append((seq, r["api_name"], r["error_code"], r["error_codes"], p["error_code"], p["error_codes"]))
    assert diffs == []
    names = collections.Counter(r["api_name"] for r in rec.values())
    for api in ("init_producer_id", "produce", "add_partitions_to_txn", "end_txn", "join_group", "sync_group",
                "offset_commit", "fetch", "share_group_heartbeat", "share_fetch"):
        assert names[api] >= 1, (api, names)


def test_recording_diffs_against_its_replay_with_no_divergence(reference_replay, tmp_path, capsys) -> None:
    """`kipcheck diff` of a recording against its own replay: every id the broker made up
    (producer ids, member ids, the JoinGroup leader, topic ids, sessions) is remapped or
    numbered, so a correct replay shows no divergence (issue 24, item 4) but those its timing
    explains, as the other tests here allow them: a read_committed Fetch that found the
    markers not yet written (a lower LSO, assert_fetch_lines_up) and a retriable error code."""
    out = tmp_path / "diff"
    code = diff_cmd.main([reference_replay["recorded_dir"], reference_replay["out"], "--out", str(out),
                          "--engine", "pure"])
    rows = pq.read_table(out / "divergences.parquet").to_pylist() if (out / "divergences.parquet").exists() else []
    rec, rep = by_seq(reference_replay["recorded"]), by_seq(reference_replay["replayed"])
    unexplained = [r for r in rows if not _replay_timing(r, rec, rep)]
    assert code in (0, 1) and unexplained == [], [
        {k: r.get(k) for k in ("api_name", "path", "a_value", "b_value", "a_seq")} for r in unexplained][:20]


def _replay_timing(div: dict, rec: dict[int, dict], rep: dict[int, dict]) -> bool:
    a, b = rec.get(div.get("a_seq")), rep.get(div.get("b_seq"))
    if a is None or b is None:
        return False
    if div["api_name"] == "fetch":
        def lso(r: dict) -> dict[int, int]:
            return {p["partition"]: p["last_stable_offset"] for p in r["partitions"] if p["side"] == "response"}
        return any(lso(b).get(p, v) < v for p, v in lso(a).items())
    if "error_code" in div["path"]:
        return (_decisive(_listed(a["error_code"])), _decisive(a["error_codes"])) == (
            _decisive(_listed(b["error_code"])), _decisive(b["error_codes"]))
    return False


def test_producer_ids_are_remapped(reference_replay) -> None:
    rec, rep = by_seq(completed(reference_replay["recorded"])), by_seq(reference_replay["replayed"])
    produce = [s for s, r in rec.items() if r["api_name"] == "produce" and r["status"] == "ok"]
    assert produce
    mapping = {(m["recorded"][0]): m["target"][0] for m in reference_replay["report"].mappings["producers"]}
    assert mapping and all(k != v for k, v in mapping.items())
    for s in produce:
        rb = [b for b in rec[s]["batches"] if b["side"] == "request"]
        pb = [b for b in rep[s]["batches"] if b["side"] == "request"]
        assert [mapping.get(b["producer_id"], -1) for b in rb] == [b["producer_id"] for b in pb]
        assert [b["base_sequence"] for b in rb] == [b["base_sequence"] for b in pb]
        assert [b["transactional"] for b in rb] == [b["transactional"] for b in pb]
        # offsets assigned by the target equal the recorded ones
        ro = [p["base_offset"] for p in rec[s]["partitions"] if p["side"] == "response"]
        po = [p["base_offset"] for p in rep[s]["partitions"] if p["side"] == "response"]
        assert ro == po
    for s, r in rec.items():
        if r["api_name"] in ("end_txn", "add_partitions_to_txn") and r["producer_id"] is not None:
            assert rep[s]["producer_id"] == mapping[r["producer_id"]]


def assert_fetch_lines_up(recorded: dict, replayed: dict, fetched) -> None:
    """A read_committed Fetch replayed holds the recorded batches up to its partition's LSO.

    The replayer waits for the recorded EndTxn's answer, not for the markers the coordinator
    writes after answering (KIP-98: WriteTxnMarkers runs after EndTxn returns), so under load a
    replayed Fetch can find the abort's markers not yet written and a lower LSO. Per partition,
    below the lower of the two LSOs both answers hold the same batches, and the answer with the
    lower LSO holds nothing beyond it: equal LSOs, equal batches."""
    def lso(r: dict) -> dict[int, int]:
        return {p["partition"]: p["last_stable_offset"] for p in r["partitions"] if p["side"] == "response"}

    rec_lso, rep_lso = lso(recorded), lso(replayed)
    assert rec_lso.keys() == rep_lso.keys(), recorded["seq"]
    for p, (a, b) in {p: (rec_lso[p], rep_lso[p]) for p in rec_lso}.items():
        ra = [x for x in fetched(recorded) if x[0] == p]
        rb = [x for x in fetched(replayed) if x[0] == p]
        low = min(a, b)
        assert [x for x in ra if x[1] < low] == [x for x in rb if x[1] < low], (recorded["seq"], p, a, b)
        for lso_of_side, batches in ((a, ra), (b, rb)):
            if lso_of_side == low:
                assert all(x[1] < low for x in batches), (recorded["seq"], p, a, b)


def test_consumer_and_share_results_line_up(reference_replay) -> None:
    rec, rep = by_seq(completed(reference_replay["recorded"])), by_seq(reference_replay["replayed"])
    topic_ids = reference_replay["report"].mappings["topic_ids"]
    assert topic_ids  # the reference derives topic ids from names: identical here, different from Kafka's
    share = [s for s, r in rec.items() if r["api_name"] == "share_fetch"]
    acquired = 0
    for s in share:
        ra = [(topic_ids[a["topic_id"]], a["partition"], a["first_offset"], a["last_offset"], a["delivery_count"])
              for a in rec[s]["acquired_records"]]
        replayed = [(a["topic_id"], a["partition"], a["first_offset"], a["last_offset"], a["delivery_count"])
                    for a in rep[s]["acquired_records"]]
        assert ra == replayed, s
        acquired += sum(a[3] - a[2] + 1 for a in ra)
    assert acquired == 6
    fetch = [s for s, r in rec.items() if r["api_name"] == "fetch"]
    def fetched(r):
        return sorted((b["partition"], b["base_offset"], b["record_count"], b["control"]) for b in r["batches"]
                      if b["side"] == "response")
    assert sum(len(fetched(rec[s])) for s in fetch) > 0
    for s in fetch:
        assert_fetch_lines_up(rec[s], rep[s], fetched)
    commits = [s for s, r in rec.items() if r["api_name"] == "offset_commit"]
    assert commits and all(rep[s]["error_codes"] == [] for s in commits)


def test_gap_and_sasl_rows_are_reported_not_skipped(reference_replay, tmp_path) -> None:
    """A trace with a gap row and a SaslAuthenticate exchange: both are counted in the
    report with their reasons, the rest is replayed."""
    src = tmp_path / "src"
    src.mkdir()
    req = framing.encode_request(framing.request_schema(18, 3)(client_software_name="x",
                                                              client_software_version="1"), 5)[4:]
    sasl = framing.encode_request(framing.request_schema(36, 2)(auth_bytes=b"secret"), 6)[4:]
    common = dict(connection_id=1, listener="l", upstream="u:1", client_host="h", client_port=1,
                  request_wall_ms=1)
    xs = [RawExchange(seq=1, api_key=18, api_version=3, correlation_id=5, request_mono_ns=10,
                      request_frame=req, **common),
          RawExchange(seq=2, api_key=36, api_version=2, correlation_id=6, request_mono_ns=20,
                      request_frame=sasl, **common)]
    table = pa.Table.from_pylist([build_row(x, "keep") for x in xs] + [gap_row(Gap(3, "test gap"))],
                                 schema=ts.schema())
    pq.write_table(table, str(src / "trace-x-00001.parquet"))
    with ThreadedReferenceCluster() as target:
        report = replay(str(src), target.bootstrap_servers, str(tmp_path / "out"))
    assert report.replayed == 1
    assert report.not_replayed["gap in the recorded trace: test gap"] == 3
    assert any("SASL" in k for k in report.not_replayed)
    assert not report.ok


# --- CLI: bad input --------------------------------------------------------------------------------


def test_cli_missing_trace_dir_fails_before_starting_a_target(tmp_path, capsys) -> None:
    rc = replay_cmd.main([str(tmp_path / "nope"), "--target", "external:127.0.0.1:1", "--out", str(tmp_path / "o")])
    assert rc == 2
    err = capsys.readouterr().err
    assert f"trace directory {tmp_path / 'nope'} does not exist" in err and "127.0.0.1:1" not in err


def test_cli_missing_trace_with_reachable_target(tmp_path, capsys) -> None:
    with ThreadedReferenceCluster() as c:
        rc = replay_cmd.main([str(tmp_path / "nope"), "--target", f"external:{c.bootstrap_servers}",
                              "--out", str(tmp_path / "o")])
    assert rc == 2
    assert f"trace directory {tmp_path / 'nope'} does not exist" in capsys.readouterr().err


def test_cli_corrupt_segment_named(tmp_path, capsys) -> None:
    bad = tmp_path / "t"
    bad.mkdir()
    (bad / "trace-x-00001.parquet").write_bytes(b"PAR1" + b"\x00" * 40)
    with ThreadedReferenceCluster() as c:
        rc = replay_cmd.main([str(bad), "--target", f"external:{c.bootstrap_servers}", "--out", str(tmp_path / "o")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "trace-x-00001.parquet" in err and "corrupt" in err


def test_cli_unreachable_target(reference_replay, tmp_path, capsys) -> None:
    rc = replay_cmd.main([reference_replay["recorded_dir"], "--target", "external:127.0.0.1:1",
                          "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "127.0.0.1:1" in capsys.readouterr().err


def test_cli_refuses_output_holding_a_trace(reference_replay, tmp_path, capsys) -> None:
    with ThreadedReferenceCluster() as c:
        rc = replay_cmd.main([reference_replay["out"], "--target", f"external:{c.bootstrap_servers}",
                              "--out", reference_replay["out"]])
    assert rc == 2
    assert "already holds a trace" in capsys.readouterr().err


# --- the end to end: kafka-native recording replayed onto the reference ------------------


@pytest.fixture(scope="module")
def kafka_trace(tmp_path_factory):
    target = create_target("kafka-native")
    target.start()
    try:
        out = tmp_path_factory.mktemp("kafka-recorded")
        names = {"topic": uid("kt"), "share_topic": uid("ks"), "group": uid("kg"), "share_group": uid("ksg"),
                 "txid": uid("ktx")}
        seen = record(target.bootstrap_servers.split(",")[0], str(out), names)
        return dict(dir=str(out), seen=seen)
    finally:
        target.stop()


def _decisive(codes: list[int]) -> list[int]:
    """Error codes that are not retriable, sorted."""
    return sorted(c for c in codes if not ErrorCode(c).retriable)


def _listed(code: int | None) -> list[int]:
    return [] if code is None else [code]


def test_kafka_native_trace_replays_onto_reference(kafka_trace, tmp_path, capsys) -> None:
    assert len(kafka_trace["seen"]["shared"]) == 6
    out = tmp_path / "replayed"
    rc = replay_cmd.main([kafka_trace["dir"], "--target", "reference", "--out", str(out)])
    summary = capsys.readouterr().out
    report = json.load(open(out / REPORT_FILE))
    rec, rep = by_seq(completed(rows(kafka_trace["dir"]))), by_seq(rows(str(out)))
    assert report["replayed"] + report["not_replayed_total"] == len(rec), summary
    # every request the reference supports is replayed; what is not has a reason
    assert report["problems"] == [], summary
    for reason in report["not_replayed"]:
        assert reason.startswith(("target supports api", "target does not support", "recorded connection closed")), reason
    assert rc == (0 if not report["not_replayed"] else 1)
    for api in ("produce", "end_txn", "share_fetch", "offset_commit"):
        seqs = [s for s, r in rec.items() if r["api_name"] == api and r["status"] == "ok"]
        assert seqs and all(s in rep for s in seqs), api
    for s, r in rec.items():
        # Retriable answers are timing (Kafka answers CONCURRENT_TRANSACTIONS while its
        # markers are in flight; the reference had finished): compare the decisive ones.
        if r["api_name"] in ("produce", "end_txn", "add_partitions_to_txn") and s in rep:
            assert _decisive(rep[s]["error_codes"]) == _decisive(r["error_codes"]), (s, r["api_name"], rep[s]["error_codes"])
    acquired = [(a["first_offset"], a["last_offset"]) for s, r in rec.items() if r["api_name"] == "share_fetch"
                for a in r["acquired_records"]]
    replay_acq = [(a["first_offset"], a["last_offset"]) for s, r in rec.items()
                  if r["api_name"] == "share_fetch" and s in rep for a in rep[s]["acquired_records"]]
    assert acquired and replay_acq == acquired


def test_replay_onto_three_nodes_splits_and_routes(reference_replay, tmp_path) -> None:
    """The single-broker recording replayed onto 3 nodes: partitions and coordinators are
    spread, multi-partition requests are split per leader, and the answers still line up."""
    with ThreadedReferenceCluster(brokers=3) as target:
        report = replay(reference_replay["recorded_dir"], target.bootstrap_servers, str(tmp_path / "out"))
    assert report.problems == [], report.summary()
    assert_only_cut_off_requests_skipped(report, reference_replay["recorded"])
    rec, rep = by_seq(completed(reference_replay["recorded"])), by_seq(rows(str(tmp_path / "out")))
    summary = report.summary() + f"; split: {report.split_requests}; retries: {report.retries}"
    assert len({r["upstream"] for r in rep.values()}) >= 3, summary  # several target nodes were used
    assert report.split_requests, summary  # the consumer's Fetch / producer's requests spanned leaders
    for s, r in rec.items():
        if r["api_name"] in ("produce", "fetch", "offset_commit", "end_txn", "share_fetch", "list_offsets"):
            assert (rep[s]["error_code"], sorted(rep[s]["error_codes"])) == (r["error_code"], sorted(r["error_codes"])), \
                (s, r["api_name"], rep[s]["upstream"], rep[s]["error_codes"], rep[s]["response_json"], summary)
        if r["api_name"] == "fetch":
            got = sorted((b["partition"], b["base_offset"], b["record_count"]) for b in rep[s]["batches"])
            want = sorted((b["partition"], b["base_offset"], b["record_count"]) for b in r["batches"])
            assert got == want, (s, rep[s]["upstream"], rep[s]["response_json"], r["response_json"], summary)


def test_process_trace_sink_records_like_the_thread_writer(tmp_path) -> None:
    """ProcessTraceSink (the writer in a child process, for proxy performance) writes the
    same rows and gaps, and reports the writer's stats after close."""
    sink = ProcessTraceSink(str(tmp_path), "keep", flush_seconds=0.1).start()
    with ThreadedReferenceCluster() as c:
        with ThreadedCaptureProxy(c.bootstrap_servers, sink=sink) as proxy:
            host, port = proxy.bootstrap_servers.split(":")
            with RawClient(host, int(port)) as raw:
                for _ in range(20):
                    raw.api_versions()
                raw.request(3, 12, topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
    sink.record_gap(2, "test gap")
    sink.close()
    assert sink.stats["exchanges"] == 21 and sink.stats["gap_exchanges"] == 2 and sink.stats["write_errors"] == 0
    t = rows(str(tmp_path))
    assert sorted(r["seq"] for r in t) == list(range(1, 22))
    md = [r for r in t if r["api_name"] == "metadata"]
    assert md[0]["addresses_rewritten"] == 1 and md[0]["decode_error"] is None
    table, _ = read_trace(str(tmp_path))
    assert table["gap_reason"].to_pylist().count("test gap") == 1


def test_hashed_trace_replays_to_the_same_bytes(tmp_path) -> None:
    """A trace recorded with --payloads hash replays the digests; the target returns them,
    so the Fetch batches of both traces are byte-identical."""
    src, out = tmp_path / "src", tmp_path / "out"
    topic = uid("hash")
    writer = TraceWriter(str(src), "hash", flush_seconds=0.1).start()
    with ThreadedReferenceCluster() as c:
        with ThreadedCaptureProxy(c.bootstrap_servers, sink=writer) as proxy:
            bs = proxy.bootstrap_servers
            admin = AdminClient({"bootstrap.servers": bs})
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
            p = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
            for i in range(5):
                p.produce(topic, value=b"secret-%d" % i)
            assert p.flush(10) == 0
            consumer = Consumer({"bootstrap.servers": bs, "group.id": uid("hg"), "enable.auto.commit": False})
            consumer.assign([TopicPartition(topic, 0, 0)])
            got = []
            deadline = time.monotonic() + 20
            while len(got) < 5 and time.monotonic() < deadline:
                m = consumer.poll(0.2)
                if m is not None and m.error() is None:
                    got.append(m.value())
            consumer.close()
            del p, admin  # closed before the proxy stops: no request cut off
    writer.close()
    assert len(got) == 5
    with ThreadedReferenceCluster() as target:
        report = replay(str(src), target.bootstrap_servers, str(out))
    assert report.problems == [] and report.payloads == "hash", report.summary()
    assert_only_cut_off_requests_skipped(report, rows(str(src)))
    rec, rep = by_seq(completed(rows(str(src)))), by_seq(rows(str(out)))

    def fetched_values(r):
        _, body = framing.decode_response(r["response_bytes"], 1, r["api_version"])
        return [x.value for t in body.responses for pr in t.partitions for x in rec_mod.iter_records(pr.records)]

    fetches = [s for s, r in rec.items() if r["api_name"] == "fetch"]
    recorded_values = [v for s in fetches for v in fetched_values(rec[s])]
    assert len(recorded_values) == 5 and all(b"secret" not in v for v in recorded_values)
    assert [v for s in fetches for v in fetched_values(rep[s])] == recorded_values
