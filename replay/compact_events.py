"""The check's flat event table, written once by `kipcheck compact` (issue 27, item 2).

`kipcheck check` on Spark spent most of its CPU projecting the nested list columns of every
exchange into events in the JVM (~40 CPU-us per exchange, docs/trace-checks.md), on every
check of the same trace. Compaction does that projection once, in DuckDB (``UNNEST`` and
list lambdas are vectorized there), with the transaction link already resolved, and writes
one row per (route, entity, event) -- the rows `replay.check_spark.SparkChecker` builds
with `flat_events` + `linked` -- into ``_check_events/ROUTE/events_BBBBB.parquet``, each
route's files with only the columns its replay reads (check_events.ROUTE_COLUMNS):

* bucket = Spark's bucket function of the int64 ``entity_key`` (a stable hash of route and
  entity, `replay.spark_hash`), so Spark reads the directory as a bucketed table
  and each task holds whole entities (`replay.check_spark.check_events_table`);
* rows sorted by (entity_key, seq, then the event's own columns, so that every compaction
  writes the same files): an entity's events are contiguous, so the replays read them as a
  stream (bounded memory per entity, not per bucket);
* the leading underscore keeps the directory out of every reader of the exchanges (Spark
  skips ``_``-prefixed paths when it lists a table; trace_reader globs ``*.parquet``).

Staged on disk like the exchanges (replay/staged_write.py): the relevant exchanges once,
the events by transactional-id part for the link (a window per transactional id), then by
(route, bucket), each file sorted on its own.

The SQL mirrors check_spark's Spark SQL expression by expression (same selection, same
entity keys, same transaction keys); the parity tests hold the three paths (pure, Spark
projection, these files) to the same violations.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from replay import check_events as ev
from replay import staged_write as sw
from replay import trace_schema as ts
from replay.spark_hash import spark_bucket, stable_key
from reference_impl.protocol.api_keys import ApiKey

EVENTS_DIR = "_check_events"
FILE_PATTERN = "events_{:05d}.parquet"
EVENTS_FORMAT = "1"  # bump when the event columns or their meaning change: older files are then ignored
META_EVENTS_FORMAT = b"kipcheck_check_events"
META_SOURCE_EXCHANGES = b"source_exchanges"  # exchanges of the compacted trace: a stale event table is refused
KEY_COLUMNS = (("entity_key", pa.int64()), ("seq", pa.int64()), ("conn", pa.int64()), ("api_name", pa.string()))
_ARROW = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_(),
          "array<int>": pa.list_(pa.int32())}


def arrow_schema(route: str) -> pa.Schema:
    """One route's event file: the keys, then the columns its replay reads (check_events.ROUTE_COLUMNS)."""
    types = dict(ev.EVENT_FIELDS)
    keys = {name for name, _ in KEY_COLUMNS}
    cols = [c for c in ev.ROUTE_COLUMNS[route] if c not in keys]
    return pa.schema([*KEY_COLUMNS, *((c, _ARROW[types[c]]) for c in cols)])


def entity_key(route: str, entity: str | None) -> int:
    """The int64 bucket key of an entity of a route: the same in every trace and run."""
    return stable_key(route, entity)


# --- the projection, in DuckDB SQL -------------------------------------------------------------


def lit(text: str) -> str:
    """A SQL string literal of a plain word."""
    return f"'{text}'"


def _in(*keys: int) -> str:
    return f"api_key IN ({', '.join(str(int(k)) for k in keys)})"


NAMED_TOPIC_LISTS = ("partitions", "batches")  # elements with a `topic` name: `_unnest` looks its id up


def _topic(topic: str, topic_id: str) -> str:
    """The topic id, else the id the trace gives the name (`named_tid`, `_unnest`), else the
    name (check_spark.topic_key)."""
    return f"coalesce({topic_id}, named_tid, {topic})"


def _row(**values: str) -> str:
    """A SELECT list of every event column (absent ones typed nulls); values are SQL."""
    types = {"string": "VARCHAR", "int": "INTEGER", "long": "BIGINT", "boolean": "BOOLEAN", "array<int>": "INTEGER[]"}
    cols = [f"CAST({values.get(n, 'NULL')} AS {types[t]}) AS \"{n}\"" for n, t in ev.EVENT_FIELDS]
    return ", ".join(["seq", "connection_id AS conn", "api_name", *cols])


def _same(x: str) -> str:
    return f"{x}.partition = b.partition AND coalesce({x}.topic_id, {x}.topic) = coalesce(b.topic_id, b.topic)"


def _unnest(alias: str, column: str, where: str) -> str:
    """Each element `alias` of list `column` of the `rel` rows that `where` selects; with the
    id of its topic's name as `named_tid` (a join with the small `tmap`, where a correlated
    subquery was: with it and `preserve_insertion_order` off, the peak temporary disk of a 10M
    compaction fell from 2.65 to 0.89 GB; docs/trace-checks.md, "100M")."""
    elements = f"(SELECT *, unnest({column}) AS {alias} FROM rel WHERE {where})"
    if column not in NAMED_TOPIC_LISTS:
        return elements
    return f"(SELECT u.*, tmap.tid AS named_tid FROM {elements} u LEFT JOIN tmap ON tmap.name = u.{alias}.topic)"


def _selects() -> list[str]:
    """One SELECT per kind of event over `rel` (the relevant exchanges with `ok`)."""
    share_rows = (f"{_in(ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)} AND status = 'ok' AND group_id IS NOT NULL "
                  "AND member_id IS NOT NULL")
    share = dict(entity="group_id", t_req="request_wall_ms", t_resp="response_wall_ms", ok="ok")
    batch = dict(topic_id="a.topic_id", partition="a.partition", member="member_id", first="a.first_offset",
                 last="a.last_offset")
    staged = f"{_in(ApiKey.TXN_OFFSET_COMMIT)} AND ok AND group_id IS NOT NULL AND transactional_id IS NOT NULL"
    offset = dict(entity="group_id", tid="transactional_id", topic=_topic("p.topic", "p.topic_id"),
                  partition="p.partition", offset="p.committed_offset")
    committed = "p.side = 'request' AND p.committed_offset IS NOT NULL"
    tp = f"concat_ws('-', {_topic('b.topic', 'b.topic_id')}, CAST(b.partition AS VARCHAR))"
    not_init = f"NOT {_in(ApiKey.INIT_PRODUCER_ID)}"
    txn = _row(route="'txn'", entity="transactional_id", api="api_key", t_req="request_mono_ns",
               t_resp="response_mono_ns", pid=f"CASE WHEN {not_init} THEN producer_id END",
               epoch=f"CASE WHEN {not_init} THEN producer_epoch END", grant_pid="granted_producer_id",
               grant_epoch="granted_producer_epoch", ok="ok")
    session = _row(route="'share_session'", entity="concat_ws('|', upstream, group_id, member_id)", api="api_key",
                   group="group_id", member="member_id", epoch="share_session_epoch",
                   has_acks="coalesce(len(list_filter(acknowledgement_batches, lambda a: a.side = 'request')) > 0, false)",
                   error="coalesce(CAST(error_code AS INTEGER), 0)")
    lso = f"list_filter(partitions, lambda p: p.side = 'response' AND {_same('p')})[1].last_stable_offset"
    listed = (f"coalesce(len(list_filter(aborted_transactions, lambda x: {_same('x')} AND x.producer_id = b.producer_id "
              "AND x.first_offset <= b.base_offset)) > 0, false)")
    fb = _row(route="'fetch'", entity=tp, kind="'fb'", pid="b.producer_id", first="b.base_offset",
              last="b.last_offset", transactional="b.transactional", control="b.control", lso=lso, listed=listed)
    base = (f"list_filter(partitions, lambda p: p.side = 'response' AND {_same('p')} AND coalesce(p.error_code, 0) = 0 "
            "AND p.base_offset IS NOT NULL)[1].base_offset")
    ab = _row(route="'link'", entity=tp, kind="'ab'", tid="transactional_id", pid="b.producer_id", first=base,
              last=f"{base} + b.record_count - 1")
    return [
        f"SELECT {txn} FROM rel WHERE transactional_id IS NOT NULL AND status = 'ok' AND {_in(ApiKey.PRODUCE, *ev.TXN_APIS)}",
        f"SELECT {_row(route=lit('group'), kind=lit('commit'), t='request_mono_ns', **offset)} "
        f"FROM {_unnest('p', 'partitions', _in(ApiKey.OFFSET_COMMIT) + ' AND ok AND group_id IS NOT NULL')} WHERE {committed}",
        f"SELECT {_row(route=lit('link'), kind=lit('txn_commit'), t='request_mono_ns', **offset)} "
        f"FROM {_unnest('p', 'partitions', staged)} WHERE {committed}",
        # the transaction's end, for this group (the link fills it in; repeats are harmless)
        f"SELECT {_row(route=lit('link'), entity='group_id', kind=lit('txn_end'), tid='transactional_id')} "
        f"FROM rel WHERE {staged}",
        f"SELECT {_row(route=lit('group'), kind=lit('fetch'), t='response_mono_ns', **offset)} "
        f"FROM {_unnest('p', 'partitions', _in(ApiKey.OFFSET_FETCH) + ' AND status = ' + lit('ok') + ' AND group_id IS NOT NULL')} "
        "WHERE p.side = 'response' AND p.committed_offset IS NOT NULL AND coalesce(p.error_code, 0) = 0",
        # a successful EndTxn: the mark the link looks for
        f"SELECT {_row(route=lit('link'), entity='transactional_id', kind=lit('end'), t='request_mono_ns', tid='transactional_id', committed='coalesce(txn_committed, false)')} "
        f"FROM rel WHERE {_in(ApiKey.END_TXN)} AND ok AND transactional_id IS NOT NULL",
        f"SELECT {_row(route=lit('share_group'), kind=lit('ack'), types='a.acknowledge_types', **batch, **share)} "
        f"FROM {_unnest('a', 'acknowledgement_batches', share_rows)} WHERE a.side = 'request'",
        f"SELECT {_row(route=lit('share_group'), kind=lit('acq'), count='a.delivery_count', **batch, **share)} "
        f"FROM {_unnest('a', 'acquired_records', share_rows + ' AND ' + _in(ApiKey.SHARE_FETCH) + ' AND coalesce(error_code, 0) = 0')}",
        f"SELECT {_row(route=lit('share_group'), kind=lit('close'), member='member_id', **share)} "
        f"FROM rel WHERE {share_rows} AND share_session_epoch = -1 AND coalesce(error_code, 0) = 0",
        f"SELECT {_row(route=lit('share_group'), kind=lit('spso'), topic_id='p.topic_id', partition='p.partition', first='p.start_offset', last='p.start_offset', **share)} "
        f"FROM {_unnest('p', 'share_start_offsets', _in(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS) + ' AND status = ' + lit('ok') + ' AND group_id IS NOT NULL')} "
        "WHERE coalesce(p.error_code, 0) = 0 AND p.start_offset >= 0",
        f"SELECT {session} FROM rel WHERE {share_rows} AND share_session_epoch IS NOT NULL",
        # read_committed Fetch batches that could break a FETCH rule (check_spark._fetch's pruning)
        f"SELECT * FROM (SELECT {fb} FROM {_unnest('b', 'batches', _in(ApiKey.FETCH) + ' AND status = ' + lit('ok'))} "
        "WHERE b.side = 'response') WHERE (lso IS NOT NULL AND lso >= 0 AND \"last\" >= lso) "
        "OR (coalesce(transactional, false) AND NOT coalesce(control, false) AND NOT listed)",
        # transactional Produce batches: the offset ranges the link turns into aborted ranges
        f"SELECT * FROM (SELECT {ab} FROM {_unnest('b', 'batches', _in(ApiKey.PRODUCE) + ' AND status = ' + lit('ok') + ' AND transactional_id IS NOT NULL')} "
        "WHERE b.side = 'request' AND b.transactional) WHERE \"first\" IS NOT NULL AND \"first\" >= 0",
    ]


def _linked(source: str) -> str:
    """check_spark.SparkChecker.linked: each link event of `source` resolved against the
    nearest successful EndTxn at or after it in its transactional id."""
    cols = [n for n, _ in ev.EVENT_FIELDS]
    quoted = {c: '"' + c + '"' for c in ("seq", "conn", "api_name", *cols)}
    replaced = {
        "route": "CASE WHEN kind = 'ab' THEN 'fetch' ELSE 'group' END",
        "txn": "concat_ws('#', tid, coalesce(CAST(_end.s AS VARCHAR), 'open'))",
        "seq": "CASE WHEN kind = 'txn_end' THEN _end.s ELSE seq END",
        "t": "CASE WHEN kind = 'txn_end' THEN _end.t ELSE \"t\" END",
        "committed": "CASE WHEN kind = 'txn_end' THEN _end.c END",
        "conn": "CASE WHEN kind <> 'txn_end' THEN conn END",
        "api_name": "CASE WHEN kind <> 'txn_end' THEN api_name END",
    }
    out = ", ".join(f"{replaced.get(c, q)} AS {q}" for c, q in quoted.items())
    return (f"SELECT {out} FROM (SELECT *, last(CASE WHEN kind = 'end' THEN {{'s': seq, 't': \"t\", 'c': committed}} END "
            "IGNORE NULLS) OVER (PARTITION BY tid ORDER BY seq DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _end "
            f"FROM {source} WHERE route = 'link') "
            "WHERE kind = 'txn_commit' OR (_end IS NOT NULL AND kind = 'txn_end') OR (_end IS NOT NULL AND NOT _end.c AND kind = 'ab')")


def _stage_relevant(con, staging: str) -> None:
    """The view `rel`: the exchanges any event comes from, with `ok`, staged once (compressed);
    and `tmap`, the topic ids the trace gives names (narrow)."""
    rel = os.path.join(staging, "rel.parquet")
    con.execute(f"""COPY (SELECT {', '.join(c for c in ev.COLUMNS if c not in ('kind', 'decode_error'))},
  (status = 'ok' AND coalesce(error_code, 0) = 0 AND coalesce(len(error_codes), 0) = 0) AS ok
  FROM src WHERE kind = 'exchange' AND seq IS NOT NULL AND decode_error IS NULL AND
  CASE WHEN api_key = {int(ApiKey.PRODUCE)} THEN transactional_id IS NOT NULL
       WHEN api_key = {int(ApiKey.FETCH)} THEN coalesce(isolation_level = {ev.READ_COMMITTED}, false)
       ELSE {_in(*ev.RELEVANT_APIS)} END) TO {sw.sql_text(rel)} (FORMAT parquet, COMPRESSION zstd)""")
    con.execute(f"""CREATE TEMP VIEW rel AS SELECT * FROM read_parquet({sw.sql_text(rel)});
CREATE TEMP TABLE tmap AS SELECT p.topic AS name, min(p.topic_id) AS tid
  FROM (SELECT unnest(partitions) AS p FROM rel) WHERE p.topic IS NOT NULL AND p.topic_id IS NOT NULL GROUP BY 1""")


def _stage_events(con, staging: str, link_parts: int) -> None:
    """The view `events`: the flat event table with the link resolved, staged on disk
    (replay/staged_write.py). Each kind of event is selected from the relevant exchanges and
    written by plain streaming `COPY`s, the events to keep as they are to one file and the
    link events to another (DuckDB drops the branches of the union the route filter rules
    out); the link is then resolved in `link_parts` parts by transactional id (a window per
    transactional id), each on its own. A partitioned `COPY` of these events ran out of
    DuckDB's memory at 100M exchanges (docs/trace-checks.md, "100M")."""
    _stage_relevant(con, staging)
    union = " UNION ALL ".join(_selects())
    plain, links = os.path.join(staging, "plain.parquet"), os.path.join(staging, "links.parquet")
    for path, where in ((plain, "route <> 'link'"), (links, "route = 'link'")):
        con.execute(f"COPY (SELECT * FROM ({union}) WHERE {where}) TO {sw.sql_text(path)} (FORMAT parquet, COMPRESSION zstd)")
    con.execute("DROP VIEW rel; DROP TABLE tmap")
    linked = os.path.join(staging, "linked")
    os.makedirs(linked)
    for i in range(link_parts):
        part = f"(SELECT * FROM read_parquet({sw.sql_text(links)}) WHERE hash(tid) % {link_parts} = {i})"
        con.execute(f"COPY ({_linked(part)}) TO {sw.sql_text(os.path.join(linked, f'part_{i:05d}.parquet'))} "
                    "(FORMAT parquet, COMPRESSION zstd)")
    con.execute(f"CREATE TEMP VIEW events AS SELECT * FROM read_parquet({sw.sql_text(plain)}) "
                f"UNION ALL BY NAME SELECT * FROM read_parquet({sw.sql_text(os.path.join(linked, '*.parquet'))})")


def _keys(con, buckets: int) -> None:
    """entity_key and bucket per (route, entity), hashed in Python (never DuckDB's own hash)."""
    ents = con.sql("SELECT DISTINCT route, entity FROM events").to_arrow_table()
    keys = np.array([entity_key(r, e) for r, e in zip(ents.column("route").to_pylist(), ents.column("entity").to_pylist())],
                    dtype=np.int64)
    con.register("entity_keys", pa.table({"route": ents.column("route"), "entity": ents.column("entity"),
                                          "entity_key": pa.array(keys, pa.int64()),
                                          "bucket": pa.array(spark_bucket(keys, buckets).astype(np.int32), pa.int32())}))


def _order(columns: list[str]) -> str:
    """(entity_key, seq), then the event's own columns: files of one trace are the same in every compaction."""
    ties = [f'"{c}"' for c in ("kind", "topic_id", "partition", "first", "last", "member") if c in columns]
    return ", ".join(["entity_key", "seq", *ties])


def write_check_events(con, out_dir: str, staging: str, buckets: int, exchanges: int) -> int:
    """Write the event table of the trace registered as `src` into OUT/_check_events/ROUTE/,
    one file per bucket and route, each with only the columns its replay reads (what Spark
    hands the Python replays is what they use), staged by (route, bucket) and sorted one
    file at a time (replay/staged_write.py); returns the number of events written."""
    _stage_events(con, staging, buckets)
    _keys(con, buckets)
    routes = list(ev.ROUTE_COLUMNS)
    index = "CASE e.route " + " ".join(f"WHEN {lit(r)} THEN {i}" for i, r in enumerate(routes)) + " END"
    staged = os.path.join(staging, "events")
    sw.stage_arrow(con, f"SELECT e.*, k.entity_key, {index} * {buckets} + k.bucket AS part FROM events e "
                        "JOIN entity_keys k ON e.route = k.route AND e.entity = k.entity "
                        f"WHERE e.route IN ({', '.join(lit(r) for r in routes)})", staged, "part", len(routes) * buckets)
    con.execute("DROP VIEW events")
    sw.remove(staging, "rel.parquet", "plain.parquet", "links.parquet", "linked")  # read: free the disk
    total = 0
    for r, route in enumerate(routes):
        schema = arrow_schema(route).with_metadata({
            META_EVENTS_FORMAT: EVENTS_FORMAT.encode(), ts.META_BUCKETS: str(buckets).encode(),
            ts.META_BUCKET_COLUMN: b"entity_key", META_SOURCE_EXCHANGES: str(exchanges).encode()})
        target = os.path.join(out_dir, EVENTS_DIR, route)
        os.makedirs(target)
        for b in range(buckets):
            total += sw.write_partition(con, staged, r * buckets + b, schema, _order(schema.names),
                                        os.path.join(target, FILE_PATTERN.format(b)))
    return total


def event_files(trace_dir: str, exchanges: int) -> dict[str, list[str]] | None:
    """Route -> the event files of a compacted trace, if compaction wrote every route's in
    this format for these exchanges; None otherwise (the check then projects the exchanges
    itself)."""
    out = {}
    for route in ev.ROUTE_COLUMNS:
        target = os.path.join(trace_dir, EVENTS_DIR, route)
        files = sorted(os.path.join(target, n) for n in os.listdir(target) if n.endswith(".parquet")) \
            if os.path.isdir(target) else []
        if not files:
            return None
        md = pq.read_schema(files[0]).metadata or {}
        if (md.get(META_EVENTS_FORMAT) != EVENTS_FORMAT.encode() or md.get(META_SOURCE_EXCHANGES) != str(exchanges).encode()
                or len(files) != int(md[ts.META_BUCKETS])):
            return None
        out[route] = files
    return out
