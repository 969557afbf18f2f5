"""Synthetic capture traces for `kipcheck check` (and `kipcheck diff`) at any size.

`generate(path, n_exchanges, seed, anomalies=True)` writes Parquet segments of the real
trace schema (replay.trace_schema, schema_version metadata) holding `n_exchanges`
exchanges and returns the (rule id, seq) pairs a correct checker must report: exactly one
per injected anomaly, none in a trace generated with `anomalies=False`.

How: one *block* of about a hundred exchanges is simulated in Python like a small cluster
would answer it (a simulated log per partition), with independent entities:

* a transactional producer (FindCoordinator, InitProducerId, AddPartitionsToTxn, Produce,
  AddOffsetsToTxn, TxnOffsetCommit, EndTxn; one aborted transaction; a second instance
  that fences the first, and the first's late request refused as fenced);
* a read_committed consumer fetching the transactional partitions (LSO, aborted
  transactions listed), OffsetFetch of the group the transactions commit offsets for;
* a plain consumer group (OffsetCommit / OffsetFetch), read_uncommitted fetches, Metadata,
  non-transactional produce, heartbeats (the data-plane bulk of a real trace);
* a share group of two members on one partition: ShareGroupHeartbeat, ShareFetch with
  acquired records, acknowledgements piggybacked and in ShareAcknowledge (accept, release
  with redelivery at delivery count 2, reject), share-session epochs 0,1,2,... and -1,
  DescribeShareGroupOffsets reporting the SPSO.

The trace is that block tiled with numpy/pyarrow: block b gets its own transactional id,
group ids, member ids, producer ids, connection ids, seqs and times (JSON columns are
rebuilt with the block's ids), so entities of different blocks never meet. Each anomaly
kind is a *variant* of the block that differs from the clean one in one exchange, placed
at a complete block chosen from the seed (all kinds need 11 complete blocks, about 1250
exchanges; smaller traces get fewer kinds).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replay import trace_schema as ts
from replay import typed_fields

ORDERS_ID = "6a1f4c2e-0d1b-4c55-9a57-0f6f7b3a1c01"
JOBS_ID = "6a1f4c2e-0d1b-4c55-9a57-0f6f7b3a1c02"
EVENTS_ID = "6a1f4c2e-0d1b-4c55-9a57-0f6f7b3a1c03"
UPSTREAM = "10.0.0.1:9092"
PID_STRIDE = 4  # producer ids per block
CONN_STRIDE = 16  # connection ids per block
ROW_GAP_MS = 2
ROWS_PER_SEGMENT = 1_000_000

ANOMALY_KINDS = (
    "TXN.EPOCH_REGRESSED", "TXN.FENCED_SUCCEEDED", "FETCH.BEYOND_LSO", "FETCH.ABORTED_UNLISTED",
    "TXN.OFFSETS_BEFORE_MARKER", "SHARE.DOUBLE_ACQUIRE", "SHARE.DELIVERY_COUNT", "SHARE.REDELIVERED_FINAL",
    "SHARE.ACK_NOT_HELD", "SHARE.SPSO_REGRESSED", "SHARE.SESSION_EPOCH",
)

API_NAMES = {0: "produce", 1: "fetch", 3: "metadata", 8: "offset_commit", 9: "offset_fetch", 10: "find_coordinator",
             12: "heartbeat", 22: "init_producer_id", 24: "add_partitions_to_txn", 25: "add_offsets_to_txn",
             26: "end_txn", 28: "txn_offset_commit", 76: "share_group_heartbeat", 78: "share_fetch",
             79: "share_acknowledge", 90: "describe_share_group_offsets"}
API_VERSIONS = {0: 11, 1: 16, 3: 12, 8: 9, 9: 9, 10: 6, 12: 4, 22: 5, 24: 3, 25: 4, 26: 4, 28: 4, 76: 1, 78: 1,
                79: 1, 90: 0}
# markers in the JSON templates, replaced by the row's own (per-block) values
M_TXN, M_PID, M_GROUP, M_MEMBER = "@@TXN@@", "@@PID@@", "@@GROUP@@", "@@MEMBER@@"


def _part(side: str, topic: str | None, tid: str | None, p: int, **kw: Any) -> dict:
    row = {"side": side, "topic": topic, "topic_id": tid, "partition": p, "error_code": None}
    for n in ("fetch_offset", "base_offset", "committed_offset", "offset", "high_watermark", "last_stable_offset",
              "log_start_offset", "leader_epoch"):
        row[n] = kw.get(n)
    if "error_code" in kw:
        row["error_code"] = kw["error_code"]
    return row


def _unmark(doc: Any) -> Any:
    """The document with the producer-id marker as producer id 0 (shifted per block later)."""
    if isinstance(doc, dict):
        return {k: _unmark(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_unmark(v) for v in doc]
    return 0 if doc == M_PID else doc


def _dump(doc: dict) -> str:
    """JSON text; the producer-id marker stands for a number, so it is not quoted."""
    return json.dumps(doc, separators=(",", ":")).replace(f'"{M_PID}"', M_PID)


@dataclass
class Batch:
    base: int
    last: int
    pid: int
    epoch: int
    transactional: bool
    control: bool

    def header(self, side: str, tid: str, p: int) -> dict:
        return {"side": side, "topic": None, "topic_id": tid, "partition": p, "base_offset": self.base,
                "last_offset": self.last, "base_sequence": -1 if self.control else 0, "producer_id": self.pid,
                "producer_epoch": self.epoch, "record_count": self.last - self.base + 1,
                "transactional": self.transactional, "control": self.control, "compression": 0}


@dataclass
class Log:
    batches: list[Batch] = field(default_factory=list)
    open_txn: dict[int, int] = field(default_factory=dict)  # pid -> first offset
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, first, last)

    @property
    def end(self) -> int:
        return self.batches[-1].last + 1 if self.batches else 0

    @property
    def lso(self) -> int:
        return min(self.open_txn.values(), default=self.end)

    def append(self, n: int, pid: int, epoch: int, transactional: bool) -> int:
        base = self.end
        self.batches.append(Batch(base, base + n - 1, pid, epoch, transactional, False))
        if transactional:
            self.open_txn.setdefault(pid, base)
        return base

    def marker(self, pid: int, epoch: int, commit: bool) -> None:
        first = self.open_txn.pop(pid, None)
        if first is None:
            return
        if not commit:
            self.aborted.append((pid, first, self.end - 1))
        self.batches.append(Batch(self.end, self.end, pid, epoch, True, True))

    def read(self, start: int, upper: int) -> list[Batch]:
        return [b for b in self.batches if b.base >= start and b.last < upper]


class Block:
    """Emits the rows of one block; `variant` names the anomaly kind injected (or None)."""

    def __init__(self, variant: str | None) -> None:
        self.v = variant
        self.rows: list[dict] = []
        self.t = 0
        self.expected: list[tuple[str, int]] = []  # (rule, index in block)
        self.orders = {0: Log(), 1: Log()}
        self.pid, self.epoch = 0, 0  # producer id 0 of the block (shifted per block)

    # -- emission -----------------------------------------------------------------------

    def emit(self, api: int, conn: int, *, error_code: int | None = None, error_codes: tuple = (), txn: bool = False,
             pid: int | None = None, epoch: int | None = None, group: bool = False, member: str | None = None,
             member_epoch: int | None = None, session_epoch: int | None = None, parts: list | None = None,
             batches: list | None = None, acquired: list | None = None, acks: list | None = None,
             aborted: list | None = None, req: dict | None = None, resp: dict | None = None,
             anomaly: str | None = None, topics: tuple = ()) -> int:
        self.t += ROW_GAP_MS
        i = len(self.rows)
        self.rows.append({
            "kind": "exchange", "seq": i, "request_mono_ns": self.t * 1_000_000, "request_wall_ms": self.t,
            "response_mono_ns": (self.t + 1) * 1_000_000, "response_wall_ms": self.t + 1, "connection_id": conn,
            "listener": "127.0.0.1:19092", "upstream": UPSTREAM, "client_host": "127.0.0.1", "client_port": 50000 + conn,
            "client_id": f"client-{conn}", "api_key": api, "api_name": API_NAMES[api], "api_version": API_VERSIONS[api],
            "correlation_id": i, "status": "ok", "request_size": 120, "response_size": 200, "addresses_rewritten": 0,
            "decode_error": None, "error_code": error_code, "error_codes": list(error_codes),
            "transactional_id": M_TXN if txn else None, "producer_id": pid, "producer_epoch": epoch,
            "group_id": group, "member_id": member, "member_epoch": member_epoch, "generation_id": None,
            "share_session_epoch": session_epoch, "topics": list(topics), "topic_ids": [],
            "partitions": parts or [], "batches": batches or [], "base_sequences": [], "acquired_records": acquired or [],
            "acknowledgement_batches": acks or [], "aborted_transactions": aborted or [],
            "request_json": _dump(req or {}),
            "response_json": _dump(resp or {"throttle_time": 0, "error_code": error_code or 0}),
            "request_bytes": None, "response_bytes": None, "payloads": "drop", "gap_count": None, "gap_reason": None,
            "schema_version": ts.SCHEMA_VERSION,
            **typed_fields.extract(api, _unmark(req or {}),
                                   _unmark(resp or {"throttle_time": 0, "error_code": error_code or 0})),
        })
        if anomaly is not None and anomaly == self.v:
            self.expected.append((anomaly, i))
        return i

    def filler(self, k: int) -> None:
        """Data-plane and housekeeping exchanges no rule selects (most of a real trace)."""
        for j in range(k):
            kind = j % 5
            if kind == 0:
                self.emit(3, 1, parts=[_part("response", "orders", ORDERS_ID, 0), _part("response", "jobs", JOBS_ID, 0)],
                          req={"topics": None}, resp={"brokers": [{"node_id": 1, "host": "b1", "port": 9092}]})
            elif kind == 1:
                self.emit(0, 2, pid=-1, epoch=-1, batches=[Batch(0, 9, -1, -1, False, False).header("request", EVENTS_ID, 0)],
                          parts=[_part("response", None, EVENTS_ID, 0, error_code=0, base_offset=j * 10)],
                          req={"acks": -1, "topic_data": [{"topic_id": EVENTS_ID}]})
            elif kind == 2:
                self.emit(1, 3, error_code=0, parts=[_part("response", None, EVENTS_ID, 0, error_code=0, high_watermark=j * 10,
                                                           last_stable_offset=j * 10)],
                          batches=[Batch(j * 10, j * 10 + 9, -1, -1, False, False).header("response", EVENTS_ID, 0)],
                          req={"isolation_level": 0, "max_wait": 500}, resp={"error_code": 0, "responses": []})
            elif kind == 3:
                self.emit(12, 4, error_code=0, group=True, member="m-plain", req={"group_id": M_GROUP, "generation_id": 1})
            else:
                self.emit(76, 5, error_code=0, group=True, member=f"{M_MEMBER}a", member_epoch=3,
                          req={"group_id": M_GROUP, "member_id": M_MEMBER + "a", "member_epoch": 3})

    # -- transactions -------------------------------------------------------------------

    def txn_req(self, api: int, epoch: int, error: int = 0, anomaly: str | None = None, **kw: Any) -> int:
        req = {"transactional_id": M_TXN, "producer_id": M_PID, "producer_epoch": epoch, **kw.pop("req", {})}
        return self.emit(api, 6, txn=True, pid=self.pid, epoch=epoch, error_code=error, error_codes=(error,) if error else (),
                         req=req, resp={"throttle_time": 0, "error_code": error}, anomaly=anomaly, **kw)

    def init_producer(self, epoch: int, anomaly: str | None = None) -> None:
        self.epoch = epoch
        self.emit(22, 6, txn=True, pid=self.pid, epoch=epoch, error_code=0,
                  req={"transactional_id": M_TXN, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1},
                  resp={"throttle_time": 0, "error_code": 0, "producer_id": M_PID, "producer_epoch": epoch}, anomaly=anomaly)

    def produce_txn(self, p: int, n: int) -> int:
        base = self.orders[p].append(n, self.pid, self.epoch, True)
        self.emit(0, 7, txn=True, pid=self.pid, epoch=self.epoch,
                  batches=[Batch(0, n - 1, self.pid, self.epoch, True, False).header("request", None, p)
                           | {"topic": "orders", "topic_id": None}],
                  parts=[_part("request", "orders", None, p), _part("response", "orders", None, p, error_code=0, base_offset=base)],
                  req={"transactional_id": M_TXN, "acks": -1, "topic_data": [{"name": "orders"}]})
        return base

    def read_committed(self, p: int, start: int, anomaly_open: bool = False, drop_aborted: bool = False) -> int:
        log = self.orders[p]
        got = log.read(start, log.lso if not anomaly_open else log.end)
        aborted = [{"topic": None, "topic_id": ORDERS_ID, "partition": p, "producer_id": pid, "first_offset": first}
                   for pid, first, last in log.aborted if got and first <= got[-1].last and last >= start]
        if drop_aborted:
            aborted = []
        return self.emit(1, 8, error_code=0, batches=[b.header("response", ORDERS_ID, p) for b in got],
                         parts=[_part("request", None, ORDERS_ID, p, fetch_offset=start),
                                _part("response", None, ORDERS_ID, p, error_code=0, high_watermark=log.end,
                                      last_stable_offset=log.lso, log_start_offset=0)],
                         aborted=aborted, req={"isolation_level": 1, "max_wait": 500, "topics": [{"topic_id": ORDERS_ID}]},
                         resp={"error_code": 0, "responses": [{"topic_id": ORDERS_ID}]},
                         anomaly="FETCH.BEYOND_LSO" if anomaly_open else ("FETCH.ABORTED_UNLISTED" if drop_aborted else None))

    def offset_fetch(self, value: int, anomaly: str | None = None) -> None:
        self.emit(9, 9, group=True, parts=[_part("request", "input", None, 0),
                                           _part("response", "input", None, 0, error_code=0, committed_offset=value)],
                  req={"groups": [{"group_id": M_GROUP}], "require_stable": True}, anomaly=anomaly)

    def transactions(self) -> None:
        self.emit(10, 6, error_code=0, txn=True, req={"key_type": 1, "coordinator_keys": [M_TXN]})
        self.init_producer(0)
        committed, fetched = -1, {0: 0, 1: 0}
        for k in range(4):
            commit = k != 1
            self.txn_req(24, self.epoch, parts=[_part("request", "orders", None, 0), _part("request", "orders", None, 1)])
            for p in (0, 1):
                self.produce_txn(p, 3 + k)
            if k == 2:  # a read_committed fetch while the transaction is open: stops at the LSO
                self.read_committed(0, fetched[0], anomaly_open=self.v == "FETCH.BEYOND_LSO")
            self.txn_req(25, self.epoch, group=True, req={"group_id": M_GROUP})
            value = 10 * (k + 1)
            self.txn_req(28, self.epoch, group=True, parts=[_part("request", "input", None, 0, committed_offset=value),
                                                             _part("response", "input", None, 0, error_code=0)],
                         req={"group_id": M_GROUP})
            early = k == 2 and self.v == "TXN.OFFSETS_BEFORE_MARKER"
            self.offset_fetch(value if early else committed, anomaly="TXN.OFFSETS_BEFORE_MARKER" if early else None)
            self.txn_req(26, self.epoch, req={"committed": commit})
            for p in (0, 1):
                self.orders[p].marker(self.pid, self.epoch, commit)
            if commit:
                committed = value
            self.offset_fetch(committed)
            for p in (0, 1):
                drop = k == 1 and p == 1 and self.v == "FETCH.ABORTED_UNLISTED"
                self.read_committed(p, fetched[p], drop_aborted=drop)
                fetched[p] = self.orders[p].lso
            self.filler(6)
        # a second instance fences the first; the first's late request must be refused
        regress = self.v == "TXN.EPOCH_REGRESSED"
        self.init_producer(0 if regress else 1, anomaly="TXN.EPOCH_REGRESSED")
        zombie_ok = self.v == "TXN.FENCED_SUCCEEDED"
        self.txn_req(25, 0, error=0 if zombie_ok else 90, group=True, req={"group_id": M_GROUP},
                     anomaly="TXN.FENCED_SUCCEEDED")
        self.txn_req(24, self.epoch, parts=[_part("request", "orders", None, 0)])
        self.produce_txn(0, 2)
        self.txn_req(26, self.epoch, req={"committed": True})
        self.orders[0].marker(self.pid, self.epoch, True)
        self.read_committed(0, fetched[0])

    # -- share group --------------------------------------------------------------------

    def share(self, api: int, member: str, epoch: int, acquired=(), acks=(), anomaly: str | None = None) -> int:
        conn = 10 if member == "a" else 11
        acq = [{"topic_id": JOBS_ID, "partition": 0, "first_offset": f, "last_offset": l, "delivery_count": c}
               for f, l, c in acquired]
        ab = [{"side": "request", "topic_id": JOBS_ID, "partition": 0, "first_offset": f, "last_offset": l,
               "acknowledge_types": list(t)} for f, l, t in acks]
        batches = [Batch(f, l, -1, -1, False, False).header("response", JOBS_ID, 0) for f, l, _ in acquired]
        return self.emit(api, conn, error_code=0, group=True, member=f"{M_MEMBER}{member}", session_epoch=epoch,
                         acquired=acq, acks=ab, batches=batches,
                         parts=[_part("request", None, JOBS_ID, 0), _part("response", None, JOBS_ID, 0, error_code=0)],
                         req={"group_id": M_GROUP, "member_id": M_MEMBER + member, "share_session_epoch": epoch},
                         resp={"error_code": 0, "acquisition_lock_timeout": 30000}, anomaly=anomaly)

    def spso(self, value: int, anomaly: str | None = None) -> None:
        self.emit(90, 12, group=True, parts=[_part("response", "jobs", JOBS_ID, 0, error_code=0)],
                  req={"groups": [{"group_id": M_GROUP}]},
                  resp={"groups": [{"group_id": M_GROUP, "topics": [{"topic_name": "jobs", "topic_id": JOBS_ID, "partitions": [
                      {"partition_index": 0, "start_offset": value, "leader_epoch": 0, "error_code": 0}]}]}]},
                  anomaly=anomaly)

    def share_group(self) -> None:
        v = self.v
        for m in ("a", "b"):
            self.emit(76, 10 if m == "a" else 11, error_code=0, group=True, member=f"{M_MEMBER}{m}", member_epoch=0,
                      req={"group_id": M_GROUP, "member_id": M_MEMBER + m, "member_epoch": 0})
        self.emit(0, 2, pid=-1, epoch=-1, batches=[Batch(0, 44, -1, -1, False, False).header("request", JOBS_ID, 0)],
                  parts=[_part("response", None, JOBS_ID, 0, error_code=0, base_offset=0)], req={"acks": -1})
        acc = (1,)
        a_types = [1] * 10
        a_types[3], a_types[5] = 2, 3  # release 3 (redelivered), reject 5
        self.share(78, "a", 0, acquired=[(0, 9, 1)])
        self.share(78, "b", 0, acquired=[(10, 19, 1)])
        self.share(78, "a", 1, acks=[(0, 9, a_types)], acquired=[(20, 29, 1)])
        b_acks = [(10, 19, acc)] + ([(3, 3, (2,))] if v == "SHARE.ACK_NOT_HELD" else [])
        self.share(79, "b", 1, acks=b_acks, anomaly="SHARE.ACK_NOT_HELD")
        redeliver = [(3, 3, 7 if v == "SHARE.DELIVERY_COUNT" else 2)]
        if v == "SHARE.REDELIVERED_FINAL":
            redeliver.append((5, 5, 2))
        self.share(78, "b", 2, acquired=redeliver + [(30, 39, 1)],
                   anomaly="SHARE.DELIVERY_COUNT" if v == "SHARE.DELIVERY_COUNT" else "SHARE.REDELIVERED_FINAL")
        self.share(79, "a", 2, acks=[(20, 29, acc)])
        self.share(79, "b", 5 if v == "SHARE.SESSION_EPOCH" else 3, acks=[(3, 3, acc), (30, 39, acc)],
                   anomaly="SHARE.SESSION_EPOCH")
        self.spso(40)
        self.share(78, "a", 3, acquired=[(40, 44, 1)])
        self.filler(4)
        if v == "SHARE.DOUBLE_ACQUIRE":  # b is handed a's records before a's session closed
            self.share(78, "b", 4, acquired=[(40, 44, 2)], anomaly="SHARE.DOUBLE_ACQUIRE")
            self.share(78, "a", -1)
        else:
            self.share(78, "a", -1)
            self.share(78, "b", 4, acquired=[(40, 44, 2)])
        self.share(79, "b", 5, acks=[(40, 44, acc)])
        self.share(79, "b", -1)
        self.spso(38 if v == "SHARE.SPSO_REGRESSED" else 45, anomaly="SHARE.SPSO_REGRESSED")
        for m in ("a", "b"):
            self.emit(76, 10 if m == "a" else 11, error_code=0, group=True, member=f"{M_MEMBER}{m}", member_epoch=-1,
                      req={"group_id": M_GROUP, "member_id": M_MEMBER + m, "member_epoch": -1})

    def plain_group(self) -> None:
        for k in range(3):
            self.emit(8, 4, group=True, member="m-plain", parts=[_part("request", "events", None, 0, committed_offset=100 * k),
                                                                  _part("response", "events", None, 0, error_code=0)],
                      req={"group_id": M_GROUP})
            self.emit(9, 4, group=True, parts=[_part("response", "events", None, 0, error_code=0, committed_offset=100 * k)],
                      req={"groups": [{"group_id": M_GROUP}]})

    def build(self) -> "Block":
        self.transactions()
        self.share_group()
        self.plain_group()
        self.filler(10)
        return self


# ----------------------------------------------------------------------------- tiling


def _template(variant: str | None) -> tuple[pa.Table, list[tuple[str, int]]]:
    b = Block(variant).build()
    for r in b.rows:  # group and member columns carry markers too, replaced per block
        r["group_id"] = M_GROUP if r["group_id"] else None
        if r["member_id"] and not r["member_id"].startswith(M_MEMBER):
            r["member_id"] = M_MEMBER + r["member_id"]
    return pa.Table.from_pylist(b.rows, schema=ts.schema()), b.expected


def _suffix(col: pa.Array, suffix: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(col, suffix, "")


def _shift_nested_pid(arr: pa.Array, shift: pa.Array) -> pa.Array:
    """Add the row's producer-id shift to every non-negative producer_id inside a list<struct>."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    flat = arr.flatten()
    if len(flat) == 0:
        return arr
    parents = pc.list_parent_indices(arr)
    s = pc.take(shift, parents)
    pid = flat.field("producer_id")
    new = pc.if_else(pc.greater_equal(pid, 0), pc.add(pid, s), pid)
    fields = [flat.type.field(i) for i in range(flat.type.num_fields)]
    children = [new if f.name == "producer_id" else flat.field(f.name) for f in fields]
    struct = pa.StructArray.from_arrays(children, fields=fields)
    offsets = pc.subtract(arr.offsets, arr.offsets[0])
    return pa.ListArray.from_arrays(offsets, struct, mask=arr.is_null())


def _fill_json(col: pa.Array, values: dict[str, pa.Array]) -> pa.Array:
    """Replace the marker in each JSON template by the row's value (each marker occurs at
    most once per template; vectorized over the rows that have it)."""
    out = col
    for marker, vals in values.items():
        has = pc.fill_null(pc.match_substring(out, marker), False)
        idx = pc.indices_nonzero(has)
        if len(idx) == 0:
            continue
        parts = pc.split_pattern(pc.take(out, idx), marker, max_splits=1)
        joined = pc.binary_join_element_wise(pc.list_element(parts, 0), pc.fill_null(pc.take(vals, idx), ""),
                                             pc.list_element(parts, 1), "")
        out = pc.replace_with_mask(out, has, joined)
    return out


class Plan:
    """Which template each block of a trace uses and where its anomalies are; `rows(start,
    stop)` builds any row range, so a trace larger than memory is written part by part
    (a 10M-exchange table built at once took more than the machine's 24 GiB)."""

    def __init__(self, n_exchanges: int, seed: int, anomalies: bool = True) -> None:
        clean, _ = _template(None)
        self.n, self.k = n_exchanges, clean.num_rows
        n_blocks = max(1, -(-n_exchanges // self.k))
        templates, expected_local = [clean], [[]]
        placed: dict[int, int] = {}  # block -> template index
        if anomalies:
            rng = random.Random(seed)
            full = n_exchanges // self.k  # a cut last block ends like a trace does: no anomaly there
            blocks = rng.sample(range(full), min(len(ANOMALY_KINDS), full))
            for kind, blk in zip(ANOMALY_KINDS, blocks):
                t, exp = _template(kind)
                if t.num_rows != self.k:
                    raise AssertionError(f"variant {kind} has {t.num_rows} rows, the clean block {self.k}")
                placed[blk] = len(templates)
                templates.append(t)
                expected_local.append(exp)
        self.source = pa.concat_tables(templates)
        self.tmpl = np.zeros(n_blocks, dtype=np.int64)
        for blk, ti in placed.items():
            self.tmpl[blk] = ti
        self.t0_ms = 1_790_000_000_000 + np.random.default_rng(seed).integers(0, 1000)
        self.expected = sorted(((rule, blk * self.k + i + 1) for blk, ti in placed.items()
                                for rule, i in expected_local[ti]), key=lambda x: x[1])

    def parts(self, rows_per_part: int) -> list[tuple[int, int]]:
        """Row ranges of whole blocks (no connection spans two), at least rows_per_part rows each."""
        step = max(1, -(-rows_per_part // self.k)) * self.k
        return [(start, min(start + step, self.n)) for start in range(0, self.n, step)]

    def rows(self, start: int, stop: int) -> pa.Table:
        idx = np.arange(start, stop, dtype=np.int64)
        block, local = idx // self.k, idx % self.k
        table = self.source.take(pa.array(self.tmpl[block] * self.k + local))
        seq = idx + 1
        span_ms = (self.k + 2) * ROW_GAP_MS
        cols = {name: table.column(name).combine_chunks() for name in table.column_names}
        bl = pa.array(block)
        sfx = pc.binary_join_element_wise(pa.scalar("-b"), pc.cast(bl, pa.string()), "")
        pid_shift = pa.array(block * PID_STRIDE)
        cols["seq"] = pa.array(seq)
        for c, scale, base in (("request_mono_ns", 1_000_000, 0), ("response_mono_ns", 1_000_000, 0),
                               ("request_wall_ms", 1, self.t0_ms), ("response_wall_ms", 1, self.t0_ms)):
            cols[c] = pc.add(cols[c], pa.array(block * span_ms * scale + base))
        cols["correlation_id"] = pa.array(seq.astype(np.int32))
        cols["connection_id"] = pc.add(cols["connection_id"], pa.array(block * CONN_STRIDE))
        txn_id = _suffix(pc.replace_substring(cols["transactional_id"], M_TXN, "tx"), sfx)
        group = _suffix(pc.replace_substring(cols["group_id"], M_GROUP, "g"), sfx)
        member_base = pc.binary_join_element_wise(pa.scalar("m"), sfx, pa.scalar("-"), "")
        member = pc.binary_join_element_wise(member_base, pc.replace_substring(cols["member_id"], M_MEMBER, ""), "")
        pid = pc.if_else(pc.greater_equal(cols["producer_id"], 0), pc.add(cols["producer_id"], pid_shift),
                         cols["producer_id"])
        cols["transactional_id"], cols["group_id"], cols["member_id"], cols["producer_id"] = txn_id, group, member, pid
        gpid = cols["granted_producer_id"]
        cols["granted_producer_id"] = pc.if_else(pc.greater_equal(gpid, 0), pc.add(gpid, pid_shift), gpid)
        for c in ("batches", "aborted_transactions"):
            cols[c] = _shift_nested_pid(cols[c], pid_shift)
        values = {M_TXN: txn_id, M_PID: pc.cast(pid_shift, pa.string()), M_GROUP: group, M_MEMBER: member_base}
        for c in ("request_json", "response_json"):
            cols[c] = _fill_json(cols[c], values)
        return pa.table([cols[n] for n in table.column_names], schema=ts.schema())


def build_table(n_exchanges: int, seed: int, anomalies: bool = True) -> tuple[pa.Table, list[tuple[str, int]]]:
    plan = Plan(n_exchanges, seed, anomalies)
    return plan.rows(0, n_exchanges), plan.expected


def _write_segment(table: pa.Table, path: str, index: int) -> str:
    name = os.path.join(path, f"trace-synthetic-{index:05d}.parquet")
    pq.write_table(table, name, compression="zstd", row_group_size=200_000)
    return name


def write_segments(table: pa.Table, path: str, rows_per_segment: int = ROWS_PER_SEGMENT) -> list[str]:
    os.makedirs(path, exist_ok=True)
    return [_write_segment(table.slice(start, rows_per_segment), path, i)
            for i, start in enumerate(range(0, table.num_rows, rows_per_segment))]


def generate(path: str, n_exchanges: int, seed: int, anomalies: bool = True) -> list[tuple[str, int]]:
    """Write a synthetic trace of `n_exchanges` rows into directory `path`, one segment per
    part (built one at a time); return the (rule id, seq) pairs of the injected anomalies
    (empty with anomalies=False)."""
    plan = Plan(n_exchanges, seed, anomalies)
    os.makedirs(path, exist_ok=True)
    for i, (start, stop) in enumerate(plan.parts(ROWS_PER_SEGMENT)):
        _write_segment(plan.rows(start, stop), path, i)
    return plan.expected


def block_size() -> int:
    return _template(None)[0].num_rows


if __name__ == "__main__":  # python -m replay.synthetic_traces DIR N [SEED]
    import sys

    exp = generate(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    print(f"wrote {sys.argv[2]} exchanges to {sys.argv[1]}; {len(exp)} anomalies injected")
    for rule, seq in exp:
        print(f"  {rule} at seq {seq}")
