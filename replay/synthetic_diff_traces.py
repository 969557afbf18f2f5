"""A synthetic pair of traces for `kipcheck diff`, with the divergences a diff must report.

A is a synthetic trace (replay.synthetic_traces, anomalies off); B is A as a second run
would record it (`rerun_of`: every producer id, member id and topic id the "target" assigns
is different) plus known response differences injected at chosen exchanges (`inject`: an
error code, a partition's high watermark, a share delivery count, and exchanges B lacks).
`make_traces` writes both and returns the (kind, a_seq, path) set a correct diff reports:
the diff engines' tests and benchmarks.trace_diff_bench check against it.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replay import diff_fields as f
from replay import synthetic_traces
from replay import trace_schema as ts

ROWS_PER_SEGMENT = 1_000_000
PID_OFFSET = 10_000_000
INJECT_PER_KIND = 5


def _map_child(col: pa.Array, field: str, fn) -> pa.Array:
    """A list<struct> column with one struct field replaced by fn(field array)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    values = col.values
    children = [fn(values.field(i)) if values.type.field(i).name == field else values.field(i)
                for i in range(values.type.num_fields)]
    struct = pa.StructArray.from_arrays(children, fields=list(values.type), mask=values.is_null())
    return pa.ListArray.from_arrays(col.offsets, struct, mask=col.is_null())


def _shift_pid(arr: pa.Array) -> pa.Array:
    return pc.if_else(pc.greater_equal(arr, 0), pc.add(arr, pa.scalar(PID_OFFSET, arr.type)), arr)


def _new_topic_ids(arr: pa.Array) -> pa.Array:
    # a "rerun" assigns other topic ids: flip the first hex digit of every non-zero id
    zero = pc.equal(arr, f.ZERO_UUID)
    flipped = pc.binary_join_element_wise(pa.scalar("f"), pc.utf8_slice_codeunits(arr, 1), "")
    return pc.if_else(zero, arr, flipped)


def rerun_of(table: pa.Table) -> pa.Table:
    """The same exchanges with every target-assigned id changed (a second run)."""
    cols = {n: table.column(n).combine_chunks() for n in table.column_names}
    cols["producer_id"] = _shift_pid(cols["producer_id"])
    cols["member_id"] = pc.if_else(pc.equal(cols["member_id"], ""), cols["member_id"],
                                   pc.binary_join_element_wise(pa.scalar("rerun-"), cols["member_id"], ""))
    for c in ("batches", "aborted_transactions"):
        cols[c] = _map_child(cols[c], "producer_id", _shift_pid)
    for c in ("partitions", "batches", "acquired_records", "acknowledgement_batches", "aborted_transactions"):
        cols[c] = _map_child(cols[c], "topic_id", _new_topic_ids)
    return pa.table([cols[n] for n in table.column_names], schema=table.schema)


def _first_index(col: pa.Array, rows: np.ndarray) -> np.ndarray:
    return col.offsets.to_numpy()[rows]


def _bump_first(col: pa.Array, field: str, rows: np.ndarray) -> pa.Array:
    """+1 on `field` of element 0 of the list at each of `rows`."""
    idx = _first_index(col, rows)

    def bump(child: pa.Array) -> pa.Array:
        values = child.to_numpy(zero_copy_only=False).copy()
        valid = child.is_valid().to_numpy(zero_copy_only=False)
        values[idx] = values[idx] + 1
        return pa.array(values, type=child.type, mask=~valid)
    return _map_child(col, field, bump)


def _pick(rng: np.random.Generator, mask: np.ndarray, k: int) -> np.ndarray:
    cand = np.flatnonzero(mask)
    return np.sort(rng.choice(cand, size=min(k, len(cand)), replace=False))


def inject(table: pa.Table, seed: int, k: int = INJECT_PER_KIND) -> tuple[pa.Table, set[tuple[str, int, str]]]:
    """B: table with known differences; returns the (kind, a_seq, path) a diff must report."""
    rng = np.random.default_rng(seed)
    cols = {n: table.column(n).combine_chunks() for n in table.column_names}
    seq = cols["seq"].to_numpy()
    expected: set[tuple[str, int, str]] = set()
    err = cols["error_code"]
    rows = _pick(rng, pc.fill_null(pc.equal(err, 0), False).to_numpy(zero_copy_only=False), k)
    e = err.to_numpy(zero_copy_only=False).copy()
    e[rows] = 47
    cols["error_code"] = pa.array(e, type=err.type, mask=~err.is_valid().to_numpy(zero_copy_only=False))
    expected |= {(f.KIND_FIELD, int(seq[r]), "error_code") for r in rows}
    for column, field in (("partitions", "high_watermark"), ("acquired_records", "delivery_count")):
        lengths = pc.fill_null(pc.list_value_length(cols[column]), 0).to_numpy(zero_copy_only=False)
        has = lengths > 0
        offs = cols[column].offsets.to_numpy()[:-1]
        child = cols[column].values.field(field).is_valid().to_numpy(zero_copy_only=False)
        ok = has.copy()
        ok[has] = child[offs[has]]
        rows = _pick(rng, ok, k)
        cols[column] = _bump_first(cols[column], field, rows)
        expected |= {(f.KIND_FIELD, int(seq[r]), f"{column}[0].{field}") for r in rows}
    drop = _pick(rng, _droppable(cols), k)
    expected |= {(f.KIND_ONLY_A, int(seq[r]), f.EXCHANGE_FIELD) for r in drop}
    out = pa.table([cols[n] for n in table.column_names], schema=table.schema)
    keep = np.ones(out.num_rows, dtype=bool)
    keep[drop] = False
    return out.filter(pa.array(keep)), expected


def _droppable(cols: dict[str, pa.Array]) -> np.ndarray:
    """Exchanges B may lack without shifting anything else: the last of their connection
    and api, carrying no id (so no first appearance moves), not a poll (an unaligned empty
    poll is noise by rule)."""
    conn = cols["connection_id"].to_numpy()
    api = cols["api_key"].to_numpy()
    order = np.lexsort((cols["seq"].to_numpy(), api, conn))
    last = np.zeros(len(conn), dtype=bool)
    key = conn[order] * 1000 + api[order]
    is_last = np.append(key[1:] != key[:-1], True)
    last[order[is_last]] = True
    no_ids = (pc.is_null(cols["producer_id"]).to_numpy(zero_copy_only=False)
              & pc.fill_null(pc.equal(cols["member_id"], ""), True).to_numpy(zero_copy_only=False)
              & (pc.fill_null(pc.list_value_length(cols["batches"]), 0).to_numpy(zero_copy_only=False) == 0)
              & (pc.fill_null(pc.list_value_length(cols["aborted_transactions"]), 0).to_numpy(zero_copy_only=False) == 0))
    not_poll = ~pc.fill_null(pc.is_in(cols["api_name"], pa.array(sorted(f.POLL_APIS))), False).to_numpy(zero_copy_only=False)
    return last & no_ids & not_poll


def write_segment(table: pa.Table, path: str, index: int) -> str:
    os.makedirs(path, exist_ok=True)
    name = os.path.join(path, f"trace-bench-{index:05d}.parquet")
    pq.write_table(table.replace_schema_metadata(ts.schema().metadata), name, compression="zstd",
                   row_group_size=200_000)
    return name


def make_traces(base: str, n: int, seed: int) -> tuple[str, str, set]:
    """Writes base/a and base/b; returns their paths and the expected divergences.

    Part by part (whole blocks of about ROWS_PER_SEGMENT exchanges, so no connection spans
    two), one segment each, so 10M exchanges fit in memory; part i gets its own injected
    differences (seed + i)."""
    plan = synthetic_traces.Plan(n, seed, anomalies=False)
    expected: set[tuple[str, int, str]] = set()
    for i, (start, stop) in enumerate(plan.parts(ROWS_PER_SEGMENT)):
        a = plan.rows(start, stop)
        b, injected = inject(rerun_of(a), seed + i)
        expected |= injected
        write_segment(a, os.path.join(base, "a"), i)
        write_segment(b, os.path.join(base, "b"), i)
    return os.path.join(base, "a"), os.path.join(base, "b"), expected
