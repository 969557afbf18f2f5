"""Checking a trace directory before it is diffed: never a silent partial result.

`inspect_trace(dir)` opens every segment's footer and a few small columns (pyarrow, no
frames) and returns what the diff may read: the completed segment files, row/exchange/gap
counts, and the exchanges whose frames did not decode (file and row offset for each). It
raises `DiffInputError` — naming the file and, where known, the byte or row offset, plus
what was read and what was not — when:

* the directory does not exist or holds no segment at all;
* a completed segment is truncated or corrupt, or has an unknown schema version;
* a partial segment (``.parquet.tmp``: the recorder stopped while writing it) is present,
  unless ``allow_partial`` (then it is listed in the summary as not read);
* an exchange's frame did not decode (e.g. an API version kio does not know), unless
  ``skip_undecoded`` (then those exchanges are left out of the diff and counted).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pyarrow.compute as pc
import pyarrow.parquet as pq

from replay import trace_reader as tr
from replay import trace_schema as ts

_PEEK_COLUMNS = ["kind", "seq", "api_key", "api_version", "status", "decode_error", "gap_count"]
MAX_LISTED = 5


class DiffInputError(Exception):
    pass


@dataclass
class Undecoded:
    file: str
    row: int  # row offset inside the file
    seq: int | None
    api_key: int | None
    api_version: int | None
    error: str

    def describe(self) -> str:
        return (f"{self.file} row {self.row} (seq {self.seq}, api_key {self.api_key} v{self.api_version}): "
                f"{self.error}")


@dataclass
class TraceInput:
    directory: str
    files: list[str] = field(default_factory=list)
    rows: int = 0
    exchanges: int = 0
    gap_rows: int = 0
    gap_exchanges: int = 0  # exchanges the recorder says it did not record (gap_count sum)
    undecoded: list[Undecoded] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # partial segments not read (with why)

    def to_json(self) -> dict:
        return {
            "directory": self.directory, "segments": len(self.files), "rows": self.rows,
            "exchanges": self.exchanges, "gap_rows": self.gap_rows, "gap_exchanges": self.gap_exchanges,
            "undecoded_exchanges": len(self.undecoded),
            "undecoded_samples": [u.describe() for u in self.undecoded[:MAX_LISTED]],
            "segments_not_read": list(self.skipped),
        }


def _counts(found: TraceInput, pending: int) -> str:
    return (f"read {len(found.files)} segment(s) with {found.rows} row(s) before it; "
            f"{pending} segment(s) not read")


def inspect_trace(directory: str, *, allow_partial: bool = False, skip_undecoded: bool = False) -> TraceInput:
    if not os.path.isdir(directory):
        raise DiffInputError(f"trace directory {directory} does not exist")
    done, partial = tr.list_segments(directory)
    found = TraceInput(directory)
    for path in partial:
        size = os.path.getsize(path)
        found.skipped.append(f"{os.path.basename(path)} ({size} bytes): partial segment, recorder did not finish it")
    if partial and not allow_partial:
        raise DiffInputError(
            f"trace {directory} has {len(partial)} partial segment(s) ({os.path.basename(partial[0])}, "
            f"{os.path.getsize(partial[0])} bytes, no footer); {len(done)} completed segment(s) would be read. "
            "Pass --allow-partial to diff the completed segments only.")
    if not done:
        raise DiffInputError(f"trace directory {directory} has no completed segment (*.parquet)")
    for i, path in enumerate(done):
        _inspect_segment(path, found, len(done) - i)
    if found.undecoded and not skip_undecoded:
        first = found.undecoded[0]
        raise DiffInputError(
            f"{len(found.undecoded)} exchange(s) of trace {directory} did not decode, first at "
            f"{first.describe()}; {found.exchanges} exchange(s) read in {len(found.files)} segment(s). "
            "Pass --skip-undecoded to diff without them.")
    return found


def _inspect_segment(path: str, found: TraceInput, pending: int) -> None:
    try:
        _check_header(path)
        tr.verify_segment(path)  # every chunk, not only the peeked ones: Spark reads them all
        table = pq.read_table(path, columns=_PEEK_COLUMNS)
    except tr.UnknownSchemaVersion as exc:
        raise DiffInputError(f"{exc} ({_counts(found, pending)})") from exc
    except tr.TraceCorruptError as exc:
        raise DiffInputError(f"{exc} ({_counts(found, pending)})") from exc
    except Exception as exc:  # noqa: BLE001 - pyarrow's own errors for damaged pages
        raise DiffInputError(f"corrupt trace segment {path}: {tr.one_line(exc)} ({_counts(found, pending)})") from exc
    found.files.append(path)
    found.rows += table.num_rows
    kinds = table.column("kind")
    is_gap = pc.equal(kinds, ts.KIND_GAP)
    found.gap_rows += pc.sum(is_gap).as_py() or 0
    found.gap_exchanges += pc.sum(table.column("gap_count")).as_py() or 0
    is_exchange = pc.equal(kinds, ts.KIND_EXCHANGE)
    found.exchanges += pc.sum(is_exchange).as_py() or 0
    bad = pc.and_(is_exchange, pc.is_valid(table.column("decode_error")))
    for row in pc.indices_nonzero(pc.fill_null(bad, False)).to_pylist():
        r = table.slice(row, 1).to_pylist()[0]
        found.undecoded.append(Undecoded(path, row, r["seq"], r["api_key"], r["api_version"], r["decode_error"]))


def _check_header(path: str) -> None:
    """Footer and schema version, as trace_reader checks them (raises its errors)."""
    size = os.path.getsize(path)
    bad = tr._check_footer(path, size)  # noqa: SLF001 - the reader's structural check
    if bad is not None:
        raise tr.TraceCorruptError(path, bad[0], bad[1])
    try:
        version = tr.segment_version(path)
    except Exception as exc:  # noqa: BLE001
        raise tr.TraceCorruptError(path, f"unreadable footer: {tr.one_line(exc)}", size - 8) from exc
    if version is None or not version.isdigit() or int(version) not in ts.SUPPORTED_VERSIONS:
        raise tr.UnknownSchemaVersion(path, version)
