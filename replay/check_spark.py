"""`kipcheck check` on Spark: one scan to a flat event table, one window, one grouped map.

1. One projection of the scan turns each relevant exchange (typed columns only, no JSON
   for version-2 rows) into an array of event structs of one superset schema, exploded
   into a flat event table: one row per (route, entity, event). The route names the
   replay (replay.entity_replay.REPLAYS) and the entity its key.
2. The only cross-entity link, which transaction a Produce / TxnOffsetCommit belongs to
   and how it ended, is a window over those events of each transactional id (the nearest
   successful EndTxn at or after each of them, in seq order): it turns them into group
   events (staged offsets, the transaction's end) and aborted offset ranges.
3. Every entity's events go through ONE `groupBy(bucket).applyInArrow`, bucket = hash of
   (route, entity) mod N: an Arrow call replays many whole entities with the shared rules
   (checkers via replay.entity_replay), dedups its violations and names their
   connection and api, so nothing is joined back to the exchanges afterwards.

Same events, same replays, same results as replay.check_pure (the parity test holds them
to it). Only violations leave the executors; the topic name -> id map comes from the
driver (check_cmd gathers it in its decode pass).
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow.parquet as pq

from replay import check_events as ev
from replay import trace_reader as tr
from replay import trace_schema as ts
from replay.check_rules import requirements_of
from replay.entity_replay import REPLAYS, CheckConfig
from reference_impl.protocol.api_keys import ApiKey

VIOLATION_DDL = ("rule_id string, requirement_ids string, entity string, seq long, connection_id long, "
                 "api_name string, detail string")
LINK = "link"  # events of a transactional id that the window turns into group / fetch events


def _F():
    from pyspark.sql import functions as F  # heavy dependency: importing this module must not start pyspark

    return F


# The expressions below are Spark SQL text, parsed once by the JVM: built with the Column
# DSL they took thousands of Py4J round trips (measured ~2 ms each on the 2-core machine,
# ~10 s of the fixed cost of every check).


def q(name: str) -> str:
    """A quoted identifier (field names such as `partition`, `first`, `offset` are keywords)."""
    return f"`{name}`"


def sql_str(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _in(*keys: int) -> str:
    return f"api_key IN ({', '.join(str(int(k)) for k in keys)})"


def trace_schema() -> Any:
    """The current trace schema as a Spark schema: reading every segment with it puts
    version-1 segments (no typed columns) and version-2 ones in one scan."""
    from pyspark.sql.pandas.types import from_arrow_schema  # heavy dependency, as in _F

    return from_arrow_schema(ts.schema())


_SPSO_V1 = ("struct<groups: array<struct<topics: array<struct<topic_id: string, partitions: "
            "array<struct<partition_index: int, start_offset: long, error_code: smallint>>>>>>>")
_V1_DERIVED = {  # version-2 typed column <- the version-1 row's JSON
    "isolation_level": f"CASE WHEN {_in(ApiKey.FETCH, ApiKey.LIST_OFFSETS)} "
                       "THEN CAST(get_json_object(request_json, '$.isolation_level') AS tinyint) END",
    "txn_committed": f"CASE WHEN {_in(ApiKey.END_TXN)} AND request_json IS NOT NULL "
                     "THEN coalesce(CAST(get_json_object(request_json, '$.committed') AS boolean), false) END",
    "granted_producer_id": f"CASE WHEN {_in(ApiKey.INIT_PRODUCER_ID, ApiKey.END_TXN)} "
                           "THEN CAST(get_json_object(response_json, '$.producer_id') AS long) END",
    "granted_producer_epoch": f"CASE WHEN {_in(ApiKey.INIT_PRODUCER_ID, ApiKey.END_TXN)} "
                              "THEN CAST(get_json_object(response_json, '$.producer_epoch') AS smallint) END",
    "share_start_offsets": (
        f"CASE WHEN {_in(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)} THEN flatten(transform("
        f"from_json(response_json, '{_SPSO_V1}').groups, g -> flatten(transform(g.topics, t -> transform("
        "t.partitions, p -> named_struct('topic_id', t.topic_id, 'partition', p.partition_index, "
        "'start_offset', p.start_offset, 'error_code', p.error_code)))))) END"),
}


def upgrade(df: Any) -> Any:
    """Fill the version-2 typed columns of version-1 rows (schema_version null) from their
    JSON, as replay.trace_reader.upgrade does in pyarrow; version-2 rows are read as written."""
    F = _F()
    if "schema_version" not in df.columns:  # read without trace_schema(): version-1 files only
        for field in trace_schema().fields:
            if field.name not in df.columns:
                df = df.withColumn(field.name, F.lit(None).cast(field.dataType))
    out = []
    for name in df.columns:
        if name not in _V1_DERIVED:
            out.append(q(name))
            continue
        dt = df.schema[name].dataType.simpleString()
        value = f"CAST({_V1_DERIVED[name]} AS {dt})"
        if name == "share_start_offsets":  # a list column is never null, as the writer writes it
            value = f"coalesce({value}, CAST(array() AS {dt}))"
        out.append(f"CASE WHEN schema_version IS NULL THEN {value} ELSE {q(name)} END AS {q(name)}")
    return df.selectExpr(*out)


def load_trace(spark: Any, paths: list[str]) -> Any:
    """The rows of the given segments in one DataFrame, version-1 segments upgraded.

    Only version-1 segments go through upgrade(): its projection holds expressions that
    keep whole-stage code generation off for the scan's projection, and a trace of current
    segments has nothing to upgrade (measured: the flat table 25% faster without it)."""
    typed = {str(ts.SCHEMA_VERSION), str(ts.COMPACT_VERSION)}  # a compacted file holds the version-2 columns
    is_current = {p: tr.segment_version(p) in typed for p in paths}
    old, current = [p for p in paths if not is_current[p]], [p for p in paths if is_current[p]]
    parts = [spark.read.schema(trace_schema()).parquet(*current)] if current else []
    if old:
        parts.append(upgrade(spark.read.schema(trace_schema()).parquet(*old)))
    out = parts[0]
    for more in parts[1:]:
        out = out.unionByName(more)
    return out


OK = "(status = 'ok' AND coalesce(error_code, 0) = 0 AND coalesce(size(error_codes), 0) <= 0)"
_EVENT_DDL = "struct<" + ", ".join(f"`{n}`: {t}" for n, t in ev.EVENT_FIELDS) + ">"
NO_EVENTS = f"CAST(array() AS array<{_EVENT_DDL}>)"


def event(**values: str) -> str:
    """One event struct of the superset schema (absent fields typed nulls); values are SQL."""
    return "named_struct(" + ", ".join(f"'{n}', CAST({values.get(n, 'NULL')} AS {t})" for n, t in ev.EVENT_FIELDS) + ")"


def _when(cond: str, value: str) -> str:
    """A one-event array when `cond`, else an empty one."""
    return f"CASE WHEN {cond} THEN array({value}) ELSE {NO_EVENTS} END"


def _each(cond: str, array: str, var: str, keep: str, make: str) -> str:
    """When `cond`, one event per element `var` of `array` that `keep` accepts.

    The condition stays outside the lambdas: a CASE evaluates its branch only for the rows
    it selects, so the higher-order functions (and the lambdas' event structs) run only for
    the exchanges of their api."""
    return (f"CASE WHEN {cond} THEN coalesce(transform(filter({array}, {var} -> {keep}), {var} -> {make}), {NO_EVENTS}) "
            f"ELSE {NO_EVENTS} END")


# replay.check_events.relevant (and relevant_mask) as SQL, over upgraded rows
WANTED = ("(kind = 'exchange' AND seq IS NOT NULL AND decode_error IS NULL AND "
          f"CASE WHEN api_key = {int(ApiKey.PRODUCE)} THEN transactional_id IS NOT NULL "
          f"WHEN api_key = {int(ApiKey.FETCH)} THEN coalesce(isolation_level = {ev.READ_COMMITTED}, false) "
          f"ELSE {_in(*ev.RELEVANT_APIS)} END)")


class SparkChecker:
    def __init__(self, spark: Any, df: Any, names: dict[str, str], cfg: CheckConfig | None = None,
                 buckets: int | None = None) -> None:
        """df as load_trace gives it; names: topic name -> id (check_cmd.ScanStats.topic_ids)."""
        self.spark, self.cfg = spark, cfg or CheckConfig()
        self.buckets = buckets or int(spark.conf.get("spark.sql.shuffle.partitions", "8"))
        self.df = df
        self.flat = None
        # topics are few: a literal map, no join (and no shuffle) where names meet ids
        self.names = ("map(" + ", ".join(sql_str(x) for kv in sorted(names.items()) for x in kv) + ")") if names else None

    def topic_key(self, topic: str, topic_id: str) -> str:
        """The topic id, else the id the trace gives the name, else the name (SQL)."""
        if self.names is None:
            return f"coalesce({topic_id}, {topic})"
        return f"coalesce({topic_id}, try_element_at({self.names}, {topic}), {topic})"

    # -- 1. the flat event table ------------------------------------------------------------

    def flat_events(self) -> Any:
        """One scan: every event of every relevant exchange, one row each (seq, conn,
        api_name and the event struct's columns)."""
        parts = [self._txn(), *self._group(), *self._share(), self._session(), *self._fetch()]
        return (self.df.where(WANTED).selectExpr("*", f"{OK} AS ok")
                .selectExpr("seq", "connection_id AS conn", "api_name", f"explode(concat({', '.join(parts)})) AS e")
                .selectExpr("seq", "conn", "api_name", "e.*"))

    def _txn(self) -> str:
        init = f"NOT {_in(ApiKey.INIT_PRODUCER_ID)}"
        cond = f"transactional_id IS NOT NULL AND status = 'ok' AND {_in(ApiKey.PRODUCE, *ev.TXN_APIS)}"
        return _when(cond, event(route="'txn'", entity="transactional_id", api="api_key", t_req="request_mono_ns",
                                 t_resp="response_mono_ns", pid=f"CASE WHEN {init} THEN producer_id END",
                                 epoch=f"CASE WHEN {init} THEN producer_epoch END", grant_pid="granted_producer_id",
                                 grant_epoch="granted_producer_epoch", ok="ok"))

    def _group(self) -> list[str]:
        committed = "p.side = 'request' AND p.committed_offset IS NOT NULL"

        def offset(route: str, kind: str, t: str) -> str:
            return event(route=sql_str(route), entity="group_id", kind=sql_str(kind), t=t, tid="transactional_id",
                         topic=self.topic_key("p.topic", "p.topic_id"), partition="p.`partition`",
                         offset="p.committed_offset")

        commit_ok = "ok AND group_id IS NOT NULL"
        plain = f"{_in(ApiKey.OFFSET_COMMIT)} AND {commit_ok}"
        staged_ok = f"{_in(ApiKey.TXN_OFFSET_COMMIT)} AND {commit_ok} AND transactional_id IS NOT NULL"
        fetched = f"{_in(ApiKey.OFFSET_FETCH)} AND status = 'ok' AND group_id IS NOT NULL"
        return [
            _each(plain, "partitions", "p", committed, offset("group", "commit", "request_mono_ns")),
            _each(staged_ok, "partitions", "p", committed, offset(LINK, "txn_commit", "request_mono_ns")),
            # the transaction's end, for this group (a window fills it in; repeats are harmless)
            _when(staged_ok, event(route=sql_str(LINK), entity="group_id", kind="'txn_end'", tid="transactional_id")),
            _each(fetched, "partitions", "p", "p.side = 'response' AND p.committed_offset IS NOT NULL AND coalesce(p.error_code, 0) = 0",
                  offset("group", "fetch", "response_mono_ns")),
            # a successful EndTxn: the mark the window looks for
            _when(f"{_in(ApiKey.END_TXN)} AND ok AND transactional_id IS NOT NULL",
                  event(route=sql_str(LINK), entity="transactional_id", kind="'end'", t="request_mono_ns",
                        tid="transactional_id", committed="coalesce(txn_committed, false)")),
        ]

    def _share(self) -> list[str]:
        """Share-group events; the entity is the group (replay_share_group keeps one view
        per share-partition and applies a session close to all of them)."""
        rows = (f"{_in(ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)} AND status = 'ok' AND group_id IS NOT NULL "
                "AND member_id IS NOT NULL")
        top_ok = "coalesce(error_code, 0) = 0"

        def share(kind: str, **kw: str) -> str:
            return event(route="'share_group'", entity="group_id", kind=sql_str(kind), t_req="request_wall_ms",
                         t_resp="response_wall_ms", ok="ok", **kw)

        spso_rows = f"{_in(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)} AND status = 'ok' AND group_id IS NOT NULL"
        batch = dict(topic_id="a.topic_id", partition="a.`partition`", member="member_id", first="a.first_offset",
                     last="a.last_offset")
        return [
            _each(rows, "acknowledgement_batches", "a", "a.side = 'request'",
                  share("ack", types="a.acknowledge_types", **batch)),
            _each(f"{rows} AND {_in(ApiKey.SHARE_FETCH)} AND {top_ok}", "acquired_records", "a", "true",
                  share("acq", count="a.delivery_count", **batch)),
            _when(f"{rows} AND share_session_epoch = -1 AND {top_ok}", share("close", member="member_id")),
            _each(spso_rows, "share_start_offsets", "p",
                  "coalesce(p.error_code, 0) = 0 AND p.start_offset >= 0",
                  share("spso", topic_id="p.topic_id", partition="p.`partition`", first="p.start_offset",
                        last="p.start_offset")),
        ]

    def _session(self) -> str:
        cond = (f"{_in(ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)} AND status = 'ok' AND group_id IS NOT NULL "
                "AND member_id IS NOT NULL AND share_session_epoch IS NOT NULL")
        return _when(cond, event(
            route="'share_session'", entity="concat_ws('|', upstream, group_id, member_id)", api="api_key",
            group="group_id", member="member_id", epoch="share_session_epoch",
            has_acks="coalesce(exists(acknowledgement_batches, a -> a.side = 'request'), false)",
            error="coalesce(CAST(error_code AS int), 0)"))

    def _fetch(self) -> list[str]:
        """Read_committed Fetch response batches ("fb") that could break a FETCH rule (beyond
        the LSO, or transactional data not listed as aborted), and the transactional
        Produce batches whose transaction's outcome the window decides."""
        def same(x: str) -> str:  # same topic-partition as batch b
            return f"{x}.`partition` = b.`partition` AND coalesce({x}.topic_id, {x}.topic) = coalesce(b.topic_id, b.topic)"

        entity = f"concat_ws('-', {self.topic_key('b.topic', 'b.topic_id')}, CAST(b.`partition` AS string))"
        lso = f"try_element_at(filter(partitions, p -> p.side = 'response' AND {same('p')}), 1).last_stable_offset"
        listed = (f"coalesce(exists(aborted_transactions, x -> {same('x')} AND x.producer_id = b.producer_id "
                  "AND x.first_offset <= b.base_offset), false)")
        fb = event(route="'fetch'", entity=entity, kind="'fb'", pid="b.producer_id", first="b.base_offset",
                   last="b.last_offset", lso=lso, listed=listed, transactional="b.transactional", control="b.control")
        base = (f"try_element_at(filter(partitions, p -> p.side = 'response' AND {same('p')} "
                "AND coalesce(p.error_code, 0) = 0 AND p.base_offset IS NOT NULL), 1).base_offset")
        pb = event(route=sql_str(LINK), entity=entity, kind="'ab'", tid="transactional_id", pid="b.producer_id",
                   first=base, last=f"{base} + b.record_count - 1")
        fetches = f"{_in(ApiKey.FETCH)} AND status = 'ok'"  # read_committed only (WANTED)
        produces = f"{_in(ApiKey.PRODUCE)} AND status = 'ok' AND transactional_id IS NOT NULL"
        # Pruning only: keep the fetched batches that replay_fetch_partition (entity_replay.py)
        # could flag -- at/after the LSO, or transactional data with no aborted-transactions
        # entry. It must stay a superset of that function's conditions, or a violation is lost.
        possible = ("(e.lso IS NOT NULL AND e.lso >= 0 AND e.`last` >= e.lso) OR (coalesce(e.transactional, false) "
                    "AND NOT coalesce(e.control, false) AND NOT e.listed)")
        fetched = (f"CASE WHEN {fetches} THEN coalesce(filter(transform(filter(batches, b -> b.side = 'response'), "
                   f"b -> {fb}), e -> {possible}), {NO_EVENTS}) ELSE {NO_EVENTS} END")
        produced = (f"CASE WHEN {produces} THEN filter({_each('true', 'batches', 'b', 'b.side = ' + sql_str('request') + ' AND b.transactional', pb)}, "
                    f"e -> e.`first` IS NOT NULL AND e.`first` >= 0) ELSE {NO_EVENTS} END")
        return [fetched, produced]

    # -- 2. the transaction link: one window ------------------------------------------------

    def linked(self, flat: Any) -> Any:
        """Events of transactional ids resolved against the nearest successful EndTxn at or
        after them (seq order; it ends their transaction): staged offsets keyed by that
        transaction, its end for each group it staged offsets in, and the offsets of
        aborted transactions as "ab" events of the fetched partition."""
        mark = ("last(CASE WHEN kind = 'end' THEN named_struct('s', seq, 't', `t`, 'c', committed) END, true) "
                "OVER (PARTITION BY tid ORDER BY seq DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _end")
        x = flat.where(f"route = {sql_str(LINK)}").selectExpr("*", mark).where(
            "kind = 'txn_commit' OR (_end IS NOT NULL AND kind = 'txn_end') "
            "OR (_end IS NOT NULL AND NOT _end.c AND kind = 'ab')")
        ends = "kind = 'txn_end'"
        replaced = {
            "route": "CASE WHEN kind = 'ab' THEN 'fetch' ELSE 'group' END",
            "txn": "concat_ws('#', tid, coalesce(CAST(_end.s AS string), 'open'))",
            "seq": f"CASE WHEN {ends} THEN _end.s ELSE seq END",
            "t": f"CASE WHEN {ends} THEN _end.t ELSE `t` END",
            "committed": f"CASE WHEN {ends} THEN _end.c END",
            "conn": f"CASE WHEN NOT ({ends}) THEN conn END",  # not the EndTxn's: never a violation's
            "api_name": f"CASE WHEN NOT ({ends}) THEN api_name END",
        }
        return x.selectExpr(*[f"{replaced[c]} AS {q(c)}" if c in replaced else q(c) for c in flat.columns])

    # -- 3. every replay in one grouped map ----------------------------------------------------

    def violations(self) -> Any:
        """One row per (rule, entity, seq), with requirement ids, connection and api of the exchange.

        The flat table feeds two branches (the events as they are, and the link window), so
        it is persisted: without it every scan and projection ran twice (measured: half the
        JVM time of a 1M-exchange check). On disk only: a `MEMORY_AND_DISK` block that
        spilled is copied back into the executor's heap when read
        (`BlockManager.maybeCacheDiskBytesInMemory`), and at 100M exchanges that killed 2 GiB
        executors with OutOfMemoryError; a disk-only block is memory-mapped instead, and at 1M
        it was no slower (docs/trace-checks.md, "100M"). unpersist() after the job that
        writes the result."""
        from pyspark import StorageLevel  # heavy dependency, as in _F

        self.flat = self.flat_events().persist(StorageLevel.DISK_ONLY)
        events = self.flat.where(f"route <> {sql_str(LINK)}").unionByName(self.linked(self.flat))
        cfg = self.cfg

        def run(table):  # one bucket: many whole entities of any route
            import pyarrow as pa  # runs in the Spark executor's Python worker

            return pa.Table.from_pylist(replay_bucket(table, cfg), schema=_violation_arrow_schema())

        return (events.selectExpr("*", f"pmod(hash(route, entity), {self.buckets}) AS bucket")
                .groupBy("bucket").applyInArrow(run, schema=VIOLATION_DDL))

    def unpersist(self) -> None:
        if self.flat is not None:
            self.flat.unpersist()
            self.flat = None


def _violation_arrow_schema() -> Any:
    import pyarrow as pa  # called in the Spark executor's Python worker

    types = {"string": pa.string(), "long": pa.int64()}
    return pa.schema([(name, types[t]) for name, t in (c.split() for c in VIOLATION_DDL.split(", "))])


def replay_bucket(table: Any, cfg: CheckConfig, route: str | None = None) -> list[dict]:
    """The violations of the entities in one bucket of events (an Arrow table): of the flat
    event table (a `route` column), or of one route's table (`route` given). One per (rule,
    entity, seq) with the smallest detail, with the exchange's connection and api. Each route
    converts only the columns its replay reads (Arrow's to_pylist: no pandas objects, nulls
    as None)."""
    import pyarrow as pa  # runs in the Spark executor's Python worker
    import pyarrow.compute as pc  # runs in the Spark executor's Python worker

    found: dict[tuple, str] = {}
    for r in [route] if route else pc.unique(table.column("route")).to_pylist():
        part = table if route else table.filter(pc.equal(table.column("route"), r))
        by: dict[str, list[dict]] = {}
        for e in part.select(list(ev.ROUTE_COLUMNS[r])).to_pylist():
            by.setdefault(e["entity"], []).append(e)
        for entity, evs in by.items():
            for rule, ent, seq, detail in REPLAYS[r](entity, evs, cfg):
                key = (rule, ent, int(seq))
                if key not in found or detail < found[key]:
                    found[key] = detail
    if not found:
        return []
    named = table.filter(pc.and_(pc.is_in(table.column("seq"), pa.array(sorted({k[2] for k in found}), pa.int64())),
                                 pc.is_valid(table.column("api_name"))))
    where = {seq: (conn, api) for seq, conn, api in zip(*(named.column(c).to_pylist() for c in ("seq", "conn", "api_name")))}
    return [{"rule_id": rule, "requirement_ids": requirements_of(rule), "entity": ent, "seq": seq,
             "connection_id": where.get(seq, (None, None))[0], "api_name": where.get(seq, (None, None))[1],
             "detail": detail} for (rule, ent, seq), detail in found.items()]


# --- a compacted trace: the event table compaction wrote (replay/compact_events.py) -------------


def check_events_table(spark: Any, files: list[str]) -> Any:
    """One route's event files of a compacted trace as a bucketed table (an external table
    of the session catalog: dropping it never touches the files). With the automatic choice
    of bucketed scans off, a scan of it has one task per bucket holding whole entities, in
    the files' (entity_key, seq) order: the replays need no shuffle and no sort."""
    from pyspark.sql.pandas.types import from_arrow_schema  # pyspark's Arrow bridge, as trace_schema

    directory = os.path.dirname(files[0])
    schema = pq.read_schema(files[0])
    ddl = ", ".join(f"`{x.name}` {x.dataType.simpleString()}" for x in from_arrow_schema(schema.remove_metadata()))
    name = f"kipcheck_events_{abs(hash(directory))}"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.conf.set("spark.sql.sources.bucketing.autoBucketedScan.enabled", "false")
    spark.sql(f"CREATE TABLE {name} ({ddl}) USING parquet CLUSTERED BY (entity_key) INTO {len(files)} BUCKETS "
              f"LOCATION {sql_str(directory)}")
    return spark.table(name)


def event_violations(spark: Any, files: dict[str, list[str]], cfg: CheckConfig) -> Any:
    """One mapInArrow per route over its bucketed events, unioned (one job, no shuffle):
    each task streams one bucket of one route through its replay (replay_sorted); only
    violations leave it."""
    def runner(route: str):
        def run(batches):  # one bucket of one route, in (entity_key, seq) order
            import pyarrow as pa  # runs in the Spark executor's Python worker

            schema = _violation_arrow_schema()
            for found in replay_sorted(batches, cfg, route):
                yield pa.RecordBatch.from_pylist(found, schema=schema)
        return run

    parts = [check_events_table(spark, paths).mapInArrow(runner(route), VIOLATION_DDL) for route, paths in files.items()]
    out = parts[0]
    for more in parts[1:]:
        out = out.unionByName(more)
    return out


def replay_sorted(batches: Any, cfg: CheckConfig, route: str, min_rows: int = 50_000) -> Any:
    """The violations of a stream of one route's event batches sorted by entity_key, a list
    per chunk of at least `min_rows` events cut where an entity ends (an entity never spans
    two chunks, and memory follows the chunk, not the bucket)."""
    import pyarrow as pa  # runs in the Spark executor's Python worker

    pending: list = []
    rows = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows < min_rows:
            continue
        table = pa.Table.from_batches(pending)
        keys = table.column("entity_key")
        cut = _first_of_last_entity(keys, keys[len(keys) - 1])
        if cut == 0:
            continue  # one entity so far: keep reading
        found = replay_bucket(table.slice(0, cut), cfg, route)
        if found:
            yield found
        pending, rows = table.slice(cut).to_batches(), table.num_rows - cut
    if pending:
        found = replay_bucket(pa.Table.from_batches(pending), cfg, route)
        if found:
            yield found


def _first_of_last_entity(keys: Any, last: Any) -> int:
    """Index of the first row of the trailing run of `last` in a sorted key column."""
    import pyarrow.compute as pc  # runs in the Spark executor's Python worker

    idx = pc.indices_nonzero(pc.not_equal(keys, last))
    return 0 if len(idx) == 0 else idx[len(idx) - 1].as_py() + 1
