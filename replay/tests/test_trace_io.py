"""Trace segments on disk: rolling, crash safety (SIGKILL), corrupt files, schema versions."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import RawClient
from reference_impl.protocol import framing, payloads
from reference_impl.server.broker_server import ThreadedReferenceCluster
from replay import trace_schema as ts
from replay.trace_reader import TraceCorruptError, UnknownSchemaVersion, read_trace
from replay.trace_writer import RawExchange, TraceWriter
from replay.record_cmd import record
from replay.tests.recording import record_three_api_versions

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def api_versions_exchange(seq: int) -> RawExchange:
    req = framing.encode_request(payloads.build(framing.request_schema(18, 3), client_software_name="t",
                                                client_software_version="1"), seq)[4:]
    resp_payload = payloads.build(framing.response_schema(18, 3), error_code=ErrorCode.none, api_keys=(),
                                  throttle_time=__import__("datetime").timedelta(0))
    resp = framing.encode_response(resp_payload, seq)[4:]
    return RawExchange(seq=seq, connection_id=1, listener="127.0.0.1:1", upstream="127.0.0.1:2",
                       client_host="127.0.0.1", client_port=3, api_key=18, api_version=3, correlation_id=seq,
                       request_mono_ns=seq, request_wall_ms=seq, request_frame=req, response_mono_ns=seq + 1,
                       response_wall_ms=seq + 1, response_frame=resp)


def write_segments(out: str, n: int, **kw) -> TraceWriter:
    w = TraceWriter(out, "keep", **kw).start()
    for i in range(1, n + 1):
        while not w.offer(api_versions_exchange(i)):
            time.sleep(0.001)
    w.close()
    return w


def test_segments_roll_and_read_back(tmp_path) -> None:
    # Only the row count may trigger a flush here (a slow first row - kio loading its schemas -
    # would otherwise pass flush_seconds and cut a fourth segment).
    w = write_segments(str(tmp_path), 60, segment_max_bytes=1, flush_rows=20, flush_seconds=600)
    assert w.stats["segments"] == 3 and w.stats["exchanges"] == 60
    assert glob.glob(str(tmp_path / "*.tmp")) == []
    for path in w.segments:
        assert pq.read_metadata(path).metadata[b"schema_version"] == str(ts.SCHEMA_VERSION).encode()
    t, report = read_trace(str(tmp_path))
    assert t.num_rows == 60 and len(report.read) == 3 and report.skipped == []
    assert t["seq"].to_pylist() == list(range(1, 61))
    assert set(t["api_name"].to_pylist()) == {"api_versions"}


def test_gap_rows_are_written(tmp_path) -> None:
    w = TraceWriter(str(tmp_path), "keep").start()
    w.offer(api_versions_exchange(1))
    w.record_gap(5, "test: writer backlog")
    w.close()
    t, _ = read_trace(str(tmp_path))
    gaps = [r for r in t.to_pylist() if r["kind"] == ts.KIND_GAP]
    assert [(g["gap_count"], g["gap_reason"]) for g in gaps] == [(5, "test: writer backlog")]


def test_empty_directory_reads_empty(tmp_path) -> None:
    t, report = read_trace(str(tmp_path))
    assert t.num_rows == 0 and report.read == [] and t.schema.names == ts.COLUMN_NAMES


def test_truncated_segment_is_a_clear_error(tmp_path) -> None:
    w = write_segments(str(tmp_path), 40, segment_max_bytes=1, flush_rows=20, flush_seconds=600)  # 2 x 20 rows
    bad = w.segments[1]
    size = os.path.getsize(bad)
    with open(bad, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(TraceCorruptError) as err:
        read_trace(str(tmp_path))
    msg = str(err.value)
    assert os.path.basename(bad) in msg and "truncated" in msg and "read 1 segment(s), 20 row(s)" in msg
    assert err.value.offset is not None
    t, report = read_trace(str(tmp_path), strict=False)
    assert t.num_rows == 20 and [os.path.basename(s.path) for s in report.skipped] == [os.path.basename(bad)]


def test_garbage_segment_is_a_clear_error(tmp_path) -> None:
    write_segments(str(tmp_path), 10)
    junk = tmp_path / "trace-junk.parquet"
    junk.write_bytes(b"this is not parquet at all" * 10)
    with pytest.raises(TraceCorruptError, match="trace-junk.parquet.*no Parquet magic"):
        read_trace(str(tmp_path))


def test_corrupt_footer_metadata_is_a_clear_error(tmp_path) -> None:
    w = write_segments(str(tmp_path), 10)
    path = w.segments[0]
    data = bytearray(open(path, "rb").read())
    footer_len = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer_len
    data[start : start + footer_len] = b"\xff" * footer_len  # footer bytes garbled, magic kept
    open(path, "wb").write(bytes(data))
    with pytest.raises(TraceCorruptError) as err:
        read_trace(str(tmp_path))
    assert os.path.basename(path) in str(err.value)


def test_unknown_schema_version_is_a_clear_error(tmp_path) -> None:
    write_segments(str(tmp_path), 5)
    table = ts.schema().empty_table().replace_schema_metadata({b"schema_version": b"99"})
    pq.write_table(table, str(tmp_path / "trace-future.parquet"))
    with pytest.raises(UnknownSchemaVersion, match=r"trace-future\.parquet has schema_version '99'"):
        read_trace(str(tmp_path))
    os.remove(tmp_path / "trace-future.parquet")
    pq.write_table(pa.table({"x": [1]}), str(tmp_path / "trace-foreign.parquet"))
    with pytest.raises(UnknownSchemaVersion, match=r"trace-foreign\.parquet has no schema_version"):
        read_trace(str(tmp_path))


def _writer_children_alive(out: str) -> bool:
    """Does any process still hold a file under `out` open (a writer child that outlived
    its killed recorder)? Read from /proc."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(out):
                    return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_sigkill_leaves_completed_segments_and_one_partial(tmp_path, writer) -> None:
    out = str(tmp_path / "trace")
    with ThreadedReferenceCluster(brokers=1) as cluster:
        proc = subprocess.Popen(
            [sys.executable, "-m", "replay.record_cmd", "--upstream", cluster.bootstrap_servers,
             "--out", out, "--segment-max-seconds", "0.5", "--writer", writer],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            line = proc.stdout.readline()
            assert "listening" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
            bootstrap = line.split()[3]
            host, port = bootstrap.rsplit(":", 1)
            stop = threading.Event()
            sent = [0]

            def traffic() -> None:
                try:
                    with RawClient(host, int(port)) as raw:
                        while not stop.is_set():
                            raw.api_versions()
                            sent[0] += 1
                            time.sleep(0.002)
                except ConnectionError:
                    pass  # the recorder was killed

            th = threading.Thread(target=traffic, daemon=True)
            th.start()
            seen_tmp: set[str] = set()
            killed = False
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                done = glob.glob(os.path.join(out, "*.parquet"))
                tmps = set(glob.glob(os.path.join(out, "*.parquet.tmp")))
                fresh = tmps - seen_tmp
                if len(done) >= 2 and fresh:
                    # a segment just opened: it cannot roll for ~0.5 s, so it is partial now
                    os.kill(proc.pid, signal.SIGKILL)
                    killed = True
                    break
                seen_tmp |= tmps
                time.sleep(0.005)
            assert killed, "recorder never had two completed segments and an open one"
            proc.wait(10)
            stop.set()
            th.join(5)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while _writer_children_alive(out) and time.monotonic() < deadline:
        time.sleep(0.1)  # a process writer notices its parent died within ~0.2 s
    assert not _writer_children_alive(out), "a trace writer outlived the killed recorder"
    t, report = read_trace(out)
    assert len(report.read) >= 2
    assert len(report.partial) == 1, report.summary()
    partial = report.partial[0]
    assert partial.path.endswith(".parquet.tmp") and "partial segment" in partial.reason
    assert os.path.basename(partial.path) in report.summary()
    assert t.num_rows > 0 and t.num_rows == report.rows
    seqs = sorted(t["seq"].to_pylist())
    assert seqs == list(range(1, len(seqs) + 1))  # completed segments hold a gap-free prefix
    assert len(seqs) <= sent[0]


def test_sigterm_finishes_the_open_segment(tmp_path) -> None:
    out = str(tmp_path / "trace")
    with ThreadedReferenceCluster(brokers=1) as cluster:
        rc, rest, err = record_three_api_versions(cluster.bootstrap_servers, out, "--payloads", "drop", timeout_s=15)
    assert rc == 0, err
    assert "3 exchange(s)" in rest and "1 segment(s)" in rest
    t, report = read_trace(out)
    assert report.skipped == [] and t.num_rows == 3
    assert set(t["payloads"].to_pylist()) == {"drop"}


def test_record_rejects_bad_payload_mode(tmp_path, capsys) -> None:
    assert record("127.0.0.1:1", "127.0.0.1:0", str(tmp_path), payloads="nope") == 2
    assert "--payloads" in capsys.readouterr().err


def test_queue_is_bounded_by_bytes(tmp_path) -> None:
    w = TraceWriter(str(tmp_path), "keep", max_queued_bytes=1)  # not started: nothing drains
    assert w.offer(api_versions_exchange(1))  # an empty queue always takes one item
    assert not w.offer(api_versions_exchange(2))
    w.start()
    w.close()
    t, _ = read_trace(str(tmp_path))
    assert t.num_rows == 1
