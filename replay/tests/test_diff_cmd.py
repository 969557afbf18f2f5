"""`kipcheck diff` command: exit codes, report files, and bad input (never a silent
partial result)."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq

from replay.diff_cmd import main
from replay.tests.test_diff_support import exchange, small_workload, write_trace


def diff(tmp_path, *extra, a="a", b="b"):
    out = str(tmp_path / "report")
    code = main([str(tmp_path / a), str(tmp_path / b), "--out", out, "--engine", "pure", *extra])
    return code, out


def test_exit_0_and_report_files_when_traces_agree(tmp_path, capsys) -> None:
    write_trace(str(tmp_path / "a"), small_workload())
    write_trace(str(tmp_path / "b"), small_workload(pid=4242, member="zz"))
    code, out = diff(tmp_path)
    assert code == 0
    assert sorted(os.listdir(out)) == ["divergences.parquet", "summary.html", "summary.json", "summary.md"]
    s = json.load(open(os.path.join(out, "summary.json")))
    assert s["exit_status"] == 0 and s["verdict"] == "no divergence"
    assert s["traces"]["a"]["exchanges"] == 7 and s["compared_exchanges"] == {"a": 7, "b": 7}
    assert pq.read_table(os.path.join(out, "divergences.parquet")).num_rows == 0
    assert "Verdict: no divergence" in capsys.readouterr().out


def test_exit_1_with_a_readable_report_when_they_diverge(tmp_path) -> None:
    write_trace(str(tmp_path / "a"), small_workload(hwm=10))
    write_trace(str(tmp_path / "b"), small_workload(hwm=11, epoch=3))
    code, out = diff(tmp_path)
    assert code == 1
    s = json.load(open(os.path.join(out, "summary.json")))
    fields = {(g["api_name"], g["field"]) for g in s["divergences"]["groups"]}
    assert ("init_producer_id", "producer_epoch") in fields and ("fetch", "partitions[].high_watermark") in fields
    md = open(os.path.join(out, "summary.md")).read()
    assert "| init_producer_id | producer_epoch | field |" in md and "KIP-98.INIT.001" in md
    t = pq.read_table(os.path.join(out, "divergences.parquet"))
    assert set(t.column_names) >= {"kind", "api_name", "field", "path", "a_value", "b_value", "requirement_ids", "noise"}


def test_missing_directory_is_exit_2_naming_it(tmp_path, capsys) -> None:
    write_trace(str(tmp_path / "a"), small_workload())
    code, _ = diff(tmp_path, b="nope")
    assert code == 2
    assert f"trace directory {tmp_path / 'nope'} does not exist" in capsys.readouterr().err


def test_directory_without_segments_is_exit_2(tmp_path, capsys) -> None:
    write_trace(str(tmp_path / "a"), small_workload())
    (tmp_path / "b").mkdir()
    assert diff(tmp_path)[0] == 2
    assert "no completed segment" in capsys.readouterr().err


def test_corrupt_segment_is_exit_2_naming_file_offset_and_counts(tmp_path, capsys) -> None:
    write_trace(str(tmp_path / "a"), small_workload())
    write_trace(str(tmp_path / "b"), small_workload(), name="trace-1.parquet")
    bad = write_trace(str(tmp_path / "b"), small_workload(), name="trace-2.parquet")
    data = open(bad, "rb").read()
    open(bad, "wb").write(data[: len(data) // 2])  # truncated: no footer
    assert diff(tmp_path)[0] == 2
    err = capsys.readouterr().err
    assert bad in err and "at byte" in err
    assert "read 1 segment(s) with 7 row(s) before it; 1 segment(s) not read" in err


def test_garbage_segment_is_exit_2(tmp_path, capsys) -> None:
    write_trace(str(tmp_path / "a"), small_workload())
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "trace-1.parquet").write_bytes(b"this is not parquet at all, not even close")
    assert diff(tmp_path)[0] == 2
    assert "trace-1.parquet at byte 0: no Parquet magic" in capsys.readouterr().err


def test_unknown_schema_version_is_exit_2(tmp_path, capsys) -> None:
    write_trace(str(tmp_path / "a"), small_workload())
    path = write_trace(str(tmp_path / "b"), small_workload(), version=99)
    assert diff(tmp_path)[0] == 2
    err = capsys.readouterr().err
    assert path in err and "schema_version '99'" in err


def test_partial_segment_needs_allow_partial_and_is_then_reported(tmp_path, capsys) -> None:
    write_trace(str(tmp_path / "a"), small_workload())
    write_trace(str(tmp_path / "b"), small_workload())
    (tmp_path / "b" / "trace-9.parquet.tmp").write_bytes(b"PAR1 half a segment")
    assert diff(tmp_path)[0] == 2
    assert "partial segment(s) (trace-9.parquet.tmp" in capsys.readouterr().err
    code, out = diff(tmp_path, "--allow-partial")
    assert code == 0
    s = json.load(open(os.path.join(out, "summary.json")))
    assert s["traces"]["b"]["segments_not_read"] == [
        "trace-9.parquet.tmp (19 bytes): partial segment, recorder did not finish it"]
    assert "not read: trace-9.parquet.tmp" in open(os.path.join(out, "summary.md")).read()


def test_undecoded_frames_need_skip_undecoded_and_are_counted(tmp_path, capsys) -> None:
    rows = small_workload()
    rows.append(exchange(8, 7, 3, None, api_version=99, decode_error="request: unknown api version 99 for api 3"))
    path = write_trace(str(tmp_path / "a"), rows)
    write_trace(str(tmp_path / "b"), small_workload())
    assert diff(tmp_path)[0] == 2
    err = capsys.readouterr().err
    assert f"{path} row 7 (seq 8, api_key 3 v99): request: unknown api version 99" in err
    assert "8 exchange(s) read in 1 segment(s)" in err
    code, out = diff(tmp_path, "--skip-undecoded")
    assert code == 0
    s = json.load(open(os.path.join(out, "summary.json")))
    assert s["traces"]["a"]["undecoded_exchanges"] == 1 and s["compared_exchanges"]["a"] == 7


def test_gaps_are_counted_in_the_summary(tmp_path) -> None:
    rows = small_workload()
    gap = exchange(0, 7, 0, None, kind="gap", gap_count=3, gap_reason="trace writer backlog")
    gap["seq"] = None
    write_trace(str(tmp_path / "a"), rows + [gap])
    write_trace(str(tmp_path / "b"), small_workload())
    code, out = diff(tmp_path)
    assert code == 0
    s = json.load(open(os.path.join(out, "summary.json")))
    assert (s["traces"]["a"]["gap_rows"], s["traces"]["a"]["gap_exchanges"]) == (1, 3)
