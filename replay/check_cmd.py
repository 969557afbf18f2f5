"""`kipcheck check DIR --out REPORT`: KIP-semantics invariants over one capture trace.

Exit codes: 0 no violation, 1 violations found, 2 error (bad input, Spark failure).

REPORT is a directory: `violations.parquet` (one row per rule, entity and exchange, with
requirement ids, connection and api of the exchange) and `summary.json` (what was read and
what was not, counts per rule, sample exchanges). A readable table goes to stdout.

Runs unchanged under spark-submit (`spark-submit --master URL replay/check_cmd.py DIR
--out REPORT`): the master spark-submit configured is kept; `--master` sets one
explicitly. `--engine auto` (the default) checks small traces without Spark
(replay/engine_choice.py says where the line is and why); `--engine spark|pure` forces one.

Bad input never gives a partial result silently: a missing directory, a corrupt or
truncated completed segment, an unknown schema version, or exchanges that could not be
decoded (e.g. an API version this kipcheck does not know) end with exit 2 and a message
naming the file and where, with counts of what was read and what was not;
`--skip-undecoded` checks the rest and reports the skipped rows in the summary.
Partial `.parquet.tmp` segments (a recorder stopped while writing) and gap rows are
listed in the summary and on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

if __package__ in (None, ""):  # run as a script (spark-submit replay/check_cmd.py)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from replay import check_events as ev  # noqa: E402
from replay import check_pure  # noqa: E402
from replay import engine_choice  # noqa: E402
from replay import trace_reader as tr  # noqa: E402
from replay.check_rules import BY_ID, RULES  # noqa: E402
from replay import compact_events  # noqa: E402
from replay.check_spark import SparkChecker, event_violations, load_trace  # noqa: E402
from replay.entity_replay import CheckConfig  # noqa: E402
from replay.spark_session import DEFAULT_SHUFFLE_PARTITIONS, failure_line, get_spark  # noqa: E402
from reports.usage import non_empty_path, positive_int, usage_line  # noqa: E402

SAMPLES_PER_RULE = 5
SMALL_TRACE = 100_000  # exchanges: below it the Spark job runs in 2 shuffle partitions
# At most this many exchanges a bucket on the recorded layout: a bucket is one Arrow table in
# one Python worker (applyInArrow), about 0.6 GB a million exchanges; at 100M exchanges in 8
# buckets a worker reached 7.4 GB and the kernel's OOM killer ended it (docs/trace-checks.md).
EXCHANGES_PER_BUCKET = 1_000_000
# defaults only (spark-submit --conf win); the driver memory default is get_spark's
SPARK_INPUT_EVENTS = "the check events of the compaction (_check_events)"
SPARK_INPUT_ROWS = "the trace rows, projected to events"
SPARK_CONF = {"spark.ui.showConsoleProgress": "false"}


class CheckInputError(Exception):
    """The trace cannot be checked as given (the message says where and why)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace_dir", metavar="DIR", help="trace directory written by kipcheck record")
    p.add_argument("--out", required=True, metavar="REPORT", type=non_empty_path,
                   help="report directory (violations.parquet, summary.json)")
    p.add_argument("--engine", choices=engine_choice.ENGINES, default=engine_choice.AUTO,
                   help=f"auto (default: pure up to {engine_choice.CHECK_PURE_LIMIT:,} exchanges, else Spark), "
                        "spark or pure")
    p.add_argument("--master", help="Spark master URL (default: what spark-submit set, else local[2]); implies Spark")
    p.add_argument("--lock-duration-ms", type=positive_int(), default=30_000,
                   help="share-group record lock duration (30000)")
    p.add_argument("--delivery-count-limit", type=positive_int(), default=5,
                   help="share-group delivery count limit (5)")
    p.add_argument("--skip-undecoded", action="store_true",
                   help="check the decoded exchanges when some could not be decoded (default: exit 2)")


# ----------------------------------------------------------------------------- input


@dataclass
class ScanStats:
    """What the check reports of the rows it read (either engine), and the topic name -> id
    pairs the Spark checker needs, gathered from validate_segments' decode pass: no second
    read, no Spark job of its own."""

    counts: Counter = field(default_factory=Counter)  # rows, gap_rows, gap_exchanges, exchanges, undecoded
    undecoded_first: list[dict] = field(default_factory=list)  # the 3 undecoded rows of lowest seq
    topic_pairs: set = field(default_factory=set)  # (topic, topic id) of partition entries of relevant exchanges

    def topic_ids(self) -> dict[str, str]:
        """Topic name -> the smallest topic id the trace gives it (as check_pure._topic_ids)."""
        out: dict[str, str] = {}
        for name, topic_id in self.topic_pairs:
            out[name] = min(out.get(name, topic_id), topic_id)
        return out

    def stats(self) -> dict[str, int]:
        return {k: int(self.counts[k]) for k in ("rows", "gap_rows", "gap_exchanges", "exchanges", "undecoded")}

    def visit(self, path: str, table: Any) -> None:
        table = tr.upgrade(table)  # a version-1 row group: the typed columns relevance reads
        kind = table.column("kind")
        gap = pc.fill_null(pc.equal(kind, "gap"), False)
        exchange = pc.invert(gap)
        undecoded = pc.and_(exchange, pc.is_valid(table.column("decode_error")))
        self.counts["rows"] += table.num_rows
        self.counts["gap_rows"] += pc.sum(gap).as_py() or 0
        self.counts["gap_exchanges"] += pc.sum(pc.filter(table.column("gap_count"), gap)).as_py() or 0
        self.counts["exchanges"] += pc.sum(exchange).as_py() or 0
        n_undecoded = pc.sum(undecoded).as_py() or 0
        self.counts["undecoded"] += n_undecoded
        if n_undecoded:
            rows = table.filter(undecoded).select(["seq", "api_key", "api_version", "decode_error"]).to_pylist()
            self.undecoded_first = sorted(self.undecoded_first + [{**r, "file": path} for r in rows],
                                          key=lambda r: r["seq"] if r["seq"] is not None else -1)[:3]
        entries = pc.list_flatten(table.filter(ev.relevant_mask(table)).column("partitions"))
        if len(entries):
            pairs = _topic_pairs(entries)
            self.topic_pairs.update(zip(pairs.column("t").to_pylist(), pairs.column("i").to_pylist()))


def _topic_pairs(entries: Any) -> Any:
    """The distinct (topic, topic id) pairs of partition entries naming both."""
    t = pa.table({"t": pc.struct_field(entries, "topic"), "i": pc.struct_field(entries, "topic_id")})
    t = t.filter(pc.and_(pc.is_valid(t.column("t")), pc.is_valid(t.column("i"))))
    return t.group_by(["t", "i"]).aggregate([])


def validate_segments(directory: str, scan: ScanStats | None = None) -> tuple[list[str], tr.TraceReport]:
    """Completed segments to read; raises TraceError naming the file (and offset) otherwise.

    Every column chunk is decoded here (pyarrow) whatever the engine, so Spark and the pure
    engine refuse exactly the same damaged input, with the same one-line message; `scan`
    gathers its statistics from the same decode."""
    if not os.path.isdir(directory):
        raise tr.TraceError(f"trace directory {directory} does not exist")
    done, partial = tr.list_segments(directory)
    report = tr.TraceReport()
    for path in done:
        size = os.path.getsize(path)
        bad = tr._check_footer(path, size)
        if bad is not None:
            raise tr.TraceCorruptError(path, bad[0], bad[1], report)
        try:
            version = tr.segment_version(path)
        except Exception as exc:  # noqa: BLE001 - any footer failure is corruption
            raise tr.TraceCorruptError(path, f"unreadable footer: {tr.one_line(exc)}", size - 8, report) from exc
        if version is None or not version.isdigit() or int(version) not in tr.ts.SUPPORTED_VERSIONS:
            raise tr.UnknownSchemaVersion(path, version)
        try:
            rows = tr.verify_segment(path, None if scan is None else (lambda t, p=path: scan.visit(p, t)))
        except tr.TraceCorruptError as exc:
            raise tr.TraceCorruptError(path, exc.why, exc.offset, report) from exc
        report.read.append(tr.SegmentInfo(path, size, rows))
    for path in partial:
        report.skipped.append(tr.SegmentInfo(path, os.path.getsize(path), 0,
                                             "partial segment: the recorder stopped while writing it"))
    if not done:
        raise tr.TraceError(f"trace directory {directory} holds no completed segment"
                            + (f" ({len(partial)} partial segment(s) skipped)" if partial else ""))
    return done, report


def _undecoded_error(rows: list[dict], total: int, exchanges: int) -> CheckInputError:
    first = "; ".join(f"{os.path.basename(r['file'] or '?')} seq {r['seq']} (api {r['api_key']} v{r['api_version']}): "
                      f"{r['decode_error']}" for r in rows[:3])
    return CheckInputError(f"{total} of {exchanges} exchange(s) could not be decoded, e.g. {first}; "
                           "rerun with --skip-undecoded to check the others")


# ----------------------------------------------------------------------------- engines


def run_pure(paths: list[str], scan: ScanStats, cfg: CheckConfig, skip_undecoded: bool) -> tuple[list[dict], dict]:
    stats = scan.stats()
    if stats["undecoded"] and not skip_undecoded:
        raise _undecoded_error(scan.undecoded_first, stats["undecoded"], stats["exchanges"])
    tables = [tr.read_segment(path).replace_schema_metadata(None) for path in paths]
    return check_pure.check_table(pa.concat_tables(tables), cfg), stats


def run_spark(paths: list[str], scan: ScanStats, cfg: CheckConfig, skip_undecoded: bool, master: str | None,
              out: str) -> tuple[Any, dict, str]:
    """The violations DataFrame (written to OUT, read back), the read statistics, and what
    the job read: the event table compaction wrote, or the trace rows it projects."""
    stats = scan.stats()
    if stats["undecoded"] and not skip_undecoded:
        raise _undecoded_error(scan.undecoded_first, stats["undecoded"], stats["exchanges"])
    spark = get_spark("kipcheck-check", master, SPARK_CONF)
    path = os.path.join(out, "violations.parquet")
    files = compact_events.event_files(os.path.dirname(paths[0]), stats["exchanges"])
    if files:
        event_violations(spark, files, cfg).write.mode("overwrite").parquet(path)
        return spark.read.parquet(path), stats, SPARK_INPUT_EVENTS
    df = load_trace(spark, paths)  # version 1 and 2 segments in one DataFrame
    buckets = max(int(spark.conf.get("spark.sql.shuffle.partitions")), -(-stats["exchanges"] // EXCHANGES_PER_BUCKET))
    if stats["exchanges"] < SMALL_TRACE and spark.conf.get("spark.sql.shuffle.partitions") == DEFAULT_SHUFFLE_PARTITIONS:
        # a small trace in many tasks pays per-task and per-Python-worker costs for nothing
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        buckets = 2
    checker = SparkChecker(spark, df, scan.topic_ids(), cfg, buckets=buckets)
    checker.violations().write.mode("overwrite").parquet(path)
    checker.unpersist()
    return spark.read.parquet(path), stats, SPARK_INPUT_ROWS


def spark_samples(vdf: Any) -> tuple[list[dict], dict[str, int]]:
    """The first SAMPLES_PER_RULE violations of each rule (by seq) and the count per rule,
    in one job (windows over the written violations) rather than one job per rule."""
    from pyspark.sql import Window  # heavy dependency: only the Spark engine needs it
    from pyspark.sql import functions as F  # heavy dependency: only the Spark engine needs it

    got = (vdf.withColumn("_n", F.row_number().over(Window.partitionBy("rule_id").orderBy("seq")))
           .withColumn("_count", F.count(F.lit(1)).over(Window.partitionBy("rule_id")))
           .filter(F.col("_n") <= SAMPLES_PER_RULE).collect())
    counts = {r["rule_id"]: int(r["_count"]) for r in got}
    rows = [{k: v for k, v in r.asDict().items() if k not in ("_n", "_count")} for r in got]
    return rows, counts


# ----------------------------------------------------------------------------- report


def summarize(rows: list[dict], counts: dict[str, int], stats: dict, report: tr.TraceReport, seconds: float,
              engine: str) -> dict:
    by_rule = {}
    for rule in RULES:
        samples = [r for r in rows if r["rule_id"] == rule.id][:SAMPLES_PER_RULE]
        by_rule[rule.id] = {
            "requirement_ids": list(rule.requirements), "violations": counts.get(rule.id, 0),
            "samples": [{k: s[k] for k in ("entity", "seq", "connection_id", "api_name", "detail")} for s in samples],
        }
    return {
        "engine": engine, "seconds": round(seconds, 3),
        "exchanges_per_second": round(stats.get("exchanges", 0) / seconds) if seconds > 0 else None,
        "segments_read": [{"file": s.path, "rows": s.rows} for s in report.read],
        "segments_skipped": [{"file": s.path, "bytes": s.size, "why": s.reason} for s in report.skipped],
        "read": stats, "violations": sum(counts.values()), "rules": by_rule,
    }


def text_table(summary: dict) -> str:
    lines = [f"{'rule':28} {'requirements':58} {'violations':>10}  first samples (seq, connection, api)"]
    for rid, r in summary["rules"].items():
        sample = ", ".join(f"{s['seq']}/{s['connection_id']}/{s['api_name']}" for s in r["samples"][:3])
        lines.append(f"{rid:28} {','.join(r['requirement_ids'])[:58]:58} {r['violations']:>10}  {sample}")
    st = summary["read"]
    lines.append(f"{st.get('exchanges', 0)} exchange(s) in {len(summary['segments_read'])} segment(s) checked in "
                 f"{summary['seconds']} s ({summary['engine']}); {summary['violations']} violation(s)")
    if st.get("gap_rows"):
        lines.append(f"trace has {st['gap_rows']} gap row(s): {st['gap_exchanges']} exchange(s) were not recorded")
    if st.get("undecoded"):
        lines.append(f"{st['undecoded']} exchange(s) could not be decoded and were not checked")
    for s in summary["segments_skipped"]:
        lines.append(f"skipped {os.path.basename(s['file'])} ({s['bytes']} bytes): {s['why']}")
    return "\n".join(lines)


def _error(what: str) -> int:
    print(usage_line("check", what), file=sys.stderr, flush=True)
    return 2


def _prepare_out(out: str) -> None:
    if os.path.exists(out) and not os.path.isdir(out):
        raise CheckInputError(f"--out {out} exists and is not a directory")
    os.makedirs(out, exist_ok=True)


def _check(args: argparse.Namespace, paths: list[str], scan: ScanStats, cfg: CheckConfig,
           engine: str) -> tuple[list[dict], Counter, dict]:
    if engine == "pure":
        rows, stats = run_pure(paths, scan, cfg, args.skip_undecoded)
        schema = pa.schema([("rule_id", pa.string()), ("requirement_ids", pa.string()), ("entity", pa.string()),
                            ("seq", pa.int64()), ("connection_id", pa.int64()), ("api_name", pa.string()),
                            ("detail", pa.string())])
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), os.path.join(args.out, "violations.parquet"))
        return rows, Counter(r["rule_id"] for r in rows), stats
    with engine_choice.SparkProgress("check", f"{scan.stats()['exchanges']} exchange(s)"):
        vdf, stats, spark_input = run_spark(paths, scan, cfg, args.skip_undecoded, args.master, args.out)
        rows, counts = spark_samples(vdf)
    return rows, Counter(counts), {**stats, "spark_input": spark_input}


def run(args: argparse.Namespace) -> int:
    cfg = CheckConfig(lock_duration_ms=args.lock_duration_ms, delivery_count_limit=args.delivery_count_limit)
    started = time.monotonic()
    try:
        scan = ScanStats()
        paths, report = validate_segments(args.trace_dir, scan)
        for s in report.skipped:
            print(f"kipcheck check: skipping {s.path} ({s.size} bytes): {s.reason}", file=sys.stderr)
        _prepare_out(args.out)
        choice = engine_choice.choose(args.engine, scan.stats()["exchanges"], engine_choice.CHECK_PURE_LIMIT,
                                      args.master)
        rows, counts, stats = _check(args, paths, scan, cfg, choice.engine)
    except (tr.TraceError, CheckInputError) as exc:
        return _error(str(exc))
    except Exception as exc:  # noqa: BLE001 - Spark/IO failures end the job with a reason, not a traceback
        return _error(f"the check failed: {failure_line(exc)}")
    unknown = set(counts) - set(BY_ID)
    if unknown:
        return _error(f"internal error: unknown rule ids {sorted(unknown)}")
    rows.sort(key=lambda r: (r["rule_id"], r["seq"]))
    summary = summarize(rows, dict(counts), stats, report, time.monotonic() - started, choice.engine)
    summary["engine_choice"] = choice.why
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(text_table(summary))
    return 1 if summary["violations"] else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kipcheck check", description="KIP-98 / KIP-932 invariants over one capture trace")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
