"""Reading capture traces: every completed segment of a directory, with a report.

`read_trace(dir)` returns (table, report). Completed segments (``*.parquet``) must be
readable and of a known schema version: a corrupt or truncated one raises
`TraceCorruptError` naming the file (and the byte offset when known) together with what
was read so far; an unknown version raises `UnknownSchemaVersion` naming the file. A
``*.parquet.tmp`` is the segment a recorder was writing when it stopped: it is reported
(name, size, why unreadable) and skipped, never fatal. ``strict=False`` turns corrupt
completed segments into skipped entries instead of errors.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from replay import trace_schema as ts
from replay import typed_fields

PARQUET_MAGIC = b"PAR1"


class TraceError(Exception):
    pass


class TraceCorruptError(TraceError):
    def __init__(self, path: str, why: str, offset: int | None = None, report: "TraceReport | None" = None) -> None:
        where = f" at byte {offset}" if offset is not None else ""
        done = ""
        if report is not None:
            done = (f" (read {len(report.read)} segment(s), {report.rows} row(s) before it; "
                    f"{len(report.skipped)} skipped)")
        super().__init__(f"corrupt trace segment {path}{where}: {why}{done}")
        self.path, self.why, self.offset, self.report = path, why, offset, report


class UnknownSchemaVersion(TraceError):
    def __init__(self, path: str, version: str | None) -> None:
        known = ", ".join(str(v) for v in sorted(ts.SUPPORTED_VERSIONS))
        what = "no schema_version metadata" if version is None else f"schema_version {version!r}"
        super().__init__(f"trace segment {path} has {what}; this kipcheck reads version(s) {known}")
        self.path, self.version = path, version


@dataclass
class SegmentInfo:
    path: str
    size: int
    rows: int = 0
    reason: str | None = None  # why skipped


@dataclass
class TraceReport:
    read: list[SegmentInfo] = field(default_factory=list)
    skipped: list[SegmentInfo] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.read)

    @property
    def partial(self) -> list[SegmentInfo]:
        return [s for s in self.skipped if s.path.endswith(".tmp")]

    def summary(self) -> str:
        lines = [f"{len(self.read)} segment(s) read, {self.rows} row(s); {len(self.skipped)} skipped"]
        for s in self.skipped:
            lines.append(f"  skipped {os.path.basename(s.path)} ({s.size} bytes): {s.reason}")
        return "\n".join(lines)


def _check_footer(path: str, size: int) -> tuple[str, int | None] | None:
    """A cheap structural check: (why, offset) when the file cannot be a whole Parquet file."""
    if size < 12:
        return f"{size} bytes is too short for a Parquet file", 0
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(size - 8)
        tail = f.read(8)
    if head != PARQUET_MAGIC:
        return "no Parquet magic at the start", 0
    if tail[4:] != PARQUET_MAGIC:
        return "no Parquet footer (file truncated: writer did not finish)", size - 4
    footer_len = int.from_bytes(tail[:4], "little")
    if footer_len > size - 12:
        return f"footer length {footer_len} exceeds the file", size - 8
    return None


def segment_version(path: str) -> str | None:
    md = pq.read_metadata(path).metadata or {}
    v = md.get(ts.META_SCHEMA_VERSION)
    return None if v is None else v.decode("utf-8", "replace")


def read_segment(path: str) -> pa.Table:
    size = os.path.getsize(path)
    bad = _check_footer(path, size)
    if bad is not None:
        raise TraceCorruptError(path, bad[0], bad[1])
    try:
        version = segment_version(path)
    except Exception as exc:
        raise TraceCorruptError(path, f"unreadable footer: {exc}", size - 8) from exc
    if version is None or not version.isdigit() or int(version) not in ts.SUPPORTED_VERSIONS:
        raise UnknownSchemaVersion(path, version)
    try:
        table = pq.read_table(path, page_checksum_verification=True)
    except Exception as exc:  # noqa: BLE001 - locate the damaged chunk for the message
        verify_segment(path)
        raise TraceCorruptError(path, f"data does not decode: {one_line(exc)}") from exc
    return upgrade(table)


def upgrade(table: pa.Table) -> pa.Table:
    """A segment's table in the current schema. Version 1 lacks the typed columns of
    version 2: they are derived from the JSON columns (replay.typed_fields.from_json),
    `schema_version` stays null so a reader can still tell where a row came from."""
    if "schema_version" in table.column_names:
        return table
    current = ts.schema()
    keys = table.column("api_key").to_pylist()
    req = table.column("request_json").to_pylist()
    resp = table.column("response_json").to_pylist()
    derived = [typed_fields.from_json(k, q, r) for k, q, r in zip(keys, req, resp)]
    cols = {name: table.column(name) for name in table.column_names}
    cols["schema_version"] = pa.nulls(table.num_rows, pa.int16())
    for name in typed_fields.COLUMNS:
        cols[name] = pa.array([d[name] for d in derived], current.field(name).type)
    return pa.table([cols[f.name] for f in current], schema=current).replace_schema_metadata(table.schema.metadata)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _chunk_offset(md: pq.FileMetaData, rg: int, column: str) -> int | None:
    """File offset of the first page of `column`'s chunk in row group `rg` (leaf columns
    of a nested field share its top-level name; the first leaf is named)."""
    group = md.row_group(rg)
    for i in range(group.num_columns):
        chunk = group.column(i)
        if chunk.path_in_schema.split(".")[0] == column:
            return chunk.dictionary_page_offset or chunk.data_page_offset
    return None


def verify_segment(path: str, visit: Callable[[pa.Table], None] | None = None) -> int:
    """Decode every column chunk of every row group (with page checksums verified where the
    writer stored them) and return the row count; raises TraceCorruptError naming the row
    group, column and chunk offset of the first chunk that does not decode.

    Both engines call this before reading: Spark prunes columns a job does not use and
    reads lazily, so a damaged chunk would otherwise pass unnoticed (or surface as a Java
    stack mid-job) where the pure engine's full read fails. `visit` gets each decoded row
    group (a pyarrow table), so a caller gathers what it needs without reading again."""
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except Exception as exc:  # noqa: BLE001 - an unreadable footer is corruption
        raise TraceCorruptError(path, f"unreadable footer: {one_line(exc)}", os.path.getsize(path) - 8) from exc
    md = pf.metadata
    for rg in range(md.num_row_groups):
        try:
            table = pf.read_row_group(rg)
        except Exception as exc:  # noqa: BLE001 - pyarrow's errors for damaged pages
            _locate(pf, path, rg, exc)
        if visit is not None:  # a caller's statistics from the same decode (not corruption if it fails)
            visit(table)
    return md.num_rows


def _locate(pf: pq.ParquetFile, path: str, rg: int, exc: Exception) -> None:
    """Raise TraceCorruptError for the first column of row group `rg` that does not decode."""
    for column in pf.schema_arrow.names:
        try:
            pf.read_row_group(rg, columns=[column])
        except Exception as col_exc:  # noqa: BLE001
            why = f"row group {rg} column {column!r} does not decode: {one_line(col_exc)}"
            raise TraceCorruptError(path, why, _chunk_offset(pf.metadata, rg, column)) from col_exc
    raise TraceCorruptError(path, f"row group {rg} does not decode: {one_line(exc)}") from exc


def list_segments(directory: str) -> tuple[list[str], list[str]]:
    done = sorted(glob.glob(os.path.join(directory, "*.parquet")))
    partial = sorted(glob.glob(os.path.join(directory, "*.parquet.tmp")) + glob.glob(os.path.join(directory, "*.parquet.tmp.failed")))
    return done, partial


def read_trace(directory: str, *, strict: bool = True) -> tuple[pa.Table, TraceReport]:
    if not os.path.isdir(directory):
        raise TraceError(f"trace directory {directory} does not exist")
    done, partial = list_segments(directory)
    report = TraceReport()
    tables: list[pa.Table] = []
    for path in done:
        size = os.path.getsize(path)
        try:
            t = read_segment(path)
        except UnknownSchemaVersion:
            raise
        except TraceCorruptError as exc:
            if strict:
                raise TraceCorruptError(path, exc.why, exc.offset, report) from exc
            report.skipped.append(SegmentInfo(path, size, 0, str(exc)))
            continue
        tables.append(t)
        report.read.append(SegmentInfo(path, size, t.num_rows))
    for path in partial:
        size = os.path.getsize(path)
        bad = _check_footer(path, size)
        why = bad[0] if bad else "segment was never completed (recorder stopped while writing it)"
        if path.endswith(".failed"):
            why = "segment abandoned after a write error; " + why
        report.skipped.append(SegmentInfo(path, size, 0, f"partial segment: {why}"))
    if tables:
        table = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
    else:
        table = ts.schema().empty_table().replace_schema_metadata(None)
    return table, report
