"""Background Parquet segment writer for capture traces.

The proxy hands raw exchanges (frames + timings) to `TraceWriter.offer()`, a
non-blocking put into a bounded queue; a writer thread decodes them (kio), extracts the
structured columns, applies the payload policy and appends rows to the current segment.
When the queue is full `offer()` returns False and the proxy waits (back-pressure);
nothing is dropped silently: anything not recorded becomes a ``kind="gap"`` row.

Segments: ``trace-<start>-<n>.parquet.tmp`` while written, renamed to ``.parquet`` once
closed (after fsync), rolled by size or age. A recorder killed at any moment leaves the
finished segments intact and at most one ``.tmp`` (see trace_reader).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import hashlib
import json
import logging
import os
import queue
import re
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from reference_impl.protocol import framing
from reference_impl.protocol import records as rec
from replay import trace_schema as ts
from replay import typed_fields
from reference_impl.protocol.api_keys import ApiKey

log = logging.getLogger("kipcheck.replay.writer")

SASL_API_KEYS = frozenset({36})  # SaslAuthenticate: tokens/passwords never written
PAYLOAD_MODES = ("keep", "hash", "drop")


@dataclass
class RawExchange:
    """What the forwarding path hands over: frames and timings, nothing decoded."""

    seq: int
    connection_id: int
    listener: str
    upstream: str
    client_host: str
    client_port: int
    api_key: int
    api_version: int
    correlation_id: int
    request_mono_ns: int
    request_wall_ms: int
    request_frame: bytes
    status: str = ts.STATUS_OK
    response_mono_ns: int | None = None
    response_wall_ms: int | None = None
    response_frame: bytes | None = None  # as the broker sent it
    response_body: Any = None  # decoded on the forwarding path (address rewriting), else None
    addresses_rewritten: int = 0
    # sizes as the client and broker sent them, when the frames above were redacted before
    # the writer saw them (capture_spool: SaslAuthenticate); None: the frames' own lengths
    request_size: int | None = None
    response_size: int | None = None


@dataclass
class Gap:
    count: int
    reason: str
    wall_ms: int = 0
    connection_id: int | None = None


# --- decoding helpers --------------------------------------------------------------------


def api_name(api_key: int, api_version: int) -> str | None:
    try:
        return framing.request_schema(api_key, api_version).__module__.split(".")[2]
    except Exception:
        return None


def client_id_of(frame: bytes) -> str | None:
    """client_id: a legacy nullable string right after key/version/correlation id in
    both request header v1 and v2."""
    if len(frame) < 10:
        return None
    (n,) = struct.unpack_from(">h", frame, 8)
    if n < 0:
        return None
    return frame[10 : 10 + n].decode("utf-8", "replace")


def _jsonable(value: Any, records_mode: str = "summary") -> Any:
    if dataclasses.is_dataclass(value):
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if f.metadata.get("kafka_type") == "records":
                out[f.name] = _records_summary(v)
            else:
                out[f.name] = _jsonable(v)
        return out
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return int(value.value) if isinstance(value.value, int) else str(value.value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return str(value)


def _records_summary(data: Any) -> Any:
    if data is None:
        return None
    batches, tail = rec.split_batches(data)
    out = {"size": len(data), "batches": []}
    for b in batches:
        try:
            h = rec.parse_batch_header(b)
            out["batches"].append(
                {
                    "base_offset": h.base_offset,
                    "last_offset": h.last_offset,
                    "records": h.record_count,
                    "producer_id": h.producer_id,
                    "producer_epoch": h.producer_epoch,
                    "base_sequence": h.base_sequence,
                    "transactional": h.is_transactional,
                    "control": h.is_control,
                }
            )
        except Exception as exc:
            out["batches"].append({"error": str(exc)})
    if tail:
        out["partial_tail_bytes"] = tail
    return out


def to_json(entity: Any) -> str:
    return json.dumps(_jsonable(entity), separators=(",", ":"), sort_keys=False)


# --- payload policy -----------------------------------------------------------------------


def _hash(v: bytes | None) -> bytes | None:
    return None if v is None else hashlib.sha256(v).digest()


def transform_records(data: bytes | None, mode: str) -> bytes | None:
    """Apply the payload policy to a records field; batch headers (offsets, producer ids,
    sequences, record counts) are kept. hash: sha256 of each key/value/header value;
    drop: keys/values null, headers removed."""
    if data is None or mode == "keep":
        return data
    batches, _tail = rec.split_batches(data)
    out = bytearray()
    for b in batches:
        h = rec.parse_batch_header(b)
        if h.magic != rec.MAGIC_V2:
            continue  # legacy message sets are not rewritten: dropped from the copy
        records = rec.decode_records(b, h)
        new = []
        for r in records:
            if h.is_control:
                new.append(rec.NewRecord(value=r.value, key=r.key, headers=r.headers, timestamp=r.timestamp))
            elif mode == "hash":
                new.append(
                    rec.NewRecord(
                        value=_hash(r.value),
                        key=_hash(r.key),
                        headers=tuple((k, _hash(v)) for k, v in r.headers),
                        timestamp=r.timestamp,
                    )
                )
            else:
                new.append(rec.NewRecord(value=None, key=None, headers=(), timestamp=r.timestamp))
        out += rec.build_batch(
            new,
            base_offset=h.base_offset,
            compression=h.compression,
            timestamp_type=h.timestamp_type,
            max_timestamp=h.max_timestamp,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            transactional=h.is_transactional,
            control=h.is_control,
            partition_leader_epoch=h.partition_leader_epoch,
            offset_deltas=[r.offset_delta for r in records],
            last_offset_delta=h.last_offset_delta,
        )
    # a trailing partial batch (Fetch may cut one) is dropped: it cannot be decoded
    return bytes(out)


def _map_records(entity: Any, fn) -> Any:
    """Copy of `entity` with every records field passed through fn."""
    if not dataclasses.is_dataclass(entity):
        return entity
    changes = {}
    for f in dataclasses.fields(entity):
        v = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "records":
            nv = fn(v)
            if nv is not v:
                changes[f.name] = nv
        elif isinstance(v, tuple) and v and dataclasses.is_dataclass(v[0]):
            nv = tuple(_map_records(x, fn) for x in v)
            if any(a is not b for a, b in zip(nv, v)):
                changes[f.name] = nv
        elif dataclasses.is_dataclass(v):
            nv = _map_records(v, fn)
            if nv is not v:
                changes[f.name] = nv
    return dataclasses.replace(entity, **changes) if changes else entity


def _has_records(entity: Any) -> bool:
    found = False

    def fn(v):
        nonlocal found
        if v:
            found = True
        return v

    _map_records(entity, fn)
    return found


def redact_sasl(entity: Any) -> Any:
    if entity is not None and hasattr(entity, "auth_bytes"):
        return dataclasses.replace(entity, auth_bytes=b"")
    return entity


# --- structured extraction ------------------------------------------------------------------

_SCALARS = (
    "transactional_id",
    "producer_id",
    "producer_epoch",
    "group_id",
    "member_id",
    "member_epoch",
    "generation_id",
    "share_session_epoch",
)
_PARTITION_NUMS = ("fetch_offset", "base_offset", "committed_offset", "offset", "high_watermark",
                   "last_stable_offset", "log_start_offset", "leader_epoch")
_PARTITION_INDEX = ("partition_index", "partition", "partition_id")
_PARTITION_LISTS = ("partitions", "partition_indexes")


def _num(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return int(v.value)
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return int(v)
    return v


_VERSION_PREFIX = re.compile(r"^v\d+_and_(?:below|above)_")


def _fields(e: Any) -> dict[str, Any]:
    """Field values by canonical name (kio names a few fields `v3_and_below_<name>`)."""
    return {_VERSION_PREFIX.sub("", f.name): getattr(e, f.name) for f in dataclasses.fields(e)}


class Extracted:
    def __init__(self) -> None:
        self.scalars: dict[str, Any] = {}
        self.topics: list[str] = []
        self.topic_ids: list[str] = []
        self.partitions: list[dict] = []
        self.batches: list[dict] = []
        self.acquired: list[dict] = []
        self.acks: list[dict] = []
        self.aborted: list[dict] = []
        self.error_codes: list[int] = []
        self.top_error: int | None = None
        self.fallback: dict[str, Any] = {}

    def add_topic(self, name: Any, tid: Any) -> None:
        if isinstance(name, str) and name and name not in self.topics:
            self.topics.append(name)
        if isinstance(tid, uuid.UUID) and tid.int != 0 and str(tid) not in self.topic_ids:
            self.topic_ids.append(str(tid))

    def walk(self, entity: Any, side: str) -> None:
        if entity is None:
            return
        if side == "response" and hasattr(entity, "error_code"):
            self.top_error = _num(entity.error_code)
        self._coordinator_keys(entity, side)
        # breadth-first for scalars: the shallowest occurrence wins
        level = [entity]
        while level:
            nxt = []
            for e in level:
                fields = _fields(e)
                for name, v in fields.items():
                    if name == "aborted_transactions":
                        continue
                    if name in _SCALARS and name not in self.scalars and v is not None and not isinstance(v, tuple):
                        if name in ("producer_id", "producer_epoch") and _num(fields.get("producer_id", 0)) < 0:
                            # "no producer id yet" (InitProducerId request): only a fallback
                            self.fallback.setdefault(name, _num(v))
                        else:
                            self.scalars[name] = _num(v)
                    if isinstance(v, tuple):
                        nxt.extend(x for x in v if dataclasses.is_dataclass(x))
                    elif dataclasses.is_dataclass(v):
                        nxt.append(v)
            level = nxt
        self._deep(entity, side, None, None, "")

    def _coordinator_keys(self, entity: Any, side: str) -> None:
        """FindCoordinator: `key` (v0-3) / `coordinator_keys` (v4+, request) name a group
        (key_type 0) or a transactional id (key_type 1)."""
        if side != "request" or not hasattr(entity, "key_type"):
            return
        keys = getattr(entity, "coordinator_keys", None) or ((getattr(entity, "key", None),) if hasattr(entity, "key") else ())
        keys = [k for k in keys if isinstance(k, str)]
        if not keys:
            return
        kind = {0: "group_id", 1: "transactional_id"}.get(int(entity.key_type))
        if kind:
            self.scalars.setdefault(kind, keys[0])

    def _deep(self, e: Any, side: str, topic: str | None, tid: str | None, parent_field: str) -> None:
        names = {f.name for f in dataclasses.fields(e)}
        t = None
        cname = type(e).__name__
        if "Topic" in cname and "Config" not in cname and isinstance(getattr(e, "name", None), str):
            t = e.name
        else:
            for n in ("topic", "topic_name"):
                if n in names and isinstance(getattr(e, n), str):
                    t = getattr(e, n)
                    break
        topic_id = getattr(e, "topic_id", None)
        if t is not None or isinstance(topic_id, uuid.UUID):
            self.add_topic(t, topic_id)
            topic = t or topic
            if isinstance(topic_id, uuid.UUID):
                tid = str(topic_id)
        if side == "response":
            # error_code, and the per-purpose ones (AddPartitionsToTxn partition_error_code,
            # ShareFetch acknowledge_error_code, ...).
            for n in names:
                if n == "error_code" or n.endswith("_error_code"):
                    code = _num(getattr(e, n))
                    if code:
                        self.error_codes.append(code)
        pindex = None
        for n in _PARTITION_INDEX:
            if n in names and isinstance(getattr(e, n), int):
                pindex = int(getattr(e, n))
                break
        if pindex is None and "index" in names and parent_field.startswith("partition"):
            pindex = int(e.index)
        if pindex is not None:
            row = {"side": side, "topic": topic, "topic_id": tid, "partition": pindex,
                   "error_code": _num(e.error_code) if "error_code" in names else None}
            for n in _PARTITION_NUMS:
                v = getattr(e, n, None) if n in names else None
                row[n] = _num(v) if isinstance(v, int) else None
            self.partitions.append(row)
        for f in dataclasses.fields(e):
            v = getattr(e, f.name)
            if f.metadata.get("kafka_type") == "records":
                self._batches(v, side, topic, tid, pindex)
            elif f.name == "acquired_records" and v:
                for a in v:
                    self.acquired.append({"topic_id": tid, "partition": pindex, "first_offset": int(a.first_offset),
                                          "last_offset": int(a.last_offset), "delivery_count": int(a.delivery_count)})
            elif f.name == "acknowledgement_batches" and v:
                for a in v:
                    self.acks.append({"side": side, "topic_id": tid, "partition": pindex,
                                      "first_offset": int(a.first_offset), "last_offset": int(a.last_offset),
                                      "acknowledge_types": [int(x) for x in a.acknowledge_types]})
            elif f.name == "aborted_transactions" and v:
                for a in v:
                    self.aborted.append({"topic": topic, "topic_id": tid, "partition": pindex,
                                         "producer_id": int(a.producer_id), "first_offset": int(a.first_offset)})
            elif f.name in _PARTITION_LISTS and isinstance(v, tuple) and v and isinstance(v[0], int) and (topic or tid):
                for p in v:
                    self.partitions.append({"side": side, "topic": topic, "topic_id": tid, "partition": int(p),
                                            "error_code": None, **{n: None for n in _PARTITION_NUMS}})
            elif isinstance(v, tuple):
                for x in v:
                    if dataclasses.is_dataclass(x):
                        self._deep(x, side, topic, tid, f.name)
            elif dataclasses.is_dataclass(v):
                self._deep(v, side, topic, tid, f.name)

    def _batches(self, data: Any, side: str, topic: str | None, tid: str | None, pindex: int | None) -> None:
        if not data:
            return
        try:
            batches, _ = rec.split_batches(data)
        except Exception:
            return
        for b in batches:
            try:
                h = rec.parse_batch_header(b)
            except Exception:
                continue
            self.batches.append({
                "side": side, "topic": topic, "topic_id": tid, "partition": pindex,
                "base_offset": h.base_offset, "last_offset": h.last_offset, "base_sequence": h.base_sequence,
                "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                "record_count": h.record_count, "transactional": h.is_transactional,
                "control": h.is_control, "compression": int(h.compression_id),
            })


# --- rows ------------------------------------------------------------------------------------


def frame_of_request(frame: bytes, header_size: int, body: Any) -> bytes:
    return frame[:header_size] + framing.encode_entity(body)


def frame_of_response(frame: bytes, body: Any, api_key: int, api_version: int) -> bytes:
    corr = struct.unpack_from(">i", frame, 0)[0]
    return framing.encode_response(body, corr, api_key, api_version)[4:]


def build_row(x: RawExchange, payloads: str) -> dict:
    """One trace row from a raw exchange. Never raises: problems go to decode_error."""
    errors: list[str] = []
    sasl = x.api_key in SASL_API_KEYS
    req_body = resp_body = None
    header_size = None
    try:
        decoded = framing.decode_request(x.request_frame, strict=False)
        req_body, header_size = decoded.body, decoded.header.header_size
    except Exception as exc:
        errors.append(f"request: {exc}")
    if x.response_frame is not None:
        resp_body = x.response_body
        if resp_body is None:
            try:
                resp_body = framing.decode_response_frame(x.response_frame, x.api_key, x.api_version).body
            except Exception as exc:
                errors.append(f"response: {exc}")
    if sasl:
        req_body, resp_body = redact_sasl(req_body), redact_sasl(resp_body)
    ex = Extracted()
    try:
        ex.walk(req_body, "request")
        ex.walk(resp_body, "response")
    except Exception as exc:  # extraction is best effort
        errors.append(f"extract: {exc}")
    req_bytes: bytes | None = None if sasl else x.request_frame
    resp_bytes: bytes | None = None if sasl else x.response_frame
    if payloads != "keep" and not sasl:
        fn = lambda d: transform_records(d, payloads)  # noqa: E731
        if req_body is not None and _has_records(req_body):
            try:
                req_body = _map_records(req_body, fn)
                req_bytes = frame_of_request(x.request_frame, header_size, req_body)
            except Exception as exc:
                errors.append(f"payloads: request: {exc}")
                req_bytes = None
        elif req_body is None and x.api_key == ApiKey.PRODUCE:
            req_bytes = None  # cannot apply the policy to an undecodable Produce: never keep it
        if resp_body is not None and _has_records(resp_body):
            try:
                resp_body = _map_records(resp_body, fn)
                resp_bytes = frame_of_response(x.response_frame, resp_body, x.api_key, x.api_version)
            except Exception as exc:
                errors.append(f"payloads: response: {exc}")
                resp_bytes = None
        elif resp_body is None and x.api_key in (ApiKey.FETCH, ApiKey.SHARE_FETCH):
            resp_bytes = None
    s = ex.scalars
    req_batches = [b for b in ex.batches if b["side"] == "request"]
    if "producer_id" not in s:
        for b in req_batches:
            if b["producer_id"] >= 0:
                s["producer_id"], s["producer_epoch"] = b["producer_id"], b["producer_epoch"]
                break
    for k, v in ex.fallback.items():
        s.setdefault(k, v)
    producer_id, producer_epoch = s.get("producer_id"), s.get("producer_epoch")
    try:
        typed = typed_fields.extract(x.api_key, req_body, resp_body)
    except Exception as exc:  # extraction is best effort, like the walk above
        errors.append(f"extract: {exc}")
        typed = typed_fields.extract(-1, None, None)
    return {
        "kind": ts.KIND_EXCHANGE,
        "seq": x.seq,
        "request_mono_ns": x.request_mono_ns,
        "request_wall_ms": x.request_wall_ms,
        "response_mono_ns": x.response_mono_ns,
        "response_wall_ms": x.response_wall_ms,
        "connection_id": x.connection_id,
        "listener": x.listener,
        "upstream": x.upstream,
        "client_host": x.client_host,
        "client_port": x.client_port,
        "client_id": client_id_of(x.request_frame),
        "api_key": x.api_key,
        "api_name": api_name(x.api_key, x.api_version),
        "api_version": x.api_version,
        "correlation_id": x.correlation_id,
        "status": x.status,
        "request_size": len(x.request_frame) if x.request_size is None else x.request_size,
        "response_size": x.response_size if x.response_size is not None or x.response_frame is None
        else len(x.response_frame),
        "addresses_rewritten": x.addresses_rewritten,
        "decode_error": "; ".join(errors) or None,
        "error_code": ex.top_error,
        "error_codes": ex.error_codes,
        "transactional_id": s.get("transactional_id"),
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "group_id": s.get("group_id"),
        "member_id": s.get("member_id"),
        "member_epoch": s.get("member_epoch"),
        "generation_id": s.get("generation_id"),
        "share_session_epoch": s.get("share_session_epoch"),
        "topics": ex.topics,
        "topic_ids": ex.topic_ids,
        "partitions": ex.partitions,
        "batches": ex.batches,
        "base_sequences": [b["base_sequence"] for b in req_batches],
        "acquired_records": ex.acquired,
        "acknowledgement_batches": ex.acks,
        "aborted_transactions": ex.aborted,
        "request_json": None if req_body is None else _safe_json(req_body),
        "response_json": None if resp_body is None else _safe_json(resp_body),
        "request_bytes": req_bytes,
        "response_bytes": resp_bytes,
        "payloads": payloads,
        "gap_count": None,
        "gap_reason": None,
        "schema_version": ts.SCHEMA_VERSION,
        **typed,
    }


def _safe_json(body: Any) -> str | None:
    try:
        return to_json(body)
    except Exception as exc:
        return json.dumps({"json_error": str(exc)})


def gap_row(g: Gap) -> dict:
    row = {name: None for name in ts.COLUMN_NAMES}
    row.update(kind=ts.KIND_GAP, gap_count=g.count, gap_reason=g.reason, request_wall_ms=g.wall_ms,
               connection_id=g.connection_id, schema_version=ts.SCHEMA_VERSION)
    for name in ("error_codes", "topics", "topic_ids", "partitions", "batches", "base_sequences",
                 "acquired_records", "acknowledgement_batches", "aborted_transactions", "share_start_offsets"):
        row[name] = []
    return row


# --- the writer ---------------------------------------------------------------------------------


def _size_of(item: Any) -> int:
    if isinstance(item, RawExchange):
        return len(item.request_frame) + len(item.response_frame or b"")
    return 0

_STOP = object()


class TraceWriter:
    """Thread-backed segment writer. `offer()` never blocks; `close()` drains and finishes."""

    def __init__(
        self,
        out_dir: str,
        payloads: str = "keep",
        *,
        segment_max_bytes: int = 64 << 20,
        segment_max_seconds: float = 60.0,
        flush_rows: int = 200,
        flush_seconds: float = 0.5,
        queue_size: int = 1000,
        max_queued_bytes: int = 256 << 20,
        prefix: str = "trace",
    ) -> None:
        if payloads not in PAYLOAD_MODES:
            raise ValueError(f"payloads must be one of {PAYLOAD_MODES}, not {payloads!r}")
        self.out_dir = out_dir
        self.payloads = payloads
        self.segment_max_bytes = segment_max_bytes
        self.segment_max_seconds = segment_max_seconds
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.max_queued_bytes = max_queued_bytes
        self._queued_bytes = 0
        self._bytes_lock = threading.Lock()
        self._prefix = f"{prefix}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}"
        self._seg_no = 0
        self._pw: pq.ParquetWriter | None = None
        self._tmp: str | None = None
        self._seg_started = 0.0
        self._rows: list[dict] = []
        self._pending_gaps: list[Gap] = []
        self._gap_lock = threading.Lock()
        self._schema = ts.schema()
        self.stats = {"rows": 0, "exchanges": 0, "gaps": 0, "gap_exchanges": 0, "segments": 0,
                      "row_errors": 0, "write_errors": 0}
        self.segments: list[str] = []
        self._thread = threading.Thread(target=self._run, name="kipcheck-trace-writer", daemon=True)
        self._closed = False
        os.makedirs(out_dir, exist_ok=True)

    # -- producer side -----------------------------------------------------------------------

    def start(self) -> "TraceWriter":
        self._thread.start()
        return self

    def offer(self, item: RawExchange | Gap) -> bool:
        """Non-blocking put; False when the queue is full (the caller waits and retries)."""
        if self._closed:
            return False
        size = _size_of(item)
        with self._bytes_lock:
            # bounded by count and by bytes (one item always fits in an empty queue)
            if self._queued_bytes and self._queued_bytes + size > self.max_queued_bytes:
                return False
            try:
                self.queue.put_nowait(item)
            except queue.Full:
                return False
            self._queued_bytes += size
        return True

    def record_gap(self, count: int, reason: str, connection_id: int | None = None) -> None:
        """Note exchanges that were not recorded; written as a gap row at the next flush
        (never blocks, never lost while the writer lives)."""
        with self._gap_lock:
            self._pending_gaps.append(Gap(count, reason, int(time.time() * 1000), connection_id))

    def close(self, timeout: float = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        self.queue.put(_STOP)
        self._thread.join(timeout)

    def __enter__(self) -> "TraceWriter":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writer thread ---------------------------------------------------------------------

    def _run(self) -> None:
        last_flush = time.monotonic()
        while True:
            try:
                item = self.queue.get(timeout=self.flush_seconds / 2)
            except queue.Empty:
                item = None
            if item is _STOP:
                try:
                    self._flush()
                    self._finish_segment()
                except Exception as exc:
                    log.exception("trace writer error at close")
                    self.stats["write_errors"] += 1
                    self._abandon_segment(f"{exc!r}")
                return
            if item is not None:
                with self._bytes_lock:
                    self._queued_bytes -= _size_of(item)
                self._add(item)
            now = time.monotonic()
            try:
                if len(self._rows) >= self.flush_rows or (
                    now - last_flush >= self.flush_seconds and (self._rows or self._pending_gaps)
                ):
                    self._flush()
                    last_flush = now
                if self._pw is not None and now - self._seg_started >= self.segment_max_seconds:
                    self._finish_segment()
            except Exception as exc:  # the thread must live on: a dead writer would stall the proxy
                log.exception("trace writer error")
                self.stats["write_errors"] += 1
                self._abandon_segment(f"{exc!r}")

    def _add(self, item: RawExchange | Gap) -> None:
        if isinstance(item, Gap):
            self._rows.append(gap_row(item))
            self.stats["gaps"] += 1
            self.stats["gap_exchanges"] += item.count
            return
        try:
            self._rows.append(build_row(item, self.payloads))
            self.stats["exchanges"] += 1
        except Exception as exc:  # a bug in row building: the exchange becomes a gap
            log.exception("trace row failed")
            self.stats["row_errors"] += 1
            self._rows.append(gap_row(Gap(1, f"row build failed for seq {item.seq}: {exc!r}", item.request_wall_ms,
                                          item.connection_id)))
            self.stats["gaps"] += 1
            self.stats["gap_exchanges"] += 1

    def _flush(self) -> None:
        with self._gap_lock:
            gaps, self._pending_gaps = self._pending_gaps, []
        for g in gaps:
            self._rows.append(gap_row(g))
            self.stats["gaps"] += 1
            self.stats["gap_exchanges"] += g.count
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        try:
            table = pa.Table.from_pylist(rows, schema=self._schema)
            if self._pw is None:
                self._open_segment()
            self._pw.write_table(table)
            self.stats["rows"] += len(rows)
        except Exception as exc:
            log.exception("trace write failed")
            self.stats["write_errors"] += 1
            lost = sum(1 for r in rows if r["kind"] == ts.KIND_EXCHANGE)
            self._abandon_segment(f"write failed: {exc!r}")
            with self._gap_lock:
                self._pending_gaps.append(Gap(lost, f"segment write failed: {exc!r}", int(time.time() * 1000)))
            return
        if self._tmp is not None and os.path.getsize(self._tmp) >= self.segment_max_bytes:
            self._finish_segment()

    def _open_segment(self) -> None:
        self._seg_no += 1
        self._tmp = os.path.join(self.out_dir, f"{self._prefix}-{self._seg_no:05d}.parquet.tmp")
        self._pw = pq.ParquetWriter(self._tmp, self._schema, compression="zstd")
        self._seg_started = time.monotonic()

    def _finish_segment(self) -> None:
        if self._pw is None:
            return
        pw, tmp = self._pw, self._tmp
        self._pw = self._tmp = None
        pw.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        final = tmp[: -len(".tmp")]
        os.rename(tmp, final)
        try:
            dfd = os.open(self.out_dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
        self.segments.append(final)
        self.stats["segments"] += 1

    def _abandon_segment(self, why: str) -> None:
        pw, tmp = self._pw, self._tmp
        self._pw = self._tmp = None
        if pw is not None:
            try:
                pw.close()
            except Exception:
                pass
        if tmp is not None:
            # keep it for inspection; the reader reports it as partial
            try:
                os.rename(tmp, tmp + ".failed")
            except OSError:
                pass
        log.warning("abandoned segment %s: %s", tmp, why)
