"""Benchmark `kipcheck diff`: Spark local[1] / local[2] against a DuckDB baseline.

``python -m benchmarks.trace_diff_bench [--quick] [--sizes 1000000,10000000] [--json OUT]``

Traces (replay.synthetic_diff_traces): A is a synthetic trace (replay.synthetic_traces,
anomalies off); B is A as a second run would record it — every producer id, member id and
topic id the "target" assigns is different — plus known response differences injected at
chosen exchanges (an error code, a partition's high watermark, a share delivery count, and
exchanges B lacks). Each engine must report exactly those, which the table's `ok` column checks.

Engines, all doing the same alignment, id normalization and column comparison
(diff_fields spec; the response-JSON walk is off, `--no-json`):

* spark local[1], spark local[2]: replay.diff_spark.run, each in its own process (one
  SparkSession per process; JVM start-up is not timed, reading the Parquet is);
* duckdb: the same diff written as SQL over the same Parquet files, in one process with
  DuckDB's default threads (the single-node tool a user might pick instead).

Throughput = exchanges of A / seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from replay import diff_fields as f
from replay.synthetic_diff_traces import make_traces
from benchmarks.trace_check_bench import (V3_PREFIX, event_log_conf, print_stages, run_for_result, stage_breakdown,
                                          tree_cpu_seconds)
from replay.compact import compact, occurrences_sql
from replay.diff_input import inspect_trace
from replay.spark_session import get_spark

QUICK_SIZES = (100_000, 1_000_000)
FULL_SIZES = (1_000_000, 10_000_000)


# --- DuckDB baseline --------------------------------------------------------------------------------------


def _sql_fmt(expr: str, fld: f.Field, slot: str | None) -> str:
    if fld.kind == "bool":
        return f"CASE WHEN {expr} IS NULL THEN 'null' WHEN {expr} THEN 'true' ELSE 'false' END"
    if fld.kind in ("bag", "seq"):
        arr = f"list_sort({expr})" if fld.kind == "bag" else expr
        return f"CASE WHEN {expr} IS NULL THEN 'null' ELSE '[' || array_to_string({arr}, ',') || ']' END"
    s = f"CAST({expr} AS VARCHAR)"
    if fld.category is not None and slot is not None:
        s = f"coalesce(map_extract_value(_ids, {slot}), {s})"
    return f"coalesce({s}, 'null')"


_SLOT = {(column, sub): slot for slot, column, sub, _ in f.ID_SLOTS}


def _normalized_select() -> str:
    cols = ["seq", "connection_id", "api_key", "api_name", "error_code", "request_mono_ns", "_client", "_conn_ord",
            "_api_ord"]
    for x in f.SCALARS:
        slot = _SLOT.get((x.name, None))
        cols.append(f"{_sql_fmt(x.name, x, None if slot is None else str(slot))} AS n_{x.name}")
    for column, fields in f.LISTS:
        parts = []
        for x in fields:
            slot = _SLOT.get((column, x.name))
            parts.append(f"'{x.name}': {_sql_fmt('e.' + x.name, x, None if slot is None else f'{slot} + i - 1')}")
        cols.append(f"list_transform(coalesce({column}, []), lambda e, i: {{{', '.join(parts)}}}) AS n_{column}")
    return ", ".join(cols)


def _duck_prepare(con: Any, name: str, files: list[str]) -> None:
    cols = ", ".join(c for c in f.READ_COLUMNS if c not in ("kind", "decode_error"))
    names = " || ".join(f"list_transform(coalesce({c}, []), lambda e: {{'tid': e.topic_id, 'name': e.topic}})"
                        for c in f.TOPIC_NAME_LISTS)
    con.execute(f"""
CREATE OR REPLACE TEMP TABLE {name}_raw AS SELECT {cols} FROM read_parquet({files!r})
  WHERE kind = 'exchange' AND decode_error IS NULL;
CREATE OR REPLACE TEMP TABLE {name}_conn AS
  SELECT connection_id, _client, row_number() OVER (PARTITION BY _client ORDER BY _first, connection_id) AS _conn_ord
  FROM (SELECT connection_id, max(coalesce(client_id, '')) AS _client, min(request_mono_ns) AS _first
        FROM {name}_raw GROUP BY connection_id);
CREATE OR REPLACE TEMP TABLE {name}_k AS
  SELECT r.*, c._client, c._conn_ord,
         row_number() OVER (PARTITION BY r.connection_id, r.api_key ORDER BY r.request_mono_ns, r.seq) AS _api_ord
  FROM {name}_raw r JOIN {name}_conn c USING (connection_id);
CREATE OR REPLACE TEMP TABLE {name}_occ AS
  SELECT seq, _client, _conn_ord, request_mono_ns, o.slot AS slot, o.cat AS cat, o.value AS value
  FROM (SELECT seq, _client, _conn_ord, request_mono_ns, unnest({occurrences_sql()}) AS o FROM {name}_k)
  WHERE NOT (o.value IS NULL OR (o.cat = 'producer_id' AND TRY_CAST(o.value AS BIGINT) < 0)
             OR (o.cat = 'member_id' AND o.value = '') OR (o.cat = 'topic_id' AND o.value IN ('{f.ZERO_UUID}', '')));
CREATE OR REPLACE TEMP TABLE {name}_names AS
  SELECT e.tid AS tid, min(e.name) AS name FROM (SELECT unnest({names}) AS e FROM {name}_k)
  WHERE e.tid IS NOT NULL AND e.name IS NOT NULL GROUP BY 1;
CREATE OR REPLACE TEMP TABLE {name}_ph AS
  SELECT cat, value, '<' || cat || '#' || CAST(row_number() OVER (PARTITION BY cat ORDER BY o, value) AS VARCHAR) || '>' AS ph
  FROM (SELECT cat, value, min({{'c': _client, 'o': _conn_ord, 't': request_mono_ns, 's': seq, 'l': slot}}) AS o
        FROM {name}_occ WHERE NOT (cat = 'topic_id' AND value IN (SELECT tid FROM {name}_names)) GROUP BY cat, value)
  UNION ALL SELECT 'topic_id', tid, '<topic_id:' || name || '>' FROM {name}_names;
CREATE OR REPLACE TEMP TABLE {name}_ids AS
  SELECT o.seq, map_from_entries(list({{'k': o.slot, 'v': p.ph}})) AS _ids
  FROM {name}_occ o JOIN {name}_ph p USING (cat, value) GROUP BY o.seq;
CREATE OR REPLACE TEMP TABLE {name}_n AS
  SELECT {_normalized_select()} FROM {name}_k LEFT JOIN {name}_ids USING (seq);
""")


_N_COLS = ["seq", "connection_id", "api_key", "api_name", "error_code", "request_mono_ns", "_client", "_conn_ord",
           "_api_ord"] + [f"n_{x.name}" for x in f.SCALARS] + [f"n_{c}" for c, _ in f.LISTS]


def _both(a: str, b: str) -> str:
    return ", ".join([f"{a}.{c} AS a_{c}" for c in _N_COLS] + [f"{b}.{c} AS b_{c}" for c in _N_COLS])


def _differences_sql() -> str:
    diff_type = "STRUCT(path VARCHAR, a VARCHAR, b VARCHAR)[]"
    scalars = ", ".join(f"CASE WHEN a_n_{x.name} <> b_n_{x.name} THEN {{'path': '{x.name}', 'a': a_n_{x.name}, "
                        f"'b': b_n_{x.name}}} END" for x in f.SCALARS)
    parts = [f"list_filter([{scalars}], lambda d: d IS NOT NULL)"]
    for column, fields in f.LISTS:
        la, lb = f"a_n_{column}", f"b_n_{column}"
        entries = ", ".join(
            f"{{'path': '{column}[' || CAST(i AS VARCHAR) || '].{x.name}', "
            f"'a': coalesce({la}[i + 1].{x.name}, '{f.MISSING_VALUE}'), 'b': coalesce({lb}[i + 1].{x.name}, '{f.MISSING_VALUE}')}}"
            for x in fields)
        parts.append(f"CASE WHEN {la} = {lb} THEN []::{diff_type} ELSE list_filter(flatten(list_transform("
                     f"range(greatest(len({la}), len({lb}))), lambda i: [{entries}])), lambda d: d.a <> d.b) END")
    return " || ".join(parts)


def _idle_sql(p: str) -> str:
    """diff_fields.is_idle_poll over the normalized columns of one side."""
    apis = ", ".join(f"'{a}'" for a in sorted(f.POLL_APIS))
    return (f"CASE WHEN {p}api_name IN ({apis}) AND {p}n_error_code IN ('0', 'null') "
            f"AND {p}n_error_codes IN ('[]', 'null') AND len({p}n_acquired_records) = 0 "
            f"AND NOT coalesce(list_bool_or(list_transform({p}n_batches, lambda b: b.side = 'response')), false) "
            f"THEN '{f.IDLE_POLL_FIELD}' ELSE '{f.EXCHANGE_FIELD}' END")


DUCKDB_MEMORY_LIMIT = "12GB"  # half of the project's 24 GiB machine; DuckDB spills beyond it


def duckdb_diff(a_files: list[str], b_files: list[str]) -> tuple[list[tuple], float]:
    """(divergence (kind, a_seq, path) rows, seconds) of the SQL diff."""
    import duckdb  # optional heavy dependency: only the SQL baseline needs it

    # DuckDB takes 80 % of the machine's memory by default: at 10M exchanges it held 21 GB
    # and the OOM killer took the benchmark (a standalone cluster's daemons were up beside it)
    con = duckdb.connect(config={"memory_limit": DUCKDB_MEMORY_LIMIT})
    t0 = time.perf_counter()
    _duck_prepare(con, "a", a_files)
    _duck_prepare(con, "b", b_files)
    con.execute(f"""
CREATE OR REPLACE TEMP TABLE j1 AS SELECT {_both('a', 'b')} FROM a_n a FULL OUTER JOIN b_n b
  ON a._client = b._client AND a._conn_ord = b._conn_ord AND a.api_key = b.api_key AND a._api_ord = b._api_ord;
CREATE OR REPLACE TEMP TABLE la AS SELECT {', '.join('a_' + c for c in _N_COLS)},
  row_number() OVER (PARTITION BY a__client, a_api_key ORDER BY a_request_mono_ns, a_seq) AS lo FROM j1 WHERE b_seq IS NULL;
CREATE OR REPLACE TEMP TABLE lb AS SELECT {', '.join('b_' + c for c in _N_COLS)},
  row_number() OVER (PARTITION BY b__client, b_api_key ORDER BY b_request_mono_ns, b_seq) AS lo FROM j1 WHERE a_seq IS NULL;
CREATE OR REPLACE TEMP TABLE pairs AS
  SELECT * EXCLUDE (lo_a, lo_b) FROM (
    SELECT j1.*, NULL AS lo_a, NULL AS lo_b, 'connection' AS align FROM j1 WHERE a_seq IS NOT NULL AND b_seq IS NOT NULL
    UNION ALL BY NAME
    SELECT la.* EXCLUDE (lo), lb.* EXCLUDE (lo), la.lo AS lo_a, lb.lo AS lo_b,
           CASE WHEN la.a_seq IS NOT NULL AND lb.b_seq IS NOT NULL THEN 'client' END AS align
    FROM la FULL OUTER JOIN lb ON la.a__client = lb.b__client AND la.a_api_key = lb.b_api_key AND la.lo = lb.lo);
CREATE OR REPLACE TEMP TABLE divergences AS
  SELECT 'field' AS kind, a_seq, b_seq, coalesce(a_api_name, 'api_' || CAST(a_api_key AS VARCHAR)) AS api_name,
         d.path AS path, regexp_replace(d.path, '\\[\\d+\\]', '[]', 'g') AS field, d.a AS a_value, d.b AS b_value
  FROM (SELECT *, unnest({_differences_sql()}) AS d FROM pairs WHERE align IS NOT NULL)
  UNION ALL
  SELECT CASE WHEN a_seq IS NOT NULL THEN 'only_in_a' ELSE 'only_in_b' END, a_seq, b_seq, api, field, field,
         NULL, NULL
  FROM (SELECT *, CASE WHEN a_seq IS NOT NULL THEN {_idle_sql('a_')} ELSE {_idle_sql('b_')} END AS field,
               coalesce(a_api_name, b_api_name) AS api FROM pairs WHERE align IS NULL);
""")
    con.execute("SELECT kind, api_name, field, count(*) FROM divergences GROUP BY ALL").fetchall()  # the summary
    elapsed = time.perf_counter() - t0
    rows = con.execute("SELECT kind, a_seq, path FROM divergences").fetchall()
    con.close()
    return rows, elapsed


# --- Spark worker -----------------------------------------------------------------------------------------


def spark_diff(master: str, a_dir: str, b_dir: str, log_dir: str | None = None) -> tuple[list[tuple], float]:
    from replay import diff_spark  # imports pyspark (heavy): only the Spark child needs it
    conf = {**diff_spark.SPARK_CONF, **(event_log_conf(log_dir) if log_dir else {})}
    spark = get_spark("kipcheck-diff-bench", master, conf=conf)
    spark.range(1).count()  # JVM and session warm: not timed
    cpu0, t0 = tree_cpu_seconds(os.getpid()), time.perf_counter()
    a, b = inspect_trace(a_dir), inspect_trace(b_dir)
    rows, _ = diff_spark.run(spark, a, b, None, with_json=False)
    elapsed = time.perf_counter() - t0
    found = [(r["kind"], r["a_seq"], r["path"]) for r in rows.select("kind", "a_seq", "path").collect()]
    print(f"# spark {master}: {tree_cpu_seconds(os.getpid()) - cpu0:.1f} CPU-s (driver, JVM, Python workers)",
          file=sys.stderr, flush=True)
    spark.stop()
    return found, elapsed


def _worker(argv: list[str]) -> int:
    master, a_dir, b_dir, *log = argv
    found, elapsed = spark_diff(master, a_dir, b_dir, log[0] if log else None)
    stages = stage_breakdown(log[0]) if log else []
    print("RESULT " + json.dumps({"seconds": elapsed, "found": found, "stages": stages}))
    return 0


def compacted(trace_dir: str) -> str:
    """The schema-3 copy of a trace (kipcheck compact), made once; its time is printed, not
    counted in the diff's."""
    out = trace_dir.rstrip("/") + ".v3"
    if not os.path.isdir(out):
        c = compact(trace_dir)
        print(f"# compacted {trace_dir} ({c.rows:,} rows) in {c.seconds:.1f} s", flush=True)
    return out


def _run_spark_process(master: str, a_dir: str, b_dir: str, timeout: float, root: str | None = None,
                       v3: bool = False, stages: bool = False) -> tuple[list[tuple], float]:
    """One Spark diff in a child process, on the code of checkout `root` (default: this one);
    v3: of the compacted traces; stages: print the per-stage breakdown of its event log."""
    if v3:
        a_dir, b_dir = compacted(a_dir), compacted(b_dir)
    log = [tempfile.mkdtemp(prefix="kipcheck-events-")] if stages else []
    r, out = run_for_result(["-m", "benchmarks.trace_diff_bench", "--worker", master, a_dir, b_dir, *log], root,
                            timeout)
    if r is None:
        raise RuntimeError(f"spark {master} failed (exit {out.returncode}): {out.stderr[-2000:]}")
    if stages:
        print_stages(r["stages"])
    return [tuple(x) for x in r["found"]], r["seconds"]


# --- main -------------------------------------------------------------------------------------------------


def _check(found: list[tuple], expected: set) -> str:
    got = {(k, s, p) for k, s, p in found}
    if got == expected and len(found) == len(expected):
        return "ok"
    return f"WRONG: {len(got - expected)} unexpected, {len(expected - got)} missed"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        return _worker(argv[1:])
    p = argparse.ArgumentParser(prog="python -m benchmarks.trace_diff_bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES} instead of {FULL_SIZES}")
    p.add_argument("--sizes", help="comma-separated exchange counts (overrides the preset)")
    p.add_argument("--engines", default="duckdb,local[1],local[2],v3:local[2]",
                   help="duckdb and/or Spark masters; v3:MASTER diffs the compacted traces (kipcheck compact)")
    p.add_argument("--dir", help="where to write the traces (default: a temporary directory, removed)")
    p.add_argument("--timeout", type=float, default=3600.0, help="per Spark run, seconds")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--stages", action="store_true", help="print each Spark run's per-stage breakdown (event log)")
    a = p.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else list(QUICK_SIZES if a.quick else FULL_SIZES)
    base = a.dir or tempfile.mkdtemp(prefix="kipcheck-diff-bench-")
    results = []
    print(f"{'engine':<10} {'exchanges':>11} {'seconds':>9} {'exch/s':>11} {'found':>6}  check")
    try:
        for n in sizes:
            d = os.path.join(base, f"n{n}")
            t0 = time.perf_counter()
            a_dir, b_dir, expected = make_traces(d, n, a.seed)
            print(f"# {n} exchanges: traces written in {time.perf_counter() - t0:.1f} s, "
                  f"{len(expected)} injected differences", flush=True)
            a_files = sorted(os.path.join(a_dir, x) for x in os.listdir(a_dir))
            b_files = sorted(os.path.join(b_dir, x) for x in os.listdir(b_dir))
            for engine in a.engines.split(","):
                try:
                    if engine == "duckdb":
                        found, secs = duckdb_diff(a_files, b_files)
                    else:
                        found, secs = _run_spark_process(engine.removeprefix(V3_PREFIX), a_dir, b_dir, a.timeout,
                                                         v3=engine.startswith(V3_PREFIX), stages=a.stages)
                    row = {"engine": engine, "exchanges": n, "seconds": round(secs, 2),
                           "exchanges_per_s": round(n / secs), "found": len(found), "check": _check(found, expected)}
                except Exception as exc:  # noqa: BLE001 - report the failed row, run the others
                    row = {"engine": engine, "exchanges": n, "seconds": None, "exchanges_per_s": None, "found": None,
                           "check": f"failed: {type(exc).__name__}: {str(exc)[:300]}"}
                results.append(row)
                print(f"{row['engine']:<10} {n:>11} {row['seconds'] if row['seconds'] is not None else '-':>9} "
                      f"{row['exchanges_per_s'] if row['exchanges_per_s'] is not None else '-':>11} "
                      f"{row['found'] if row['found'] is not None else '-':>6}  {row['check']}", flush=True)
            shutil.rmtree(d, ignore_errors=True)
    finally:
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0 if all(r["check"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
