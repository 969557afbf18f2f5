"""Schema version 1 traces (written before the typed columns) read and check as before.

The fixtures under replay/tests/fixtures/ were written by the version-1 code (see the README
there) with the version-1 checker's verdicts; the version-2 reader derives the typed columns
from their JSON, and both engines must reach the same verdicts, also on a trace whose
segments mix both versions. The writer's typed columns (from decoded bodies) must equal
what the migration derives from the JSON of the same frames.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from replay.synthetic_traces import build_table
from replay import check_cmd
from replay import trace_schema as ts
from replay import typed_fields
from replay.check_pure import check_table
from replay.trace_reader import read_trace, segment_version
from replay.trace_writer import RawExchange, build_row

FIXTURES = Path(__file__).parent / "fixtures"


def expected(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.expected.json").read_text())


def found(violations) -> set[tuple]:
    return {(v["rule_id"], v["entity"], v["seq"]) for v in violations}


@pytest.mark.parametrize("name", ["v1-synthetic", "v1-reference"])
def test_version_1_fixture_checks_as_the_version_1_checker_did(name: str, tmp_path) -> None:
    d = FIXTURES / name
    assert {segment_version(str(p)) for p in d.glob("*.parquet")} == {"1"}
    table, report = read_trace(str(d))
    assert report.skipped == [] and table.schema.equals(ts.schema(), check_metadata=False)
    assert table.column("schema_version").null_count == table.num_rows  # still says where it came from
    assert check_table(table) == expected(name)["violations"]
    rc = check_cmd.main([str(d), "--out", str(tmp_path / "rep"), "--engine", "pure"])
    assert rc == (1 if expected(name)["violations"] else 0)


def test_synthetic_fixture_violations_are_the_injected_ones() -> None:
    exp = expected("v1-synthetic")
    assert len(exp["injected"]) == 11
    assert sorted((v["rule_id"], v["seq"]) for v in exp["violations"]) == sorted(map(tuple, exp["injected"]))


def test_generator_writes_the_typed_columns_the_migration_derives() -> None:
    """Version-2 synthetic trace (typed columns written) equals the version-1 fixture made
    from the same seed, column for column once migrated."""
    old, _ = read_trace(str(FIXTURES / "v1-synthetic"))
    new, _ = build_table(1300, seed=7)
    for name in typed_fields.COLUMNS:
        assert new.column(name).to_pylist() == old.column(name).to_pylist(), name
    assert set(new.column("schema_version").to_pylist()) == {ts.SCHEMA_VERSION}


def test_writer_typed_columns_equal_the_migration_of_the_same_frames() -> None:
    """build_row (the recorder's writer) on the frames of the recorded version-1 trace."""
    table, _ = read_trace(str(FIXTURES / "v1-reference"))
    checked = 0
    for r in table.to_pylist():
        if r["kind"] != "exchange" or r["request_bytes"] is None:
            continue
        x = RawExchange(seq=r["seq"], connection_id=r["connection_id"], listener=r["listener"], upstream=r["upstream"],
                        client_host=r["client_host"], client_port=r["client_port"], api_key=r["api_key"],
                        api_version=r["api_version"], correlation_id=r["correlation_id"],
                        request_mono_ns=r["request_mono_ns"], request_wall_ms=r["request_wall_ms"],
                        request_frame=r["request_bytes"], status=r["status"], response_frame=r["response_bytes"])
        row = build_row(x, "keep")
        assert row["schema_version"] == ts.SCHEMA_VERSION
        assert {c: row[c] for c in typed_fields.COLUMNS} == {c: r[c] for c in typed_fields.COLUMNS}, r["seq"]
        checked += 1
    assert checked == table.num_rows
    assert table.column("granted_producer_id").null_count < table.num_rows
    assert table.column("isolation_level").null_count < table.num_rows


def mixed_trace(path: Path) -> None:
    """The version-1 fixture's first 650 rows as a version-1 segment, the rest as version 2."""
    path.mkdir()
    v1 = pq.read_table(next((FIXTURES / "v1-synthetic").glob("*.parquet")))
    v2, _ = build_table(1300, seed=7)
    pq.write_table(v1.slice(0, 650), path / "trace-a-00001.parquet")
    pq.write_table(v2.slice(650), path / "trace-a-00002.parquet")


@pytest.mark.deadline(900)  # Spark start-up and the job on 2 shared cores
def test_mixed_version_trace_same_verdict_in_spark_and_pure(tmp_path) -> None:
    mixed_trace(tmp_path / "t")
    assert [segment_version(str(p)) for p in sorted((tmp_path / "t").glob("*.parquet"))] == ["1", "2"]
    want = found(expected("v1-synthetic")["violations"])
    table, _ = read_trace(str(tmp_path / "t"))
    assert found(check_table(table)) == want
    assert check_cmd.main([str(tmp_path / "t"), "--out", str(tmp_path / "rep"), "--master", "local[2]"]) == 1
    got = pq.read_table(tmp_path / "rep" / "violations.parquet").to_pylist()
    assert found(got) == want
