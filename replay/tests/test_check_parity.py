"""Spark and pure `kipcheck check` agree: on a synthetic trace with every anomaly kind
(both find exactly the injected ones) and on a clean trace recorded through the capture
proxy from real clients against the reference broker (both find nothing).

One SparkSession for the module (local[2]); it is stopped at the end.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from replay.synthetic_traces import ANOMALY_KINDS, build_table, write_segments
from reference_impl.server.broker_server import ThreadedReferenceCluster
from replay import check_cmd
from replay import compact_events
from replay.check_events import ROUTE_COLUMNS
from replay.check_spark import SparkChecker, load_trace
from replay.compact import compact
from replay.check_pure import check_table
from replay.spark_session import get_spark
from replay.tests.test_check_real_trace import assert_covers_every_entity_kind, record_workload
from replay.trace_reader import read_trace

# Spark start-up plus a job on 2 cores shared with the rest of CI: 300 s was exceeded under
# load, and a job cut off mid-way broke the worker's JVM gateway for the next Spark tests.
pytestmark = pytest.mark.deadline(900)


@pytest.fixture(scope="module")
def spark():
    s = get_spark("kipcheck-check-tests", "local[2]", {"spark.ui.showConsoleProgress": "false",
                                                       "spark.sql.shuffle.partitions": "4"})
    yield s
    s.stop()


def pure_found(table) -> set[tuple[str, str, int]]:
    return {(v["rule_id"], v["entity"], v["seq"]) for v in check_table(table)}


@pytest.mark.nightly  # .ci/run: the standalone-cluster test checks a synthetic trace against the pure engine
def test_spark_and_pure_find_exactly_the_injected_anomalies(spark, tmp_path):
    """The CLI on Spark (as a user runs it; reuses the module's session) against the pure
    checker on a synthetic trace with every anomaly kind."""
    table, expected = build_table(2_500, seed=11)
    write_segments(table, str(tmp_path / "t"), rows_per_segment=1_000)
    assert sorted(r for r, _ in expected) == sorted(ANOMALY_KINDS)
    assert check_cmd.main([str(tmp_path / "t"), "--out", str(tmp_path / "rep"), "--engine", "spark"]) == 1
    v = spark.read.parquet(str(tmp_path / "rep" / "violations.parquet")).collect()
    pure = pure_found(table)
    assert {(r.rule_id, r.entity, r.seq) for r in v} == pure
    assert {(rule, seq) for rule, _, seq in pure} == set(expected)
    assert all(r.requirement_ids and r.api_name and r.connection_id is not None for r in v)
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    got = {(rule, s["seq"]) for rule, r in summary["rules"].items() for s in r["samples"]}
    assert got == set(expected) and summary["violations"] == len(expected) and summary["engine"] == "spark"
    assert len(summary["segments_read"]) == 3 and summary["read"]["exchanges"] == 2_500


@pytest.fixture(scope="module")
def reference_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("reference-trace")
    with ThreadedReferenceCluster(brokers=1) as cluster:
        done = record_workload(cluster.bootstrap_servers.split(",")[0], str(d))
    assert done["committed_read"] == 20 and done["share_done"] == 40
    return str(d)


def test_clean_reference_trace_has_no_violation_in_both_engines(spark, reference_trace, tmp_path, capsys):
    table, _ = read_trace(reference_trace)
    assert_covers_every_entity_kind(table)
    assert pure_found(table) == set()
    assert check_cmd.main([reference_trace, "--out", str(tmp_path / "rep"), "--engine", "spark"]) == 0
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["engine"] == "spark" and summary["violations"] == 0
    assert summary["read"]["exchanges"] == table.num_rows
    assert "0 violation(s)" in capsys.readouterr().out
    compact(reference_trace, str(tmp_path / "v3"))  # and its compacted copy, through the event table
    assert check_cmd.main([str(tmp_path / "v3"), "--out", str(tmp_path / "rep3"), "--engine", "spark"]) == 0
    summary = json.loads((tmp_path / "rep3" / "summary.json").read_text())
    assert summary["read"]["spark_input"] == check_cmd.SPARK_INPUT_EVENTS and summary["violations"] == 0


def test_a_large_recorded_trace_is_replayed_in_buckets_of_bounded_size(spark, tmp_path, monkeypatch):
    """A bucket of the recorded layout is one Arrow table in one Python worker, so the bucket
    count grows with the trace (at 100M exchanges in 8 buckets a worker was OOM-killed at
    7.4 GB): here a bound of 100 exchanges a bucket makes 25 buckets of a 2,500-exchange
    trace, and the result is still the pure engine's."""
    table, expected = build_table(2_500, seed=13)
    write_segments(table, str(tmp_path / "t"), rows_per_segment=1_000)
    built = []

    class Recording(SparkChecker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self.buckets)

    monkeypatch.setattr(check_cmd, "EXCHANGES_PER_BUCKET", 100)
    monkeypatch.setattr(check_cmd, "SMALL_TRACE", 0)  # the small-trace shortcut would make it 2
    monkeypatch.setattr(check_cmd, "SparkChecker", Recording)
    assert check_cmd.main([str(tmp_path / "t"), "--out", str(tmp_path / "rep"), "--engine", "spark"]) == 1
    assert built == [25]
    v = spark.read.parquet(str(tmp_path / "rep" / "violations.parquet")).collect()
    assert {(r.rule_id, r.entity, r.seq) for r in v} == pure_found(table)
    assert {(r.rule_id, r.seq) for r in v} == set(expected)


def test_spark_check_of_a_compacted_trace_equals_the_pure_check(spark, tmp_path):
    """Schema 3 (kipcheck compact, 2 -> 3): the Spark check reads the event table compaction
    wrote (one mapInArrow over its buckets) and finds what the pure check finds on the
    recorded segments, connection and api included."""
    table, expected = build_table(1_300, seed=7)
    write_segments(table, str(tmp_path / "t"), rows_per_segment=500)
    compact(str(tmp_path / "t"), buckets=3)
    assert check_cmd.main([str(tmp_path / "t.v3"), "--out", str(tmp_path / "rep"), "--engine", "spark"]) == 1
    v = spark.read.parquet(str(tmp_path / "rep" / "violations.parquet")).collect()
    assert {(r.rule_id, r.entity, r.seq, r.connection_id, r.api_name) for r in v} == {
        (x["rule_id"], x["entity"], x["seq"], x["connection_id"], x["api_name"]) for x in check_table(table)}
    assert {(r.rule_id, r.seq) for r in v} == set(expected)
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["read"]["spark_input"] == check_cmd.SPARK_INPUT_EVENTS


def event_rows(df, route: str) -> list[tuple]:
    cols = ["seq", "conn", "api_name", *(c for c in ROUTE_COLUMNS[route] if c not in ("seq", "conn"))]
    return sorted((tuple(r) for r in df.select(*cols).collect()), key=repr)


def test_compaction_writes_the_events_the_spark_projection_builds(spark, tmp_path):
    """The event table of compact_events (DuckDB SQL) holds exactly the rows Spark's own
    projection and transaction link build from the same trace (check_spark.SparkChecker),
    route by route on the columns each replay reads: the two SQL texts of one selection
    cannot drift apart unseen."""
    table, _ = build_table(2_500, seed=3)
    write_segments(table, str(tmp_path / "t"), rows_per_segment=1_000)
    compact(str(tmp_path / "t"), buckets=4)
    paths = sorted(str(p) for p in (tmp_path / "t").glob("*.parquet"))
    scan = check_cmd.ScanStats()
    check_cmd.validate_segments(str(tmp_path / "t"), scan)
    checker = SparkChecker(spark, load_trace(spark, paths), scan.topic_ids())
    flat = checker.flat_events()
    built = flat.where("route <> 'link'").unionByName(checker.linked(flat)).cache()
    assert {r.route for r in built.select("route").distinct().collect()} == set(ROUTE_COLUMNS)
    for route in ROUTE_COLUMNS:
        written = spark.read.parquet(str(tmp_path / "t.v3" / compact_events.EVENTS_DIR / route))
        assert written.count() > 0, route
        assert event_rows(written, route) == event_rows(built.where(f"route = '{route}'"), route), route


def test_a_stale_event_table_is_not_read(spark, tmp_path):
    """Event files whose source exchange count is not the trace's (a compacted directory
    edited afterwards) are ignored: the check projects the exchanges itself."""
    table, expected = build_table(600, seed=5)
    write_segments(table, str(tmp_path / "t"), rows_per_segment=600)
    compact(str(tmp_path / "t"), buckets=2)
    assert compact_events.event_files(str(tmp_path / "t.v3"), 600)
    assert compact_events.event_files(str(tmp_path / "t.v3"), 599) is None
    shard = sorted((tmp_path / "t.v3").glob("exchanges_*.parquet"))[0]
    kept = pq.read_table(shard)
    pq.write_table(kept.slice(0, kept.num_rows - 1), shard)  # one exchange fewer than compaction saw
    assert check_cmd.main([str(tmp_path / "t.v3"), "--out", str(tmp_path / "rep"), "--engine", "spark"]) in (0, 1)
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["read"]["spark_input"] == check_cmd.SPARK_INPUT_ROWS
