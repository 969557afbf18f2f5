"""Compaction's bounded-disk writes: stage rows by partition, then write one partition at a time.

Compaction used to hold the whole joined trace (every column, frames included) in one DuckDB
table and sort each bucket out of it: at 10M exchanges DuckDB's spill reached 8.8 GB, so 100M
(about 90 GB) did not fit the machine (docs/trace-checks.md, "100M"). Here every row is
written once, compressed, into the staging of its partition while the input streams by:
the exchanges (frames included) and the check's events as Arrow IPC streams (`stage_arrow`),
the narrow id occurrences with DuckDB's partitioned ``COPY`` to Parquet (`stage`; the events'
partitioned ``COPY`` ran out of DuckDB's memory at 100M exchanges, the occurrences' did not). Each
partition is then read back on its own, sorted by DuckDB (which spills within its memory
limit) and streamed in record batches to a pyarrow writer in the declared schema
(`write_query`: DuckDB's own writer marks a column required in a file where it happens to
hold no null, and the files of one trace must share one schema), and its staging removed.
Peak temporary disk is about the compressed trace plus one partition's sort; memory, one
partition's sort within DuckDB's limit plus one record batch.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

BATCH_ROWS = 200_000  # rows per record batch and Parquet row group (a recorded segment's row group)


def sql_text(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def stage(con, select_sql: str, staging_dir: str, partition_by: tuple[str, ...]) -> None:
    """Write the rows of `select_sql` into `staging_dir`/COL=VALUE/.../*.parquet (zstd), streaming."""
    con.execute(f"COPY ({select_sql}) TO {sql_text(staging_dir)} "
                f"(FORMAT parquet, PARTITION_BY ({', '.join(partition_by)}), COMPRESSION zstd)")


def stage_arrow(con, select_sql: str, staging_dir: str, column: str, partitions: int) -> None:
    """Like `stage` for wide rows, by the int `column` (0..partitions-1, not kept): one Arrow IPC
    stream per partition (zstd), written from DuckDB's record batches. DuckDB's Parquet writer
    took about 3x as long on the trace's nested columns (1M exchanges: 15.8 s against 5.2 s
    under the same load), and a partition is read back once, as a stream (`arrow_partition`)."""
    os.makedirs(staging_dir)
    writers: dict[int, ipc.RecordBatchStreamWriter] = {}
    options = ipc.IpcWriteOptions(compression="zstd")
    try:
        for batch in con.sql(select_sql).to_arrow_reader(BATCH_ROWS):
            keys = batch.column(column).to_numpy(zero_copy_only=False)
            rows = batch.drop_columns([column])
            order = np.argsort(keys, kind="stable")
            bounds = np.searchsorted(keys[order], np.arange(partitions + 1))
            grouped = rows.take(pa.array(order))
            for p in np.flatnonzero(np.diff(bounds)):
                if p not in writers:
                    writers[p] = ipc.new_stream(os.path.join(staging_dir, f"{p}.arrows"), rows.schema, options=options)
                writers[p].write_batch(grouped.slice(bounds[p], bounds[p + 1] - bounds[p]))
    finally:
        for writer in writers.values():
            writer.close()


@contextlib.contextmanager
def arrow_partition(staging_dir: str, value: int) -> Iterator[pa.RecordBatchReader | None]:
    """The rows `stage_arrow` wrote for one partition, as a one-pass stream (None: no row)."""
    path = os.path.join(staging_dir, f"{value}.arrows")
    if not os.path.exists(path):
        yield None
        return
    with pa.OSFile(path) as source:
        yield ipc.open_stream(source)


def drop_partition(staging_dir: str, value: int) -> None:
    """Remove one partition `stage_arrow` wrote (once it is written out)."""
    remove(staging_dir, f"{value}.arrows")


def remove(staging_dir: str, *names: str) -> None:
    """Remove staged files or directories once read."""
    for name in names:
        path = os.path.join(staging_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def partition_glob(staging_dir: str, **values: object) -> str | None:
    """The files of one staged partition, or None when no row went there (no directory)."""
    pattern = os.path.join(staging_dir, *(f"{k}={v}" for k, v in values.items()), "*.parquet")
    return pattern if glob.glob(pattern) else None


def write_query(con, sql: str | None, schema: pa.Schema, path: str) -> int:
    """Write the rows of `sql` (None: no row) to `path` in `schema`, one record batch at a
    time; returns the number of rows written."""
    rows = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        if sql is None:
            return rows
        for batch in con.sql(sql).to_arrow_reader(BATCH_ROWS):
            writer.write_batch(batch.cast(schema), row_group_size=BATCH_ROWS)
            rows += batch.num_rows
    return rows


def write_partition(con, staging_dir: str, value: int, schema: pa.Schema, order_by: str, path: str) -> int:
    """Write the `schema` columns of one partition `stage_arrow` wrote, sorted by `order_by`,
    to `path`; remove its staging; return the rows written."""
    with arrow_partition(staging_dir, value) as part:
        if part is None:
            return write_query(con, None, schema, path)
        con.register("staged_partition", part)
        try:
            quoted = ", ".join(f'"{c}"' for c in schema.names)
            return write_query(con, f"SELECT {quoted} FROM staged_partition ORDER BY {order_by}", schema, path)
        finally:
            con.unregister("staged_partition")
            drop_partition(staging_dir, value)
