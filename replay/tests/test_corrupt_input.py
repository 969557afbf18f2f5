"""Damaged input ends `kipcheck check` and `kipcheck diff` the same way on both engines:
exit 2 and one line on stderr naming the file, nothing on stdout. Spark prunes columns and
reads lazily, so without the shared up-front validation a damaged column chunk passed
unnoticed there (exit 0) where the pure engine failed.

Validation runs before any Spark session is made, so these tests start no JVM."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from replay.synthetic_traces import build_table, write_segments
from replay import check_cmd, diff_cmd
from replay.spark_session import failure_line


def _segments(d) -> list[str]:
    return sorted(str(d / n) for n in os.listdir(d) if n.endswith(".parquet"))


def flip_chunk(path: str, column: str = "api_key") -> None:
    """Invert 8 bytes in the middle of the column's chunk in row group 0."""
    group = pq.read_metadata(path).row_group(0)
    chunk = next(group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema == column)
    off = chunk.data_page_offset + chunk.total_compressed_size // 2
    with open(path, "r+b") as f:
        f.seek(off)
        data = f.read(8)
        f.seek(off)
        f.write(bytes(b ^ 0xFF for b in data))


def truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def garbage(path: str) -> None:
    with open(path, "wb") as f:
        f.write(b"this is not a parquet file\n" * 20)


DAMAGE = {"flipped-chunk": flip_chunk, "truncated": truncate, "not-parquet": garbage}


@pytest.fixture(scope="module")
def table():
    return build_table(300, seed=5, anomalies=False)[0]


def make_trace(table, d) -> list[str]:
    write_segments(table, str(d), rows_per_segment=100)
    return _segments(d)


def run(command: str, engine: str, tmp_path, victim_dir) -> int:
    out = str(tmp_path / "report")
    if command == "check":
        return check_cmd.main([str(victim_dir), "--out", out, "--engine", engine])
    return diff_cmd.main([str(tmp_path / "a"), str(victim_dir), "--out", out, "--engine", engine])


def assert_one_line_naming(capsys, name: str) -> str:
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert cap.out == "" and len(lines) == 1, cap.err
    assert name in lines[0]
    return lines[0]


@pytest.mark.parametrize("engine", ["pure", "spark"])
@pytest.mark.parametrize("command", ["check", "diff"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_segment_is_exit_2_with_one_line_naming_it(table, tmp_path, capsys, command, engine, damage):
    make_trace(table, tmp_path / "a")
    victim = make_trace(table, tmp_path / "b")[1]
    DAMAGE[damage](victim)
    assert run(command, engine, tmp_path, tmp_path / "b") == 2
    line = assert_one_line_naming(capsys, victim)
    if damage == "flipped-chunk":
        assert "row group 0 column 'api_key'" in line and "at byte" in line


@pytest.mark.parametrize("engine", ["pure", "spark"])
@pytest.mark.parametrize("command", ["check", "diff"])
def test_empty_directory_is_exit_2_with_one_line_naming_it(table, tmp_path, capsys, command, engine):
    make_trace(table, tmp_path / "a")
    (tmp_path / "b").mkdir()
    assert run(command, engine, tmp_path, tmp_path / "b") == 2
    assert_one_line_naming(capsys, str(tmp_path / "b"))


def test_a_spark_failure_is_one_line_naming_the_file():
    """Should Spark itself fail on a file (e.g. damaged after validation), the commands print
    the first line of its message and the file it names, not the Java stack."""
    message = ("Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 times\n"
               "org.apache.spark.SparkException: [FAILED_READ_FILE.NO_HINT] Encountered error while reading file "
               "file:///tmp/trace/seg-000001.parquet. SQLSTATE: KD001\n\tat org.apache.spark.Foo(Foo.scala:1)\n")
    line = failure_line(RuntimeError(message))
    assert "\n" not in line and "/tmp/trace/seg-000001.parquet" in line and line.startswith("RuntimeError: Job")
