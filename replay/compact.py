"""`kipcheck compact`: rewrite a recorded trace in the layout check and diff read (schema 3).

A recording's segments (schema 1 or 2) are in write order, and every Spark diff used to
spend most of its time re-deriving, per trace, what never changes after the recording:
the alignment key of each exchange (connection ordinal within its client, request
fingerprint, api ordinal; replay/diff_fields.py) and the trace-wide id placeholders.
Compaction computes them once, with DuckDB (vectorized, spills to disk), and writes with
pyarrow, in the declared schema (trace_schema.schema(3)):

* every version-2 column unchanged (so every reader of a trace reads a compacted one),
  plus the flat key columns of trace_schema.FIELDS_V3;
* one file per bucket, ``exchanges_BBBBB.parquet``, bucket = Spark's own bucket function
  of the int64 ``align_conn`` (Murmur3 x86_32, seed 42, pmod N: `spark_bucket`), so Spark
  reads the files as a bucketed table and joins bucket i of trace A with bucket i of trace
  B without a shuffle (replay/diff_spark.py, `load_v3`); rows sorted by the alignment key;
* Parquet key/value metadata: schema_version 3, bucket count, bucket column and hash,
  sort columns;
* the check's flat event table, ``_check_events/`` (replay/compact_events.py), so a check
  of the compacted trace reads events instead of projecting nested columns.

``align_conn`` is a hash of (client, connection ordinal) only, never of a trace-specific
value, so the same connection of two runs lands in the same bucket. Rows without a key
(gaps, undecoded exchanges) go where Spark puts a null key (bucket of the seed).
The input is never modified; ``out_dir`` must not exist or be empty.

Temporary disk stays near the compressed trace's size (replay/staged_write.py), in passes:
the trace-wide key tables are narrow (connections; id occurrences staged by bucket, then the
placeholder per distinct id); every row is then staged once, compressed, by bucket; and each
bucket is numbered (api_ord is connection-local, a bucket holds whole connections), joined
with its placeholders, sorted and written on its own. Until 2026-12-05 one DuckDB table held
the whole joined trace: at 10M exchanges its spill reached 9 GB, so 100M did not fit here.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from replay import diff_fields as f
from replay import trace_reader as tr
from replay import trace_schema as ts
from replay import compact_events
from replay import staged_write as sw
from replay.spark_hash import null_bucket, spark_bucket, stable_key
from reference_impl.protocol.api_keys import ApiKey

DEFAULT_BUCKETS = 8
FILE_PATTERN = "exchanges_{:05d}.parquet"  # Spark reads the bucket id from the `_N` suffix
DUCKDB_MEMORY_LIMIT = "4GB"  # spills beyond it (temp dir next to the output)


class CompactionResourceError(tr.TraceError):
    """Compaction ran out of memory or temporary disk: the trace is not at fault (it used to
    be reported as a corrupt segment; the first 100M compaction, 2026-12-05)."""

    def __init__(self, trace_dir: str, what: str, exc: BaseException) -> None:
        super().__init__(f"compaction of {trace_dir} ran out of {what} (the trace itself is fine): {tr.one_line(exc)}; "
                         f"DuckDB may use {DUCKDB_MEMORY_LIMIT} and spills next to the output: free disk there "
                         "or give the trace more --buckets")


@dataclass(frozen=True)
class CompactResult:
    out_dir: str
    buckets: int
    rows: int
    exchanges: int
    seconds: float


def align_conn_key(client: str, conn_ord: int) -> int:
    """The int64 bucket key of (client, connection ordinal): the same in every trace."""
    return stable_key(client, conn_ord)


# --- the key tables, in DuckDB ----------------------------------------------------------------------


def occurrences_sql() -> str:
    """Every id occurrence of an exchange as (cat, value, slot): diff_fields.ID_SLOTS (a DuckDB
    list expression; the DuckDB diff of benchmarks/trace_diff_bench.py reads the same)."""
    parts = []
    for slot, column, sub, cat in f.ID_SLOTS:
        if sub is None:
            parts.append(f"[{{'cat': '{cat}', 'value': CAST({column} AS VARCHAR), 'slot': {slot}}}]")
        else:
            parts.append(f"list_transform(coalesce({column}, []), lambda e, i: "
                         f"{{'cat': '{cat}', 'value': CAST(e.{sub} AS VARCHAR), 'slot': CAST({slot} + i - 1 AS INTEGER)}})")
    return " || ".join(parts)


def _request_key_sql() -> str:
    """diff_fields.request_fingerprint."""
    return (f"CASE WHEN api_key = {int(ApiKey.METADATA)} "
            "THEN array_to_string(list_sort(list_distinct(coalesce(topics, []))), ',') "
            f"WHEN api_key = {int(ApiKey.FIND_COORDINATOR)} THEN coalesce(group_id, transactional_id, '') ELSE '' END")


def _keyed(alias: str = "") -> str:
    """The rows with an alignment key (decoded exchanges), of the relation `alias` if given."""
    q = f"{alias}." if alias else ""
    return f"{q}kind = 'exchange' AND {q}decode_error IS NULL"


OCC_DIR = "occ"  # staging of the id occurrences


def _connections(con) -> None:
    """`conn` (connection -> client, ordinal within its client): one row per connection."""
    con.execute(f"""
CREATE TEMP TABLE conn AS SELECT connection_id, align_client,
  row_number() OVER (PARTITION BY align_client ORDER BY first, connection_id) AS conn_ord
  FROM (SELECT connection_id, max(coalesce(client_id, '')) AS align_client, min(request_mono_ns) AS first
        FROM src WHERE {_keyed()} GROUP BY connection_id)""")


def _placeholders(con, staging: str) -> str:
    """`ph` ((category, id) -> placeholder, trace-wide), from every id occurrence of a keyed
    exchange staged by bucket (narrow rows, compressed: never a copy of the trace); returns
    the occurrences' staging directory."""
    names = " || ".join(f"list_transform(coalesce({c}, []), lambda e: {{'tid': e.topic_id, 'name': e.topic}})"
                        for c in f.TOPIC_NAME_LISTS)
    occ = os.path.join(staging, OCC_DIR)
    sw.stage(con, f"""SELECT seq, bucket, o.cat AS cat, o.value AS value, o.slot AS slot,
  {{'c': align_client, 'o': conn_ord, 't': request_mono_ns, 's': seq, 'l': o.slot}} AS ord
  FROM (SELECT s.seq, s.request_mono_ns, c.align_client, c.conn_ord, c.bucket, unnest({occurrences_sql()}) AS o
        FROM src s JOIN ck c USING (connection_id) WHERE {_keyed("s")})
  WHERE NOT (o.value IS NULL OR (o.cat = 'producer_id' AND TRY_CAST(o.value AS BIGINT) < 0)
             OR (o.cat = 'member_id' AND o.value = '') OR (o.cat = 'topic_id' AND o.value IN ('{f.ZERO_UUID}', '')))""",
             occ, ("bucket",))
    con.execute(f"""
CREATE TEMP TABLE tnames AS SELECT x.tid AS tid, min(x.name) AS name FROM (SELECT unnest({names}) AS x FROM src WHERE {_keyed()})
  WHERE x.tid IS NOT NULL AND x.name IS NOT NULL GROUP BY 1;
CREATE TEMP TABLE ph AS
  SELECT cat, value, '<' || cat || '#' || CAST(row_number() OVER (PARTITION BY cat ORDER BY ord, value) AS VARCHAR) || '>' AS ph
  FROM (SELECT cat, value, min(ord) AS ord FROM {_occurrences(occ)}
        WHERE NOT (cat = 'topic_id' AND value IN (SELECT tid FROM tnames)) GROUP BY cat, value)
  UNION ALL SELECT 'topic_id', tid, '<topic_id:' || name || '>' FROM tnames;
DROP TABLE tnames""")
    return occ


def _occurrences(occ: str) -> str:
    """Every staged occurrence (an empty relation when the trace has none: only gaps)."""
    pattern = os.path.join(occ, "*", "*.parquet")
    if not glob.glob(pattern):
        return ("(SELECT NULL::VARCHAR AS cat, NULL::VARCHAR AS value, "
                "NULL::STRUCT(c VARCHAR, o BIGINT, t BIGINT, s BIGINT, l INTEGER) AS ord WHERE false)")
    return f"read_parquet({sw.sql_text(pattern)}, hive_partitioning = false)"


def _require_unique_seq(con, trace_dir: str) -> None:
    """seq identifies an exchange (the recorder numbers them once per run): two recordings in
    one directory would pair each other's rows."""
    rows, distinct = con.execute("SELECT count(*), count(DISTINCT seq) FROM src "
                                 "WHERE kind = 'exchange' AND decode_error IS NULL").fetchall()[0]
    if rows != distinct:
        raise tr.TraceError(f"trace {trace_dir} has {rows - distinct} exchange(s) whose seq repeats "
                            "(more than one recording in the directory?); compact each recording on its own")


def _with_align_conn(con, buckets: int) -> None:
    """`ck`: conn with align_conn and bucket per connection (Python: a stable hash, never DuckDB's own)."""
    conn = con.sql("SELECT connection_id, align_client, conn_ord FROM conn").to_arrow_table()
    keys = np.array([align_conn_key(c, o) for c, o in zip(conn.column("align_client").to_pylist(),
                                                          conn.column("conn_ord").to_pylist())], dtype=np.int64)
    keyed = pa.table({"connection_id": conn.column("connection_id"), "align_conn": pa.array(keys, pa.int64()),
                      "bucket": pa.array(spark_bucket(keys, buckets).astype(np.int32), pa.int32())})
    con.register("conn_keys", keyed)
    con.execute("CREATE TEMP TABLE ck AS SELECT c.*, k.align_conn, k.bucket FROM conn c JOIN conn_keys k USING (connection_id); "
                "DROP TABLE conn")
    con.unregister("conn_keys")


# --- input and output ---------------------------------------------------------------------------------


def _segments(trace_dir: str) -> tuple[list[str], list[str]]:
    """(version-2 files, version-1 files) of the completed segments; refuses bad ones as read_trace does."""
    if not os.path.isdir(trace_dir):
        raise tr.TraceError(f"trace directory {trace_dir} does not exist")
    done, _partial = tr.list_segments(trace_dir)
    if not done:
        raise tr.TraceError(f"trace directory {trace_dir} holds no completed segment (*.parquet)")
    v2, v1 = [], []
    for path in done:
        bad = tr._check_footer(path, os.path.getsize(path))  # noqa: SLF001 - the reader's structural check
        if bad is not None:
            raise tr.TraceCorruptError(path, bad[0], bad[1])
        version = tr.segment_version(path)
        if version == str(ts.COMPACT_VERSION):
            raise ValueError(f"{path} is already compacted (schema_version {version})")
        if version is None or not version.isdigit() or int(version) not in ts.SUPPORTED_VERSIONS:
            raise tr.UnknownSchemaVersion(path, version)
        (v1 if version == "1" else v2).append(path)
    return v2, v1


def _register_source(con, v2: list[str], v1: list[str]) -> None:
    """`src`: every row in the version-2 schema (version-1 segments upgraded by trace_reader)."""
    parts = []
    if v2:
        parts.append(f"SELECT * FROM read_parquet({v2!r})")
    if v1:
        con.register("v1_rows", pa.concat_tables([tr.read_segment(p).replace_schema_metadata(None) for p in v1]))
        parts.append("SELECT * FROM v1_rows")
    con.execute("CREATE TEMP VIEW src AS " + " UNION ALL BY NAME ".join(parts))


def _metadata(buckets: int) -> dict[bytes, bytes]:
    md = {ts.META_SCHEMA_VERSION: str(ts.COMPACT_VERSION), ts.META_FORMAT: "1", ts.META_BUCKETS: str(buckets),
          ts.META_BUCKET_COLUMN: "align_conn", ts.META_BUCKET_HASH: ts.V3_BUCKET_HASH,
          ts.META_SORT_COLUMNS: ",".join(ts.V3_SORT_COLUMNS)}
    return {k: v.encode() for k, v in md.items()}


def _stage_exchanges(con, staging: str, buckets: int) -> str:
    """Stage every row with its bucket and keys, by bucket (replay/staged_write.py); returns
    the staging directory."""
    v2_columns = ", ".join(f"s.{name}" for name, _, _ in ts.FIELDS)
    rows = os.path.join(staging, "exchanges")
    sw.stage_arrow(con, f"""SELECT {v2_columns}, c.connection_id IS NOT NULL AS keyed, coalesce(c.bucket, {null_bucket(buckets)}) AS bucket,
  c.align_client, c.conn_ord, c.align_conn, CASE WHEN c.connection_id IS NOT NULL THEN {_request_key_sql()} END AS request_key
FROM src s LEFT JOIN ck c ON {_keyed("s")} AND s.connection_id = c.connection_id""", rows, "bucket",
                   buckets)
    return rows


def _bucket_sql(rows: str, occ: str | None) -> str:  # rows: a relation name
    """One bucket's rows with api_ord (per connection, api and request key: connection-local,
    and a bucket holds whole connections) and id_placeholders (its occurrences' placeholders),
    in the v3 sort order."""
    placeholders = ("SELECT NULL::BIGINT AS seq, NULL::MAP(INTEGER, VARCHAR) AS id_placeholders WHERE false" if occ is None else
                    "SELECT o.seq, map_from_entries(list({'k': o.slot, 'v': p.ph} ORDER BY o.slot)) AS id_placeholders "
                    f"FROM read_parquet({sw.sql_text(occ)}, hive_partitioning = false) o JOIN ph p USING (cat, value) GROUP BY o.seq")
    columns = ", ".join(f"x.{name}" for name, _, _ in ts.FIELDS)
    return f"""SELECT {columns}, x.align_client, x.conn_ord, x.align_conn, x.request_key,
  CASE WHEN x.keyed THEN row_number() OVER (PARTITION BY x.keyed, x.connection_id, x.api_key, x.request_key
                                            ORDER BY x.request_mono_ns, x.seq) END AS api_ord, i.id_placeholders
FROM {rows} x LEFT JOIN ({placeholders}) i ON x.keyed AND x.seq = i.seq
ORDER BY {', '.join(ts.V3_SORT_COLUMNS)}, x.seq"""


def _write_buckets(con, out_dir: str, staging: str, occ: str, buckets: int) -> int:
    """One file per bucket, each sorted on its own from the staged rows; returns the rows written."""
    rows = _stage_exchanges(con, staging, buckets)
    schema = ts.schema(ts.COMPACT_VERSION).with_metadata(_metadata(buckets))
    total = 0
    for b in range(buckets):
        with sw.arrow_partition(rows, b) as part:
            if part is not None:
                con.register("bucket_rows", part)
            sql = None if part is None else _bucket_sql("bucket_rows", sw.partition_glob(occ, bucket=b))
            total += sw.write_query(con, sql, schema, os.path.join(out_dir, FILE_PATTERN.format(b)))
            if part is not None:
                con.unregister("bucket_rows")
        sw.drop_partition(rows, b)  # written: its staging is not needed any more (peak disk)
    sw.remove(staging, OCC_DIR)
    con.execute("DROP TABLE ph")
    return total


def compact(trace_dir: str, out_dir: str | None = None, *, buckets: int = DEFAULT_BUCKETS) -> CompactResult:
    """Write the schema-3 layout of the trace in `trace_dir` into `out_dir` (default
    TRACE_DIR.v3). Raises trace_reader.TraceError (bad trace) or ValueError (bad out_dir)."""
    import duckdb  # heavy optional engine: only compaction and its callers load it

    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, not {buckets}")
    out_dir = out_dir or trace_dir.rstrip("/") + ".v3"
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise ValueError(f"--out {out_dir} exists and is not an empty directory")
    v2, v1 = _segments(trace_dir)
    t0 = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    spill = tempfile.mkdtemp(prefix=".compact-", dir=out_dir)
    con = duckdb.connect(config={"memory_limit": DUCKDB_MEMORY_LIMIT, "temp_directory": spill})
    con.execute("SET enable_progress_bar = false")  # our output is one line (kipcheck compact, record)
    con.execute("SET preserve_insertion_order = false")  # every order compaction needs is an ORDER BY
    try:
        _register_source(con, v2, v1)
        _require_unique_seq(con, trace_dir)
        _connections(con)
        _with_align_conn(con, buckets)
        occ = _placeholders(con, spill)
        rows = _write_buckets(con, out_dir, spill, occ, buckets)
        exchanges = con.execute("SELECT count(*) FROM src WHERE kind = 'exchange'").fetchall()[0][0]
        compact_events.write_check_events(con, out_dir, spill, buckets, exchanges)
    except duckdb.OutOfMemoryException as exc:
        raise CompactionResourceError(trace_dir, "memory", exc) from exc
    except (duckdb.IOException, OSError) as exc:
        if getattr(exc, "errno", None) != errno.ENOSPC and "No space left" not in str(exc):
            raise
        raise CompactionResourceError(trace_dir, "disk", exc) from exc
    except duckdb.Error as exc:
        raise tr.TraceCorruptError(trace_dir, f"compaction failed: {tr.one_line(exc)}") from exc
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)  # our own spill directory, never the user's files
    return CompactResult(out_dir, buckets, rows, exchanges, time.perf_counter() - t0)


def layout(path: str) -> dict[str, str]:
    """The version-3 key/value metadata of one compacted file (bucket count, column, hash, sort)."""
    md = pq.read_metadata(path).metadata or {}
    return {k.decode(): v.decode() for k, v in md.items() if k != b"ARROW:schema"}
