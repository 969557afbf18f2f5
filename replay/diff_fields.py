"""What `kipcheck diff` compares, and how: the field spec shared by the Spark and the
pure-Python implementations (replay/diff_spark.py, replay/diff_pure.py).

Alignment. An exchange is identified across two traces by
``(client_id, connection ordinal, api_key, api ordinal)``: the connection ordinal is the
rank of the connection among the connections with the same client_id, ordered by their
first request (request_mono_ns, then connection_id); the api ordinal is the rank of the
exchange among the connection's exchanges of the same api_key and request fingerprint
(request_mono_ns, then seq). The fingerprint tells discovery requests apart, whose number is
client timing (librdkafka refreshes metadata and coordinators when it sees fit): Metadata by
the topic names it names and answers, FindCoordinator by its key; every other api has
none. So an extra brokers-only Metadata does not shift the Metadata requests for a topic.
A replay keeps connections and their order, so every exchange aligns; two independent runs
of the same workload also align, except where timing decided how many requests a client
sent (an extra empty Fetch shifts only the later Fetches of that connection). Exchanges left
over on both sides are aligned a second time by ``(client_id, api_key, ordinal among the
leftovers of that client and api)`` (``align="client"``), which recovers a connection that
was opened in a different order. What is still left is ``only_in_a`` / ``only_in_b``.

Values. Every compared value is a string: ints as decimals, booleans ``true``/``false``,
null ``null``, a value the other side lacks ``<missing>``, lists ``[1,2]`` (``error_codes``
sorted: it is a bag). Identifiers the targets assign are replaced by placeholders before
comparing (see `placeholder`): topic ids by ``<topic_id:NAME>`` when the trace shows the
topic's name anywhere, otherwise, like producer ids and member ids, ``<cat#n>`` numbered
by first appearance in alignment order. Sentinels (-1, "", the zero UUID) stay.

Response JSON (optional, ``json=True``): both responses are normalized with
clients.normalize.Normalizer (ids, hosts, ports, timestamps, throttle time, session ids)
and compared leaf by leaf; keys the columns already compare are left out so one difference
is reported once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow as pa

from clients.normalize import MISSING, Normalizer, compare
from reference_impl.protocol.api_keys import ApiKey

NULL = "null"
MISSING_VALUE = MISSING  # "<missing>"
EXCHANGE_FIELD = "<exchange>"  # the field of only_in_a / only_in_b rows
IDLE_POLL_FIELD = "<idle poll>"  # ... when the unaligned exchange is an empty poll (always noise)
# APIs a client repeats on a timer or a long poll, or sends when it sees fit (discovery):
# how many of them a run sends is timing.
POLL_APIS = frozenset({"fetch", "share_fetch", "heartbeat", "share_group_heartbeat", "consumer_group_heartbeat",
                       "metadata", "find_coordinator", "api_versions"})

KIND_FIELD, KIND_ONLY_A, KIND_ONLY_B = "field", "only_in_a", "only_in_b"
ALIGN_CONNECTION, ALIGN_CLIENT = "connection", "client"

ID_CATEGORIES = ("producer_id", "member_id", "topic_id")
ZERO_UUID = "00000000-0000-0000-0000-000000000000"

# Discovery APIs aligned by request fingerprint (see the module docstring).

# Trace columns the diff reads (never the frames).
READ_COLUMNS = (
    "topics", "group_id", "transactional_id",
    "kind", "seq", "request_mono_ns", "connection_id", "client_id", "api_key", "api_name", "api_version",
    "status", "decode_error", "error_code", "error_codes", "producer_id", "producer_epoch", "member_id",
    "member_epoch", "generation_id", "share_session_epoch", "partitions", "batches", "acquired_records",
    "acknowledgement_batches", "aborted_transactions",
)
JSON_COLUMN = "response_json"


@dataclass(frozen=True)
class Field:
    name: str
    kind: str = "int"  # int | str | bool | bag (sorted list) | seq (ordered list)
    category: str | None = None  # id category normalized by placeholder


SCALARS: tuple[Field, ...] = (
    Field("status", "str"),
    Field("api_version"),
    Field("error_code"),
    Field("error_codes", "bag"),
    Field("producer_id", category="producer_id"),
    Field("producer_epoch"),
    Field("member_id", "str", category="member_id"),
    Field("member_epoch"),
    Field("generation_id"),
    Field("share_session_epoch"),
)

LISTS: tuple[tuple[str, tuple[Field, ...]], ...] = (
    ("partitions", (
        Field("side", "str"), Field("topic", "str"), Field("topic_id", "str", "topic_id"), Field("partition"),
        Field("error_code"), Field("fetch_offset"), Field("base_offset"), Field("committed_offset"),
        Field("offset"), Field("high_watermark"), Field("last_stable_offset"), Field("log_start_offset"),
        Field("leader_epoch"),
    )),
    ("batches", (
        Field("side", "str"), Field("topic", "str"), Field("topic_id", "str", "topic_id"), Field("partition"),
        Field("base_offset"), Field("last_offset"), Field("base_sequence"),
        Field("producer_id", category="producer_id"), Field("producer_epoch"), Field("record_count"),
        Field("transactional", "bool"), Field("control", "bool"), Field("compression"),
    )),
    ("acquired_records", (
        Field("topic_id", "str", "topic_id"), Field("partition"), Field("first_offset"), Field("last_offset"),
        Field("delivery_count"),
    )),
    ("acknowledgement_batches", (
        Field("side", "str"), Field("topic_id", "str", "topic_id"), Field("partition"), Field("first_offset"),
        Field("last_offset"), Field("acknowledge_types", "seq"),
    )),
    ("aborted_transactions", (
        Field("topic", "str"), Field("topic_id", "str", "topic_id"), Field("partition"),
        Field("producer_id", category="producer_id"), Field("first_offset"),
    )),
)

# Where ids occur, in first-appearance order within one exchange: (slot, column, subfield|None, category).
# Slot numbers order the occurrences of one exchange (list positions are added to them).
SLOT_STRIDE = 100_000
ID_SLOTS: tuple[tuple[int, str, str | None, str], ...] = (
    (0, "producer_id", None, "producer_id"),
    (1, "member_id", None, "member_id"),
    (2 * SLOT_STRIDE, "partitions", "topic_id", "topic_id"),
    (3 * SLOT_STRIDE, "batches", "topic_id", "topic_id"),
    (4 * SLOT_STRIDE, "batches", "producer_id", "producer_id"),
    (5 * SLOT_STRIDE, "acquired_records", "topic_id", "topic_id"),
    (6 * SLOT_STRIDE, "acknowledgement_batches", "topic_id", "topic_id"),
    (7 * SLOT_STRIDE, "aborted_transactions", "topic_id", "topic_id"),
    (8 * SLOT_STRIDE, "aborted_transactions", "producer_id", "producer_id"),
)
# Lists whose entries pair a topic id with its name.
TOPIC_NAME_LISTS = ("partitions", "batches", "aborted_transactions")

# JSON keys the columns already compare (left out of the JSON walk).
JSON_COVERED_KEYS = (
    "error_code", "producer_id", "producer_epoch", "member_id", "member_epoch", "generation_id",
    "high_watermark", "last_stable_offset", "log_start_offset", "base_offset", "committed_offset",
    "fetch_offset", "offset", "leader_epoch", "records", "acquired_records", "aborted_transactions",
    "acknowledgement_batches",
)
JSON_EXTRA_CATEGORIES = {"session_id": ("session_id",)}


def is_sentinel(category: str, value: Any) -> bool:
    """Values with a meaning of their own: kept as they are, never numbered."""
    if value is None:
        return True
    if category == "producer_id":
        return int(value) < 0
    if category == "member_id":
        return value == ""
    return value == ZERO_UUID or value == ""


def is_idle_poll(api_name: str, error_code: int | None, error_codes: list | None, batches: list | None,
                 acquired: list | None) -> bool:
    """An unaligned exchange that says nothing about the broker: a poll API answered
    without error, with no record batch and no acquired records. Whether a client sent
    one more of these is timing, so they are noise by rule, never divergences."""
    return (api_name in POLL_APIS and error_code in (None, 0) and not error_codes and not acquired
            and not any(b["side"] == "response" for b in batches or ()))


def request_fingerprint(api_key: int, topics: list | None, group_id: str | None,
                        transactional_id: str | None) -> str:
    """The part of a discovery request that says what it asked for ("" for other apis)."""
    if api_key == ApiKey.METADATA:
        return ",".join(sorted(set(topics or ())))
    if api_key == ApiKey.FIND_COORDINATOR:
        return group_id or transactional_id or ""
    return ""


def placeholder(category: str, number: int) -> str:
    return f"<{category}#{number}>"


def topic_placeholder(name: str) -> str:
    return f"<topic_id:{name}>"


def fmt(value: Any, kind: str) -> str:
    """The comparison string of one value (the Spark side builds the same strings)."""
    if value is None:
        return NULL
    if kind == "bool":
        return "true" if value else "false"
    if kind == "bag":
        return "[" + ",".join(str(int(x)) for x in sorted(value)) + "]"
    if kind == "seq":
        return "[" + ",".join(str(int(x)) for x in value) + "]"
    if kind == "int":
        return str(int(value))
    return str(value)


_INDEX = re.compile(r"\[\d+\]")


def generic_field(path: str) -> str:
    """partitions[3].high_watermark -> partitions[].high_watermark (the noise/summary key)."""
    return _INDEX.sub("[]", path)


def api_label(api_name: str | None, api_key: int) -> str:
    return api_name or f"api_{api_key}"


# --- response JSON -------------------------------------------------------------------------


def _json_normalizer() -> Normalizer:
    return Normalizer(ignore_keys=JSON_COVERED_KEYS, extra_categories=JSON_EXTRA_CATEGORIES)


def _json_value(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return NULL
    return str(v)


SELF_MEMBER, OTHER_MEMBER = "<self>", "<another member>"


def _leader_relative(doc: Any) -> Any:
    """A JoinGroup response's `leader` is a member id the broker made up (KIP-394), which no
    second run repeats: it compares as whether it names the asking member or another one."""
    if isinstance(doc, dict) and isinstance(doc.get("leader"), str) and doc["leader"]:
        return {**doc, "leader": SELF_MEMBER if doc["leader"] == doc.get("member_id") else OTHER_MEMBER}
    return doc


def json_differences(a_json: str | None, b_json: str | None) -> list[tuple[str, str, str]]:
    """(path, a, b) for every leaf of the two normalized response JSONs that differs.

    Paths are ``json:`` + the normalize.compare path without its ``$`` (``json:heartbeat_interval_ms``)."""
    if a_json is None or b_json is None:
        return []
    a = _json_normalizer()(_leader_relative(json.loads(a_json)))
    b = _json_normalizer()(_leader_relative(json.loads(b_json)))
    out = []
    for d in compare(a, b):
        path = d.path[1:].lstrip(".") or "$"
        out.append(("json:" + path, _json_value(d.target), _json_value(d.reference)))
    return out


# --- requirement ids --------------------------------------------------------------------------

# (api name or "*", generic field regex, requirement ids). The first matching rule wins;
# ids are checked against conformance/catalog by the tests.
REQUIREMENT_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("*", re.escape(EXCHANGE_FIELD), ()),
    ("*", re.escape(IDLE_POLL_FIELD), ()),
    ("api_versions", r".*", ("PROTO.APIVER.001", "PROTO.APIVER.002")),
    ("*", r"api_version", ("PROTO.APIVER.002",)),
    ("init_producer_id", r"producer_epoch", ("KIP-98.INIT.001",)),
    ("init_producer_id", r"producer_id", ("KIP-98.IDEMP.001", "KIP-98.INIT.001")),
    ("init_producer_id", r".*error_code.*", ("KIP-98.INIT.003", "KIP-98.INIT.002")),
    ("init_producer_id", r".*", ("KIP-98.INIT.001",)),
    ("produce", r"partitions\[\]\.base_offset", ("PROTO.PRODUCE.002",)),
    ("produce", r".*error_code.*", ("KIP-98.IDEMP.003", "KIP-98.FENCE.003", "PROTO.PRODUCE.004")),
    ("produce", r".*", ("PROTO.PRODUCE.002", "KIP-98.IDEMP.003")),
    ("fetch", r"partitions\[\]\.last_stable_offset", ("KIP-98.LSO.001",)),
    ("fetch", r"aborted_transactions.*", ("KIP-98.FETCH.002",)),
    ("fetch", r"batches\[\]\.(transactional|control)", ("KIP-98.MARKER.005", "KIP-98.FETCH.003")),
    ("fetch", r".*error_code.*", ("PROTO.FETCH.002",)),
    ("fetch", r".*", ("PROTO.FETCH.001",)),
    ("list_offsets", r".*", ("PROTO.LISTOFF.001", "KIP-98.LSO.004")),
    ("metadata", r".*topic_id.*", ("PROTO.META.003",)),
    ("metadata", r".*", ("PROTO.META.001", "PROTO.META.002")),
    ("create_topics", r".*", ("PROTO.TOPIC.001",)),
    ("find_coordinator", r".*", ("KIP-98.COORD.001", "PROTO.GROUP.003")),
    ("add_partitions_to_txn", r".*", ("KIP-98.ADDPART.001", "KIP-98.ADDPART.003")),
    ("add_offsets_to_txn", r".*", ("KIP-98.ADDOFF.001", "KIP-98.ADDOFF.002")),
    ("txn_offset_commit", r".*", ("KIP-98.TXNOFF.001", "KIP-447.FENCE.001")),
    ("end_txn", r".*error_code.*", ("KIP-98.ENDTXN.003",)),
    ("end_txn", r".*", ("KIP-98.ENDTXN.001",)),
    ("write_txn_markers", r".*", ("KIP-98.MARKER.004",)),
    ("offset_fetch", r".*", ("PROTO.GROUP.001", "KIP-447.FETCH.001")),
    ("offset_commit", r".*", ("PROTO.GROUP.001", "PROTO.GROUP.004")),
    ("share_group_heartbeat", r"member_epoch", ("KIP-932.HB.001", "KIP-932.EPOCH.001")),
    ("share_group_heartbeat", r"json:heartbeat_interval(_ms)?", ("KIP-932.HB.004",)),
    ("share_group_heartbeat", r"json:assignment.*", ("KIP-932.HB.006", "KIP-932.ASSIGN.001")),
    ("share_group_heartbeat", r".*", ("KIP-932.HB.007",)),
    ("share_fetch", r"acquired_records\[\]\.delivery_count", ("KIP-932.STATE.003", "KIP-932.DELIVERY.001")),
    ("share_fetch", r"acquired_records.*", ("KIP-932.FETCH.001", "KIP-932.STATE.003")),
    ("share_fetch", r"share_session_epoch", ("KIP-932.SESSION.014",)),
    ("share_fetch", r".*acknowledge.*", ("KIP-932.FETCH.004", "KIP-932.ACK.002")),
    ("share_fetch", r"json:acquisition_lock_timeout(_ms)?", ("KIP-932.LOCK.001",)),
    ("share_fetch", r".*error_code.*", ("KIP-932.SESSION.004", "KIP-932.SESSION.005", "KIP-932.FETCH.010")),
    ("share_fetch", r".*", ("KIP-932.FETCH.001",)),
    ("share_acknowledge", r".*", ("KIP-932.SESSION.011", "KIP-932.ACK.002")),
    ("share_group_describe", r".*", ("KIP-932.ADMIN.002",)),
)
_COMPILED_RULES = tuple((api, re.compile(rx), ids) for api, rx, ids in REQUIREMENT_RULES)


def requirements_for(api_name: str, field: str) -> list[str]:
    for api, rx, ids in _COMPILED_RULES:
        if (api == "*" or api == api_name) and rx.fullmatch(field):
            return list(ids)
    return []


def requirement_table(keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
    return {k: requirements_for(*k) for k in keys}


# --- divergence rows ---------------------------------------------------------------------------

# Columns of divergences.parquet, in order (both implementations produce exactly these).
DIVERGENCE_COLUMNS = (
    "kind", "api_key", "api_name", "field", "path", "a_value", "b_value", "a_seq", "b_seq",
    "a_connection_id", "b_connection_id", "client_id", "align", "a_error_code", "b_error_code",
    "requirement_ids", "noise",
)


def divergence_schema():
    return pa.schema([
        ("kind", pa.string()), ("api_key", pa.int16()), ("api_name", pa.string()), ("field", pa.string()),
        ("path", pa.string()), ("a_value", pa.string()), ("b_value", pa.string()), ("a_seq", pa.int64()),
        ("b_seq", pa.int64()), ("a_connection_id", pa.int64()), ("b_connection_id", pa.int64()),
        ("client_id", pa.string()), ("align", pa.string()), ("a_error_code", pa.int16()),
        ("b_error_code", pa.int16()), ("requirement_ids", pa.list_(pa.string())), ("noise", pa.bool_()),
    ])
