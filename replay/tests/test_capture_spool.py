"""The raw-frame spool (replay/capture_spool.py): the same trace as the decoding writer, no
SASL secret on disk, torn files readable, and a slow disk costs gap rows, never a stalled
client."""

from __future__ import annotations

import datetime
import glob
import os
import shutil
import time

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import RawClient
from reference_impl.protocol import framing, payloads
from reference_impl.server.broker_server import ThreadedReferenceCluster
from replay import capture_spool
from replay.capture_spool import SpoolSink, read_spool
from replay.proxy import ThreadedCaptureProxy
from replay.record_cmd import finish_leftovers
from replay.trace_reader import read_trace
from replay.trace_writer import RawExchange, TraceWriter
from replay.tests.recording import record_three_api_versions


def _api_versions(seq: int, conn: int) -> RawExchange:
    req = framing.encode_request(payloads.build(framing.request_schema(18, 3), client_software_name="t",
                                                client_software_version="1"), seq)[4:]
    return RawExchange(seq=seq, connection_id=conn, listener="127.0.0.1:1", upstream="127.0.0.1:2",
                       client_host="127.0.0.1", client_port=40000 + conn, api_key=18, api_version=3,
                       correlation_id=seq, request_mono_ns=seq * 1000, request_wall_ms=seq, request_frame=req,
                       response_mono_ns=seq * 1000 + 10, response_wall_ms=seq, response_frame=b"\x00" * 8)


def _sasl(seq: int) -> RawExchange:
    req = framing.encode_request(payloads.build(framing.request_schema(36, 2), auth_bytes=b"\x00user\x00hunter2"),
                                 seq)[4:]
    body = payloads.build(framing.response_schema(36, 2), error_code=ErrorCode.none, error_message=None,
                          auth_bytes=b"server-token-hunter2", session_lifetime=datetime.timedelta(0))
    resp = framing.encode_response(body, seq, 36, 2)[4:]
    x = _api_versions(seq, 9)
    x.api_key, x.api_version, x.request_frame, x.response_frame = 36, 2, req, resp
    return x


def _rows(out: str) -> list[dict]:
    table, _ = read_trace(out)
    drop = {"request_json", "response_json"}  # identical too, but long to show in a failure
    return sorted(({k: v for k, v in r.items() if k not in drop} for r in table.to_pylist()),
                  key=lambda r: (r["seq"] or 0, r["gap_reason"] or ""))


def test_spool_trace_equals_the_decoding_writers(tmp_path) -> None:
    items = [_api_versions(i + 1, 1 + i % 3) for i in range(40)] + [_sasl(41)]
    with TraceWriter(str(tmp_path / "thread")) as w:
        for x in items:
            assert w.offer(x)
    spool = SpoolSink(str(tmp_path / "spool"), spool_max_bytes=2000).start()  # several files
    assert spool.offer_many(items[:20]) == 20 and spool.offer_many(items[20:]) == 21
    spool.close()
    assert spool.stats["exchanges"] == 41 and len(spool.spools) > 1
    assert glob.glob(str(tmp_path / "spool" / "*.spool*")) == []  # decoded, then removed
    assert _rows(str(tmp_path / "spool")) == _rows(str(tmp_path / "thread"))


def test_sasl_secrets_never_reach_the_spool(tmp_path) -> None:
    sink = SpoolSink(str(tmp_path)).start()
    x = _sasl(1)
    sizes = (len(x.request_frame), len(x.response_frame))
    sink.offer(x)
    deadline = time.monotonic() + 10
    while sink.spooled_bytes == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    (path,) = glob.glob(str(tmp_path / "*.spool.tmp"))
    with open(path, "rb") as fh:
        assert b"hunter2" not in fh.read()
    sink.close()
    (row,) = read_trace(str(tmp_path))[0].to_pylist()
    assert (row["request_size"], row["response_size"]) == sizes  # as sent, not as redacted
    assert row["request_bytes"] is None and "hunter2" not in row["request_json"]


def test_a_torn_spool_decodes_up_to_its_last_whole_record(tmp_path) -> None:
    """A killed recorder leaves a .spool.tmp cut anywhere: every whole exchange before the
    cut is decoded (record_cmd does so before its next recording into the directory)."""
    sink = SpoolSink(str(tmp_path / "live")).start()
    sink.offer_many([_api_versions(i + 1, 1) for i in range(10)])
    deadline = time.monotonic() + 10
    while sink.spooled_bytes == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    (path,) = glob.glob(str(tmp_path / "live" / "*.spool.tmp"))
    os.makedirs(tmp_path / "left")
    stamp, pid, rest = os.path.basename(path).split("-", 1)[1].split("-", 2)
    assert int(pid) == os.getpid()  # a live recorder's spool is never taken: name a dead one
    torn = str(tmp_path / "left" / f"capture-{stamp}-999999999-{rest}")
    shutil.copy(path, torn)
    sink.close()
    size = os.path.getsize(torn)
    with open(torn, "r+b") as fh:
        fh.truncate(size - 5)  # inside the last exchange's frames
    assert [x.seq for x in read_spool(torn)] == list(range(1, 10))
    finish_leftovers(str(tmp_path / "left"))
    assert sorted(read_trace(str(tmp_path / "left"))[0]["seq"].to_pylist()) == list(range(1, 10))
    assert capture_spool.leftover_spools(str(tmp_path / "left")) == []


@pytest.fixture(scope="module")
def cluster():
    with ThreadedReferenceCluster(brokers=1) as c:
        yield c


def test_a_slow_spool_disk_costs_gap_rows_never_a_stalled_client(cluster, tmp_path, monkeypatch) -> None:
    """Every spool write takes 1 s: the clients' round trips stay fast, the exchanges the
    writer could not take become gap rows, and every exchange is accounted for."""
    real_writev = os.writev

    def slow_writev(fd, buffers):
        time.sleep(1.0)
        return real_writev(fd, buffers)

    monkeypatch.setattr(capture_spool.os, "writev", slow_writev)
    sink = SpoolSink(str(tmp_path), max_queued_bytes=1).start()
    n, slowest = 30, 0.0
    with ThreadedCaptureProxy(cluster.bootstrap_servers, sink=sink, handoff_max_bytes=1) as proxy:
        host, port = proxy.bootstrap_servers.split(":")
        with RawClient(host, int(port), timeout=30) as raw:
            for _ in range(n):
                t0 = time.monotonic()
                raw.api_versions()
                slowest = max(slowest, time.monotonic() - t0)
    sink.close()
    assert slowest < 0.5, f"a round trip waited {slowest:.2f} s for the spool"
    table, _ = read_trace(str(tmp_path))
    rows = table.to_pylist()
    exchanges = sum(r["kind"] == "exchange" for r in rows)
    gaps = [r for r in rows if r["kind"] == "gap"]
    assert exchanges < n and any("hand-off buffer" in r["gap_reason"] for r in gaps)
    assert exchanges + sum(r["gap_count"] for r in gaps) == n


def test_record_spools_by_default_and_ends_with_the_compacted_layout(cluster, tmp_path) -> None:
    """`kipcheck record` (payloads keep): the spool, decoded at SIGTERM into the trace, which
    is then compacted into OUT.v3; no spool file is left behind."""
    out = str(tmp_path / "trace")
    rc, rest, err = record_three_api_versions(cluster.bootstrap_servers, out)
    assert rc == 0, err
    assert "3 exchange(s)" in rest and "of spooled frames" in rest and f"compacted into {out}.v3" in rest
    assert glob.glob(os.path.join(out, "*.spool*")) == []
    assert read_trace(out)[0].num_rows == 3
    assert glob.glob(os.path.join(out + ".v3", "*.parquet"))
