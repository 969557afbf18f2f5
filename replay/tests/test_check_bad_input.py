"""`kipcheck check` on bad input: exit 2 with a message naming the file and where, counts of
what was read; partial segments and gaps reported, never a silent partial result."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.synthetic_traces import build_table, write_segments
from replay import check_cmd
from replay import trace_schema as ts


@pytest.fixture()
def trace(tmp_path):
    table, _ = build_table(600, seed=5, anomalies=False)
    d = tmp_path / "trace"
    write_segments(table, str(d), rows_per_segment=200)  # three segments
    return d


def run(trace_dir, out, *extra) -> int:
    return check_cmd.main([str(trace_dir), "--out", str(out), "--engine", "pure", *extra])


def segments(d) -> list[str]:
    return sorted(str(d / n) for n in os.listdir(d) if n.endswith(".parquet"))


def test_clean_trace_exits_0_with_a_summary(trace, tmp_path, capsys):
    assert run(trace, tmp_path / "rep") == 0
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["violations"] == 0 and summary["read"]["exchanges"] == 600
    assert len(summary["segments_read"]) == 3
    assert pq.read_table(tmp_path / "rep" / "violations.parquet").num_rows == 0
    assert "600 exchange(s) in 3 segment(s)" in capsys.readouterr().out


def test_missing_directory(tmp_path, capsys):
    assert run(tmp_path / "nope", tmp_path / "rep") == 2
    assert "nope does not exist" in capsys.readouterr().err


def test_directory_without_segments(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert run(tmp_path / "empty", tmp_path / "rep") == 2
    assert "no completed segment" in capsys.readouterr().err


def test_truncated_segment_names_file_offset_and_counts(trace, tmp_path, capsys):
    victim = segments(trace)[1]
    size = os.path.getsize(victim)
    with open(victim, "r+b") as f:
        f.truncate(size - 100)
    assert run(trace, tmp_path / "rep") == 2
    err = capsys.readouterr().err
    assert os.path.basename(victim) in err and "truncated" in err and f"at byte {size - 100 - 4}" in err
    assert "read 1 segment(s), 200 row(s) before it" in err


def test_garbage_segment(trace, tmp_path, capsys):
    victim = segments(trace)[0]
    with open(victim, "wb") as f:
        f.write(b"not parquet at all" * 10)
    assert run(trace, tmp_path / "rep") == 2
    err = capsys.readouterr().err
    assert os.path.basename(victim) in err and "at byte 0" in err


def test_unknown_schema_version(trace, tmp_path, capsys):
    victim = segments(trace)[2]
    t = pq.read_table(victim)
    pq.write_table(t.replace_schema_metadata({ts.META_SCHEMA_VERSION: b"99"}), victim)
    assert run(trace, tmp_path / "rep") == 2
    err = capsys.readouterr().err
    assert os.path.basename(victim) in err and "schema_version '99'" in err


def test_partial_segment_is_reported_not_fatal(trace, tmp_path, capsys):
    with open(trace / "trace-zzz.parquet.tmp", "wb") as f:
        f.write(b"PAR1 half written")
    assert run(trace, tmp_path / "rep") == 0
    captured = capsys.readouterr()
    assert "trace-zzz.parquet.tmp" in captured.err and "trace-zzz.parquet.tmp" in captured.out
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert [os.path.basename(s["file"]) for s in summary["segments_skipped"]] == ["trace-zzz.parquet.tmp"]


def _rewrite(path: str, change) -> None:
    rows = pq.read_table(path).to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=ts.schema()), path)


def test_undecoded_exchanges_stop_the_check_unless_skipped(trace, tmp_path, capsys):
    victim = segments(trace)[1]

    def unknown_version(rows):
        rows[5].update(api_version=99, decode_error="request: unknown api version 99 for api 1")

    _rewrite(victim, unknown_version)
    assert run(trace, tmp_path / "rep") == 2
    err = capsys.readouterr().err
    assert os.path.basename(victim) in err and "seq 206" in err and "1 of 600 exchange(s) could not be decoded" in err
    assert run(trace, tmp_path / "rep2", "--skip-undecoded") == 0
    summary = json.loads((tmp_path / "rep2" / "summary.json").read_text())
    assert summary["read"]["undecoded"] == 1
    assert "could not be decoded and were not checked" in capsys.readouterr().out


def test_gap_rows_are_reported(trace, tmp_path, capsys):
    def add_gap(rows):
        gap = {name: None for name in ts.COLUMN_NAMES}
        for name in ("error_codes", "partitions", "batches", "acquired_records", "acknowledgement_batches",
                     "aborted_transactions", "topics", "topic_ids", "base_sequences"):
            gap[name] = []
        gap.update(kind="gap", gap_count=7, gap_reason="trace writer backlog")
        rows.append(gap)

    _rewrite(segments(trace)[2], add_gap)
    assert run(trace, tmp_path / "rep") == 0
    assert "7 exchange(s) were not recorded" in capsys.readouterr().out
