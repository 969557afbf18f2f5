"""The Parquet schema of kipcheck traffic traces (see docs/traces.md).

One row per request/response exchange seen by the capture proxy (``kind="exchange"``),
plus explicit gap markers (``kind="gap"``) saying how many exchanges were not recorded
and why. Every segment file carries ``schema_version`` (and ``kipcheck_trace``) in its
Parquet key/value metadata; readers refuse versions they do not know, naming the file.

Version history:
  1 - first version.
  2 - typed columns for what checks and diffs read (``schema_version``, ``isolation_level``,
      ``txn_committed``, ``granted_producer_id``/``_epoch``, ``share_start_offsets``), so no
      job parses JSON per row. Version-1 segments stay readable: the reader (pyarrow) and
      the Spark jobs derive these columns from the JSON for rows whose ``schema_version``
      is null (replay.typed_fields, replay.trace_reader.upgrade).
  3 - the compacted layout (`kipcheck compact`, replay.compact): the version-2 columns plus
      the diff's alignment key and id placeholders precomputed (``V3_FIELDS``), one file per
      bucket of ``align_conn`` (Spark's bucket function), sorted by the alignment key. The
      recorder still writes version-2 segments (SCHEMA_VERSION); compaction writes
      COMPACT_VERSION. Readers of versions 1/2 read version 3 (a superset of columns).
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 2  # what the recorder's segments carry
COMPACT_VERSION = 3  # what `kipcheck compact` writes (replay.compact)
SUPPORTED_VERSIONS = frozenset({1, 2, 3})
META_SCHEMA_VERSION = b"schema_version"
META_FORMAT = b"kipcheck_trace"
# version 3 layout metadata (every compacted file carries it; replay.compact)
META_BUCKETS = b"buckets"  # bucket count N
META_BUCKET_COLUMN = b"bucket_column"  # align_conn
META_BUCKET_HASH = b"bucket_hash"  # how a row's bucket is computed (see V3_BUCKET_HASH)
META_SORT_COLUMNS = b"sort_columns"  # comma-separated sort key within a bucket
V3_BUCKET_HASH = "spark-murmur3-x86_32(int64 align_conn, seed 42) pmod N"
V3_SORT_COLUMNS = ("align_conn", "api_key", "request_key", "api_ord")

KIND_EXCHANGE = "exchange"
KIND_GAP = "gap"

# status of an exchange row
STATUS_OK = "ok"  # request and response both seen
STATUS_NO_RESPONSE_EXPECTED = "no_response_expected"  # Produce acks=0
STATUS_CONNECTION_CLOSED = "connection_closed"  # request sent, connection ended before the response

PARTITION = pa.struct(
    [
        ("side", pa.string()),  # "request" | "response"
        ("topic", pa.string()),
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("error_code", pa.int16()),
        ("fetch_offset", pa.int64()),
        ("base_offset", pa.int64()),
        ("committed_offset", pa.int64()),
        ("offset", pa.int64()),
        ("high_watermark", pa.int64()),
        ("last_stable_offset", pa.int64()),
        ("log_start_offset", pa.int64()),
        ("leader_epoch", pa.int32()),
    ]
)

BATCH = pa.struct(
    [
        ("side", pa.string()),
        ("topic", pa.string()),
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("base_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("base_sequence", pa.int32()),
        ("producer_id", pa.int64()),
        ("producer_epoch", pa.int16()),
        ("record_count", pa.int32()),
        ("transactional", pa.bool_()),
        ("control", pa.bool_()),
        ("compression", pa.int8()),
    ]
)

ACQUIRED = pa.struct(
    [
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("first_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("delivery_count", pa.int16()),
    ]
)

ACK_BATCH = pa.struct(
    [
        ("side", pa.string()),
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("first_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("acknowledge_types", pa.list_(pa.int8())),
    ]
)

ABORTED = pa.struct(
    [
        ("topic", pa.string()),
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("producer_id", pa.int64()),
        ("first_offset", pa.int64()),
    ]
)

SHARE_START_OFFSET = pa.struct(
    [
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("start_offset", pa.int64()),
        ("error_code", pa.int16()),
    ]
)

FIELDS: list[tuple[str, pa.DataType, str]] = [
    ("kind", pa.string(), "exchange | gap"),
    ("seq", pa.int64(), "1, 2, ... in the order exchanges were handed to the writer (gap rows: null)"),
    ("request_mono_ns", pa.int64(), "time.monotonic_ns() when the request frame was read"),
    ("request_wall_ms", pa.int64(), "wall clock (ms since epoch) when the request frame was read"),
    ("response_mono_ns", pa.int64(), "time.monotonic_ns() when the response frame was read (null: none)"),
    ("response_wall_ms", pa.int64(), "wall clock ms of the response"),
    ("connection_id", pa.int64(), "proxy connection id (unique per recorder run)"),
    ("listener", pa.string(), "proxy listener host:port the client connected to"),
    ("upstream", pa.string(), "upstream broker host:port"),
    ("client_host", pa.string(), "client address"),
    ("client_port", pa.int32(), "client port"),
    ("client_id", pa.string(), "client_id from the request header"),
    ("api_key", pa.int16(), "request api key"),
    ("api_name", pa.string(), "request api name (kio module name)"),
    ("api_version", pa.int16(), "request api version"),
    ("correlation_id", pa.int32(), "request correlation id"),
    ("status", pa.string(), "ok | no_response_expected | connection_closed"),
    ("request_size", pa.int32(), "request frame bytes (without size prefix)"),
    ("response_size", pa.int32(), "response frame bytes as sent by the broker"),
    ("addresses_rewritten", pa.int32(), "broker endpoints the proxy rewrote in the response"),
    ("decode_error", pa.string(), "why the request or response could not be decoded (null: decoded)"),
    ("error_code", pa.int16(), "top-level response error_code, when the response has one"),
    ("error_codes", pa.list_(pa.int16()), "every non-zero error_code anywhere in the response"),
    ("transactional_id", pa.string(), "first transactional_id in request, else response"),
    ("producer_id", pa.int64(), "first producer_id (request, response, then record batch headers)"),
    ("producer_epoch", pa.int16(), "first producer_epoch (same order)"),
    ("group_id", pa.string(), "first group_id / key of a group"),
    ("member_id", pa.string(), "first member_id"),
    ("member_epoch", pa.int32(), "first member_epoch"),
    ("generation_id", pa.int32(), "first generation_id"),
    ("share_session_epoch", pa.int32(), "ShareFetch/ShareAcknowledge session epoch"),
    ("topics", pa.list_(pa.string()), "topic names seen (request and response)"),
    ("topic_ids", pa.list_(pa.string()), "topic ids seen"),
    ("partitions", pa.list_(PARTITION), "every partition-level entry, with offsets/errors"),
    ("batches", pa.list_(BATCH), "record batch headers (Produce request / Fetch, ShareFetch response)"),
    ("base_sequences", pa.list_(pa.int32()), "base_sequence of each request record batch"),
    ("acquired_records", pa.list_(ACQUIRED), "ShareFetch acquired record ranges"),
    ("acknowledgement_batches", pa.list_(ACK_BATCH), "ShareFetch/ShareAcknowledge ack batches"),
    ("aborted_transactions", pa.list_(ABORTED), "Fetch aborted transactions"),
    ("request_json", pa.string(), "decoded request as JSON (records summarised)"),
    ("response_json", pa.string(), "decoded response as JSON (records summarised)"),
    ("request_bytes", pa.binary(), "request frame (payloads per `payloads`; null for SASL)"),
    ("response_bytes", pa.binary(), "response frame as sent by the broker (same rules)"),
    ("payloads", pa.string(), "keep | hash | drop: what was done to record keys/values/headers"),
    ("gap_count", pa.int64(), "gap rows: exchanges not recorded"),
    ("gap_reason", pa.string(), "gap rows: why"),
]

# appended by version 2 (null in version-1 segments until derived; see module docstring)
FIELDS_V2: list[tuple[str, pa.DataType, str]] = [
    ("schema_version", pa.int16(), "schema version the writer wrote the row with (null: version 1)"),
    ("isolation_level", pa.int8(), "Fetch / ListOffsets request isolation_level (1: read_committed)"),
    ("txn_committed", pa.bool_(), "EndTxn request `committed` flag"),
    ("granted_producer_id", pa.int64(), "producer id an InitProducerId / EndTxn (v5+) response grants"),
    ("granted_producer_epoch", pa.int16(), "producer epoch an InitProducerId / EndTxn (v5+) response grants"),
    ("share_start_offsets", pa.list_(SHARE_START_OFFSET),
     "DescribeShareGroupOffsets response: topic_id, partition, start_offset (SPSO), error_code"),
]
# appended by version 3 (compaction): flat, typed, precomputed once per trace
FIELDS_V3: list[tuple[str, pa.DataType, str]] = [
    ("align_client", pa.string(), "client_id of the connection (max over its exchanges; '' when none)"),
    ("conn_ord", pa.int64(), "rank of the connection among those of align_client, by first request then connection_id"),
    ("align_conn", pa.int64(), "64-bit key of (align_client, conn_ord): the bucket column, equal across traces"),
    ("request_key", pa.string(), "request fingerprint of discovery requests (Metadata topics, FindCoordinator key)"),
    ("api_ord", pa.int64(), "rank of the exchange among its connection's of the same api_key and request_key"),
    ("id_placeholders", pa.map_(pa.int32(), pa.string()),
     "id slot -> placeholder (<producer_id#n>, <topic_id:NAME>...) of the trace-wide id numbering"),
]
V1_FIELDS = list(FIELDS)
FIELDS = V1_FIELDS + FIELDS_V2
V3_FIELDS = FIELDS + FIELDS_V3

_COLUMNS_OF = {1: V1_FIELDS, 2: FIELDS, 3: V3_FIELDS}


def schema(version: int = SCHEMA_VERSION) -> pa.Schema:
    """The Arrow schema of a segment of `version` (the writer writes SCHEMA_VERSION; older
    ones serve the migration tests and readers)."""
    if version not in _COLUMNS_OF:
        raise ValueError(f"no trace schema version {version}")
    base = pa.schema([pa.field(name, tp) for name, tp, _ in _COLUMNS_OF[version]])
    return base.with_metadata({META_SCHEMA_VERSION: str(version).encode(), META_FORMAT: b"1"})


COLUMN_NAMES = [name for name, _, _ in FIELDS]


def describe() -> str:
    """Markdown table of the columns (used by docs/traces.md)."""
    lines = ["| column | type | meaning |", "|---|---|---|"]
    for name, tp, doc in FIELDS:
        lines.append(f"| `{name}` | `{tp}` | {doc} |")
    return "\n".join(lines)
