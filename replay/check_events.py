"""Shared vocabulary of the check job's normalized events (pure and Spark paths alike).

Both checkers turn trace rows into the same event rows per entity kind; these constants
and helpers are the one definition of what is selected and how entities are keyed.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from reference_impl.protocol.api_keys import ApiKey

TXN_APIS = (ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT)
READ_COMMITTED = 1
# the apis any rule reads; Produce only with a transactional id, Fetch only read_committed
RELEVANT_APIS = (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.CREATE_TOPICS,
                 *TXN_APIS, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)

# the columns the check reads (everything else stays on disk)
COLUMNS = [
    "kind", "seq", "request_mono_ns", "request_wall_ms", "response_mono_ns", "response_wall_ms", "connection_id",
    "upstream", "api_key", "api_name", "api_version", "status", "decode_error", "error_code", "error_codes",
    "transactional_id", "producer_id", "producer_epoch", "group_id", "member_id", "share_session_epoch",
    "partitions", "batches", "acquired_records", "acknowledgement_batches", "aborted_transactions",
    "isolation_level", "txn_committed", "granted_producer_id", "granted_producer_epoch", "share_start_offsets",
]


def relevant(api_key: int, transactional_id: str | None, isolation_level: int | None) -> bool:
    """Does any rule read this exchange? (the Spark path filters with the same predicate)"""
    if api_key == ApiKey.PRODUCE:
        return transactional_id is not None
    if api_key == ApiKey.FETCH:
        return isolation_level == READ_COMMITTED
    return api_key in RELEVANT_APIS


def relevant_mask(table: Any) -> Any:
    """`relevant` over a pyarrow table of trace rows, also requiring a decoded exchange with
    a seq: a boolean array (check_cmd's decode pass; check_spark.WANTED is the same in SQL)."""
    api = table.column("api_key")
    exchange = pc.and_(pc.and_(pc.fill_null(pc.equal(table.column("kind"), "exchange"), False),
                               pc.is_valid(table.column("seq"))), pc.is_null(table.column("decode_error")))
    produce = pc.and_(pc.equal(api, int(ApiKey.PRODUCE)), pc.is_valid(table.column("transactional_id")))
    fetch = pc.and_(pc.equal(api, int(ApiKey.FETCH)),
                    pc.fill_null(pc.equal(table.column("isolation_level"), READ_COMMITTED), False))
    keys = lambda ks: pa.array([int(k) for k in ks], api.type)  # noqa: E731
    other = pc.and_(pc.invert(pc.is_in(api, keys([ApiKey.PRODUCE, ApiKey.FETCH]))), pc.is_in(api, keys(RELEVANT_APIS)))
    return pc.fill_null(pc.and_(exchange, pc.or_(pc.or_(produce, fetch), other)), False)


# The flat event table: every route's event columns (the *_EVENT lists below) with their
# Spark SQL types; check_spark builds it per check, compact_events writes it once.
EVENT_FIELDS = (
    ("route", "string"), ("entity", "string"), ("kind", "string"), ("api", "int"), ("t_req", "long"),
    ("t_resp", "long"), ("pid", "long"), ("epoch", "int"), ("grant_pid", "long"), ("grant_epoch", "int"),
    ("ok", "boolean"), ("t", "long"), ("topic", "string"), ("partition", "int"), ("offset", "long"),
    ("txn", "string"), ("committed", "boolean"), ("topic_id", "string"), ("member", "string"), ("first", "long"),
    ("last", "long"), ("count", "int"), ("types", "array<int>"), ("group", "string"), ("has_acks", "boolean"),
    ("error", "int"), ("lso", "long"), ("listed", "boolean"), ("transactional", "boolean"), ("control", "boolean"),
    ("tid", "string"),
)

# Event columns per entity kind (what each replay reads of the flat event table).
TXN_EVENT = ["entity", "seq", "api", "t_req", "t_resp", "pid", "epoch", "grant_pid", "grant_epoch", "ok"]
GROUP_EVENT = ["entity", "seq", "kind", "t", "topic", "partition", "offset", "txn", "committed"]
SHARE_EVENT = ["entity", "seq", "kind", "topic_id", "partition", "member", "first", "last", "count", "types", "t_req",
               "t_resp", "ok"]  # entity: the share group
SESSION_EVENT = ["entity", "seq", "api", "group", "member", "epoch", "has_acks", "error", "conn"]
FETCH_EVENT = ["entity", "seq", "kind", "pid", "first", "last", "transactional", "control", "listed", "lso"]  # entity: topic-partition
ROUTE_COLUMNS = {  # what each replay (replay.entity_replay.REPLAYS) reads of an event
    "txn": TXN_EVENT, "group": GROUP_EVENT, "share_group": SHARE_EVENT, "share_session": SESSION_EVENT,
    "fetch": FETCH_EVENT,
}


def session_key(upstream: str, group: str, member: str) -> str:
    return f"{upstream}|{group}|{member}"


def txn_key(transactional_id: str, ordinal: int) -> str:
    return f"{transactional_id}#{ordinal}"


def spso_reports(share_start_offsets: list[dict] | None) -> list[tuple[str, int, int]]:
    """(topic id, partition, start offset) of the error-free, known start offsets of a
    DescribeShareGroupOffsets response (its `share_start_offsets` column)."""
    return [(s["topic_id"], int(s["partition"]), int(s["start_offset"])) for s in share_start_offsets or ()
            if not s["error_code"] and s["start_offset"] is not None and s["start_offset"] >= 0]
