"""`kipcheck compact` (replay/compact.py): schema 1 and 2 traces to the bucketed schema 3.

No Spark here (replay/tests/test_diff_spark.py and test_check_parity.py run the Spark jobs
over compacted traces): every row and column survives, each row sits in the bucket Spark's
function gives its key, files are sorted by the alignment key, the precomputed keys and id
placeholders are the pure diff's, and check and diff give the same answers on both layouts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from replay import check_cmd, compact_cmd, compact_events
from replay import check_events as ev
from replay import compact as cp
from replay import diff_pure
from replay import trace_schema as ts
from replay.check_pure import check_table
from replay.check_spark import replay_sorted
from replay.entity_replay import CheckConfig
from replay.diff_input import inspect_trace
from replay.spark_hash import null_bucket, spark_bucket, spark_hash_long
from replay.synthetic_diff_traces import make_traces
from replay.synthetic_traces import build_table, write_segments
from replay.trace_reader import TraceError, read_trace

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.deadline(300)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[str, str, set]:
    """A synthetic trace, its rerun with injected differences, and both compacted (4 buckets)."""
    base = str(tmp_path_factory.mktemp("pair"))
    a, b, expected = make_traces(base, 3000, seed=5)
    for d in (a, b):
        cp.compact(d, buckets=4)
    return a, b, expected


def by_seq(table: pa.Table) -> pa.Table:
    return table.sort_by([("seq", "ascending")])


def test_every_row_and_column_survives_in_its_spark_bucket(pair) -> None:
    a = pair[0]
    original, _ = read_trace(a)
    files = sorted(os.listdir(a + ".v3"))
    assert files == [compact_events.EVENTS_DIR] + [cp.FILE_PATTERN.format(i) for i in range(4)]
    compacted, report = read_trace(a + ".v3")
    assert report.skipped == [] and compacted.num_rows == original.num_rows
    names = [name for name, _, _ in ts.FIELDS]
    assert by_seq(compacted.select(names)).equals(by_seq(original.select(names)))
    for i, name in enumerate(files[1:]):
        path = os.path.join(a + ".v3", name)
        assert cp.layout(path) == {"schema_version": "3", "kipcheck_trace": "1", "buckets": "4",
                                   "bucket_column": "align_conn", "bucket_hash": ts.V3_BUCKET_HASH,
                                   "sort_columns": "align_conn,api_key,request_key,api_ord"}
        t = pq.read_table(path)
        keys = t.column("align_conn").to_numpy()
        assert (spark_bucket(keys, 4) == i).all()
        order = t.select(list(ts.V3_SORT_COLUMNS)).to_pylist()
        assert order == sorted(order, key=lambda r: tuple(r.values()))


def test_keys_and_placeholders_are_the_pure_diffs(pair) -> None:
    """What compaction precomputes equals what diff_pure computes per run."""
    a = pair[0]
    rows = diff_pure.load_exchanges(inspect_trace(a))
    diff_pure.add_alignment_keys(rows)
    ids = diff_pure.id_placeholders(rows)
    compacted = {r["seq"]: r for r in read_trace(a + ".v3")[0].to_pylist()}
    slots = {(column, sub): (slot, cat) for slot, column, sub, cat in diff_pure.f.ID_SLOTS}
    for r in rows:
        c = compacted[r["seq"]]
        assert (c["align_client"], c["conn_ord"], c["request_key"], c["api_ord"]) == (
            r["_client"], r["_conn_ord"], r["_req"], r["_api_ord"])
        assert c["align_conn"] == cp.align_conn_key(r["_client"], r["_conn_ord"])
        want = {}
        for (column, sub), (slot, cat) in slots.items():
            values = [r[column]] if sub is None else [e[sub] for e in r[column] or ()]
            for pos, v in enumerate(values):
                if (cat, v) in ids:
                    want[slot + pos] = ids[(cat, v)]
        assert dict(c["id_placeholders"] or []) == want


def test_pure_diff_is_the_same_on_both_layouts(pair) -> None:
    a, b, expected = pair
    t2, r2 = diff_pure.run(inspect_trace(a), inspect_trace(b), None, False)
    t3, r3 = diff_pure.run(inspect_trace(a + ".v3"), inspect_trace(b + ".v3"), None, False)
    assert {(r["kind"], r["a_seq"], r["path"]) for r in t2.to_pylist()} == expected
    assert sorted(map(json.dumps, t3.to_pylist())) == sorted(map(json.dumps, t2.to_pylist())) and r3 == r2


@pytest.mark.parametrize("name", ["v1-synthetic", "v1-reference"])
def test_version_1_fixture_compacts_and_checks_as_before(name: str, tmp_path) -> None:
    """Migration 1 -> 3: the typed columns derived from the JSON, the same verdicts."""
    expected = json.loads((FIXTURES / f"{name}.expected.json").read_text())["violations"]
    out = str(tmp_path / "v3")
    cp.compact(str(FIXTURES / name), out, buckets=2)
    table, _ = read_trace(out)
    assert table.column("schema_version").null_count == table.num_rows  # still says where it came from
    assert check_table(table) == expected


def test_version_2_trace_checks_the_same_compacted(tmp_path) -> None:
    """Migration 2 -> 3 for the check: a synthetic trace with every anomaly kind."""
    from replay.synthetic_traces import build_table, write_segments  # the check's generator

    table, injected = build_table(1300, seed=7)
    write_segments(table, str(tmp_path / "t"), rows_per_segment=500)
    cp.compact(str(tmp_path / "t"), buckets=3)
    found = check_table(read_trace(str(tmp_path / "t.v3"))[0])
    assert found == check_table(table) and {(v["rule_id"], v["seq"]) for v in found} == set(injected)
    rc = check_cmd.main([str(tmp_path / "t.v3"), "--out", str(tmp_path / "rep"), "--engine", "pure"])
    assert rc == 1


def test_spark_hash_long_known_values() -> None:
    """Spark's `SELECT hash(CAST(v AS BIGINT))` for these values (Spark 4.3, asked once;
    test_diff_spark compares every key of a trace with the live function)."""
    values = np.array([0, 1, -1, 42, 2**62], dtype=np.int64)
    assert spark_hash_long(values).tolist() == SPARK_HASHES


SPARK_HASHES = [-1670924195, -1712319331, -939490007, 1316951768, -2030303457]


def test_command_writes_and_refuses_bad_input(tmp_path, capsys) -> None:
    a, _, _ = make_traces(str(tmp_path), 300, seed=1)
    before = {p: os.path.getsize(os.path.join(a, p)) for p in os.listdir(a)}
    assert compact_cmd.main([a, "--out", str(tmp_path / "c"), "--buckets", "2"]) == 0
    assert "2 bucket(s)" in capsys.readouterr().out
    assert {p: os.path.getsize(os.path.join(a, p)) for p in os.listdir(a)} == before  # input untouched
    for argv, why in (([str(tmp_path / "nope")], "does not exist"),
                      ([a, "--out", str(tmp_path / "c")], "not an empty directory"),
                      ([str(tmp_path / "c"), "--out", str(tmp_path / "d")], "already compacted")):
        assert compact_cmd.main(argv) == 2
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert sorted(os.listdir(tmp_path / "c")) == [compact_events.EVENTS_DIR] + [
        cp.FILE_PATTERN.format(i) for i in range(2)]  # no spill left
    with pytest.raises(TraceError):
        cp.compact(str(tmp_path / "empty-nope"))
    assert not pc.any(pc.is_null(read_trace(str(tmp_path / "c"))[0].column("align_conn"))).as_py()



def test_two_recordings_in_one_directory_are_refused(pair, tmp_path) -> None:
    """seq must identify an exchange: the same segment twice would pair rows with each other."""
    a = pair[0]
    seg = sorted(p for p in os.listdir(a) if p.endswith(".parquet"))[0]
    os.makedirs(tmp_path / "twice")
    for copy in ("x-1.parquet", "x-2.parquet"):
        (tmp_path / "twice" / copy).write_bytes((Path(a) / seg).read_bytes())
    with pytest.raises(TraceError, match="seq repeats"):
        cp.compact(str(tmp_path / "twice"), str(tmp_path / "out"))


def test_gap_rows_go_to_the_null_key_bucket_and_every_file_has_one_schema(pair, tmp_path) -> None:
    """A gap row has no key: it lands where Spark hashes null, and the files (some without
    any null in a column) still share the declared schema, so they read as one table."""
    a = pair[0]
    os.makedirs(tmp_path / "t")
    for seg in sorted(p for p in os.listdir(a) if p.endswith(".parquet")):
        (tmp_path / "t" / seg).write_bytes((Path(a) / seg).read_bytes())
    gap = {name: None for name in ts.COLUMN_NAMES}
    gap.update(kind=ts.KIND_GAP, gap_count=3, gap_reason="trace writer backlog", schema_version=2)
    gap.update({name: [] for name, tp, _ in ts.FIELDS if pa.types.is_list(tp)})
    pq.write_table(pa.Table.from_pylist([gap], schema=ts.schema()), str(tmp_path / "t" / "zz-gap.parquet"))
    cp.compact(str(tmp_path / "t"), buckets=4)
    files = sorted((tmp_path / "t.v3").glob("*.parquet"))
    assert len({pq.read_schema(f).remove_metadata() for f in files}) == 1
    table, _ = read_trace(str(tmp_path / "t.v3"))
    assert table.num_rows == read_trace(a)[0].num_rows + 1
    gaps = pq.read_table(files[null_bucket(4)]).filter(pc.equal(pc.field("kind"), ts.KIND_GAP))
    assert gaps.num_rows == 1 and gaps.column("align_conn").null_count == 1
    os.makedirs(tmp_path / "only-gap")  # a bucket whose columns hold no null beside empty ones
    (tmp_path / "only-gap" / "g.parquet").write_bytes((tmp_path / "t" / "zz-gap.parquet").read_bytes())
    cp.compact(str(tmp_path / "only-gap"), buckets=4)
    assert read_trace(str(tmp_path / "only-gap.v3"))[0].to_pylist()[0]["gap_count"] == 3


def test_the_event_table_replayed_by_bucket_finds_what_the_pure_check_finds(tmp_path) -> None:
    """Compaction's event table (replay/compact_events.py), read bucket by bucket and route by
    route as the Spark check's mapInArrow reads it and streamed through the replays in chunks
    cut at entity ends, gives the pure check's violations, connection and api included; each
    file holds the entities of its Spark bucket, in (entity_key, seq) order, and only the
    columns its route's replay reads."""
    table, expected = build_table(2_000, seed=13)
    write_segments(table, str(tmp_path / "t"), rows_per_segment=700)
    cp.compact(str(tmp_path / "t"), buckets=3)
    files = compact_events.event_files(str(tmp_path / "t.v3"), 2_000)
    assert files is not None and sorted(files) == sorted(ev.ROUTE_COLUMNS) and all(len(f) == 3 for f in files.values())
    want = sorted((v["rule_id"], v["entity"], v["seq"], v["connection_id"], v["api_name"]) for v in check_table(table))
    assert {(r, s) for r, _, s, _, _ in want} == set(expected)
    for min_rows in (1, 10**9):  # an entity is never split across chunks, however small they are
        got = []
        for route, paths in files.items():
            for b, path in enumerate(paths):
                events = pq.read_table(path)
                assert set(events.column_names) == {"entity_key", "seq", "conn", "api_name", *ev.ROUTE_COLUMNS[route]}
                keys = events.column("entity_key").to_numpy()
                assert (spark_bucket(keys, 3) == b).all() and (keys[1:] >= keys[:-1]).all()
                for found in replay_sorted(events.to_batches(max_chunksize=64), CheckConfig(), route, min_rows=min_rows):
                    got += [(v["rule_id"], v["entity"], v["seq"], v["connection_id"], v["api_name"]) for v in found]
        assert sorted(got) == want


def test_compaction_writes_the_same_files_every_time(tmp_path) -> None:
    """Every file of two compactions of one trace holds the same rows in the same order:
    staging by bucket (replay/staged_write.py) and the per-file sort break every tie (a
    share fetch's acquired and acknowledged batches share one seq), so a trace compacted
    again, or by another machine, is the same evidence."""
    table, _ = build_table(3_000, seed=17)
    write_segments(table, str(tmp_path / "t"), rows_per_segment=1_000)
    for out in ("c1", "c2"):
        cp.compact(str(tmp_path / "t"), str(tmp_path / out), buckets=3)

    def files(root: Path) -> list[str]:
        return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet"))

    names = files(tmp_path / "c1")
    assert names == files(tmp_path / "c2") and len(names) == 3 + 3 * len(ev.ROUTE_COLUMNS)
    for name in names:
        first, second = pq.read_table(tmp_path / "c1" / name), pq.read_table(tmp_path / "c2" / name)
        assert first.num_rows > 0 or "events" in name
        assert first.equals(second), name


@pytest.mark.parametrize("error", ["memory", "disk", "corrupt"])
def test_running_out_of_memory_or_disk_is_not_called_a_corrupt_trace(error, tmp_path, monkeypatch, capsys) -> None:
    """DuckDB's out-of-memory error (the first 100M compaction's events pass) and a full disk
    are the machine's limits, not the trace's fault: one line that says which, exit 2; any
    other DuckDB error is still a corrupt trace."""
    table, _ = build_table(300, seed=3)
    write_segments(table, str(tmp_path / "t"))
    raised = {"memory": duckdb.OutOfMemoryException("failed to pin block of size 256.0 KiB"),
              "disk": duckdb.IOException("could not write file: No space left on device"),
              "corrupt": duckdb.InvalidInputException("bad parquet page")}[error]

    def fail(*_args, **_kwargs):
        raise raised

    monkeypatch.setattr(compact_events, "write_check_events", fail)
    assert compact_cmd.main([str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    if error == "corrupt":
        assert "corrupt trace segment" in err
    else:
        assert f"ran out of {error}" in err and "corrupt" not in err
