"""`kipcheck check` on Spark: one scan to a flat event table, one window, one grouped map.

1. One projection of the scan turns each relevant exchange (typed columns only, no JSON
   for version-2 rows) into an array of event structs of one superset schema, exploded
   into a flat event table: one row per (route, entity, event). The route names the
   replay (replay.entity_replay.REPLAYS) and the entity its key.
2. The only cross-entity link, which transaction a Produce / TxnOffsetCommit belongs to
   and how it ended, is a window over those events of each transactional id (the nearest
   successful EndTxn at or after each of them, in seq order): it turns them into group
   events (staged offsets, the transaction's end) and aborted offset ranges.
3. Every entity's events go through ONE `groupBy(bucket).applyInPandas`, bucket = hash of
   (route, entity) mod N: a pandas call replays many whole entities with the shared rules
   (chaos.checkers via replay.entity_replay), dedups its violations and names their
   connection and api, so nothing is joined back to the exchanges afterwards.

Same events, same replays, same results as replay.check_pure (the parity test holds them
to it). Only violations leave the executors (the topic name -> id map, an aggregate over
few topics, is the one driver-side collect, and check_cmd folds it into its counting job).
"""

from __future__ import annotations

from typing import Any

from replay import check_events as ev
from replay.check_rules import requirements_of
from replay.entity_replay import REPLAYS, CheckConfig
from reference_impl.protocol.api_keys import ApiKey

VIOLATION_DDL = ("rule_id string, requirement_ids string, entity string, seq long, connection_id long, "
                 "api_name string, detail string")
# the flat event table's struct: every route's event columns (check_events' *_EVENT lists)
EVENT_FIELDS = (
    ("route", "string"), ("entity", "string"), ("kind", "string"), ("api", "int"), ("t_req", "long"),
    ("t_resp", "long"), ("pid", "long"), ("epoch", "int"), ("grant_pid", "long"), ("grant_epoch", "int"),
    ("ok", "boolean"), ("t", "long"), ("topic", "string"), ("partition", "int"), ("offset", "long"),
    ("txn", "string"), ("committed", "boolean"), ("topic_id", "string"), ("member", "string"), ("first", "long"),
    ("last", "long"), ("count", "int"), ("types", "array<int>"), ("group", "string"), ("has_acks", "boolean"),
    ("error", "int"), ("lso", "long"), ("listed", "boolean"), ("transactional", "boolean"), ("control", "boolean"),
    ("tid", "string"),
)
ROUTE_COLUMNS = {  # what each replay reads of an event
    "txn": ev.TXN_EVENT, "group": ev.GROUP_EVENT, "share_group": ev.SHARE_EVENT, "share_session": ev.SESSION_EVENT,
    "fetch": ev.FETCH_EVENT,
}
LINK = "link"  # events of a transactional id that the window turns into group / fetch events


def _F():
    from pyspark.sql import functions as F

    return F


def trace_schema() -> Any:
    """The current trace schema as a Spark schema: reading every segment with it puts
    version-1 segments (no typed columns) and version-2 ones in one scan."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from replay import trace_schema as ts

    return from_arrow_schema(ts.schema())


_SPSO_V1 = ("struct<groups: array<struct<topics: array<struct<topic_id: string, partitions: "
            "array<struct<partition_index: int, start_offset: long, error_code: smallint>>>>>>>")


def upgrade(df: Any) -> Any:
    """Fill the version-2 typed columns of version-1 rows (schema_version null) from their
    JSON, as replay.trace_reader.upgrade does in pyarrow; version-2 rows are read as written."""
    F = _F()
    if "schema_version" not in df.columns:  # read without trace_schema(): version-1 files only
        for field in trace_schema().fields:
            if field.name not in df.columns:
                df = df.withColumn(field.name, F.lit(None).cast(field.dataType))
    api, v1 = F.col("api_key"), F.col("schema_version").isNull()
    req = lambda path: F.get_json_object("request_json", path)  # noqa: E731
    resp = lambda path: F.get_json_object("response_json", path)  # noqa: E731
    grants = api.isin(ApiKey.INIT_PRODUCER_ID, ApiKey.END_TXN)
    groups = F.from_json("response_json", _SPSO_V1)["groups"]
    spso = F.flatten(F.transform(groups, lambda g: F.flatten(F.transform(g["topics"], lambda t: F.transform(
        t["partitions"], lambda p: F.struct(t["topic_id"].alias("topic_id"), p["partition_index"].alias("partition"),
                                            p["start_offset"].alias("start_offset"), p["error_code"].alias("error_code")))))))
    derived = {
        "isolation_level": F.when(api.isin(ApiKey.FETCH, ApiKey.LIST_OFFSETS), req("$.isolation_level").cast("tinyint")),
        "txn_committed": F.when((api == ApiKey.END_TXN) & F.col("request_json").isNotNull(),
                                F.coalesce(req("$.committed").cast("boolean"), F.lit(False))),
        "granted_producer_id": F.when(grants, resp("$.producer_id").cast("long")),
        "granted_producer_epoch": F.when(grants, resp("$.producer_epoch").cast("smallint")),
        "share_start_offsets": F.when(api == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, spso),
    }
    for name, expr in derived.items():
        dt = df.schema[name].dataType
        value = expr.cast(dt)
        if name == "share_start_offsets":  # a list column is never null, as the writer writes it
            value = F.coalesce(value, F.array().cast(dt))
        df = df.withColumn(name, F.when(v1, value).otherwise(F.col(name)))
    return df


def _ok() -> Any:
    F = _F()
    return ((F.col("status") == "ok") & (F.coalesce(F.col("error_code"), F.lit(0)) == 0)
            & (F.coalesce(F.size("error_codes"), F.lit(0)) <= 0))


def _api(*keys: int) -> Any:
    return _F().col("api_key").isin(*keys)


def event(**values: Any) -> Any:
    """One event struct of the superset schema (absent fields typed nulls)."""
    F = _F()
    return F.struct(*[(values[n] if n in values else F.lit(None)).cast(t).alias(n) for n, t in EVENT_FIELDS])


def _when(cond: Any, value: Any) -> Any:
    """A one-event array when `cond`, else an empty one."""
    F = _F()
    return F.when(cond, F.array(value)).otherwise(F.array().cast(f"array<{_EVENT_DDL}>"))


_EVENT_DDL = "struct<" + ", ".join(f"`{n}`: {t}" for n, t in EVENT_FIELDS) + ">"


def _each(array: Any, keep: Any, make: Any) -> Any:
    """One event per element of `array` that `keep` accepts (lambdas over the element)."""
    F = _F()
    return F.coalesce(F.transform(F.filter(array, keep), make), F.array().cast(f"array<{_EVENT_DDL}>"))


def topic_names(df: Any) -> Any:
    """Aggregate expression: the distinct (topic, topic id) pairs of partition entries of
    the exchanges some rule reads (fold it into another aggregate: no job of its own)."""
    F = _F()
    pairs = F.filter(F.transform("partitions", lambda p: F.struct(p["topic"].alias("t"), p["topic_id"].alias("i"))),
                     lambda x: x["t"].isNotNull() & x["i"].isNotNull())
    return F.array_distinct(F.flatten(F.collect_set(F.when(_wanted(), pairs)))).alias("topic_names")


def names_map(pairs: list) -> dict[str, str]:
    """Topic name -> the smallest topic id the trace gives it (as check_pure._topic_ids)."""
    out: dict[str, str] = {}
    for p in pairs or ():
        out[p["t"]] = min(out.get(p["t"], p["i"]), p["i"])
    return out


def _wanted() -> Any:
    """replay.check_events.relevant as a column expression (over upgraded rows)."""
    F = _F()
    api = F.col("api_key")
    kind = (F.col("kind") == "exchange") & F.col("seq").isNotNull() & F.col("decode_error").isNull()
    return kind & (F.when(api == ApiKey.PRODUCE, F.col("transactional_id").isNotNull())
                   .when(api == ApiKey.FETCH, F.coalesce(F.col("isolation_level") == ev.READ_COMMITTED, F.lit(False)))
                   .otherwise(api.isin(*ev.RELEVANT_APIS)))


class SparkChecker:
    def __init__(self, spark: Any, df: Any, cfg: CheckConfig | None = None, buckets: int | None = None,
                 names: dict[str, str] | None = None) -> None:
        F = _F()
        self.spark, self.cfg = spark, cfg or CheckConfig()
        self.buckets = buckets or int(spark.conf.get("spark.sql.shuffle.partitions", "8"))
        self.df = upgrade(df)
        if names is None:  # check_cmd passes them from its counting job
            names = names_map(self.df.select(topic_names(self.df)).collect()[0]["topic_names"])
        # topics are few: a literal map, no join (and no shuffle) where names meet ids
        self.names = F.create_map(*[F.lit(x) for kv in sorted(names.items()) for x in kv]) if names else None

    def topic_key(self, topic: Any, topic_id: Any) -> Any:
        """The topic id, else the id the trace gives the name, else the name."""
        F = _F()
        if self.names is None:
            return F.coalesce(topic_id, topic)
        return F.coalesce(topic_id, F.element_at(self.names, topic), topic)

    # -- 1. the flat event table ------------------------------------------------------------

    def flat_events(self) -> Any:
        """One scan: every event of every relevant exchange, one row each (seq, conn,
        api_name and the event struct's columns)."""
        F = _F()
        rows = self.df.filter(_wanted()).withColumn("ok", _ok())
        parts = [self._txn(), *self._group(), *self._share(), self._session(), *self._fetch()]
        return (rows.select("seq", F.col("connection_id").alias("conn"), "api_name",
                            F.explode(F.concat(*parts)).alias("e"))
                .select("seq", "conn", "api_name", "e.*"))

    def _txn(self) -> Any:
        F = _F()
        init = _api(ApiKey.INIT_PRODUCER_ID)
        cond = F.col("transactional_id").isNotNull() & (F.col("status") == "ok") & _api(ApiKey.PRODUCE, *ev.TXN_APIS)
        return _when(cond, event(route=F.lit("txn"), entity=F.col("transactional_id"), api=F.col("api_key"),
                                 t_req=F.col("request_mono_ns"), t_resp=F.col("response_mono_ns"),
                                 pid=F.when(~init, F.col("producer_id")), epoch=F.when(~init, F.col("producer_epoch")),
                                 grant_pid=F.col("granted_producer_id"), grant_epoch=F.col("granted_producer_epoch"),
                                 ok=F.col("ok")))

    def _group(self) -> list[Any]:
        F = _F()
        tid, group = F.col("transactional_id"), F.col("group_id")
        committed = lambda p: (p["side"] == "request") & p["committed_offset"].isNotNull()  # noqa: E731

        def offset(p: Any, route: str, kind: str, t: str) -> Any:
            return event(route=F.lit(route), entity=group, kind=F.lit(kind), t=F.col(t), tid=tid,
                         topic=self.topic_key(p["topic"], p["topic_id"]), partition=p["partition"],
                         offset=p["committed_offset"])

        commit_ok = F.col("ok") & group.isNotNull()
        plain = F.when(_api(ApiKey.OFFSET_COMMIT) & commit_ok, F.col("partitions"))
        staged_ok = _api(ApiKey.TXN_OFFSET_COMMIT) & commit_ok & tid.isNotNull()
        staged = F.when(staged_ok, F.col("partitions"))
        fetched = F.when(_api(ApiKey.OFFSET_FETCH) & (F.col("status") == "ok") & group.isNotNull(), F.col("partitions"))
        return [
            _each(plain, committed, lambda p: offset(p, "group", "commit", "request_mono_ns")),
            _each(staged, committed, lambda p: offset(p, LINK, "txn_commit", "request_mono_ns")),
            # the transaction's end, for this group (a window fills it in; repeats are harmless)
            _when(staged_ok, event(route=F.lit(LINK), entity=group, kind=F.lit("txn_end"), tid=tid)),
            _each(fetched, lambda p: (p["side"] == "response") & p["committed_offset"].isNotNull()
                  & (F.coalesce(p["error_code"], F.lit(0)) == 0),
                  lambda p: offset(p, "group", "fetch", "response_mono_ns")),
            # a successful EndTxn: the mark the window looks for
            _when(_api(ApiKey.END_TXN) & F.col("ok") & tid.isNotNull(),
                  event(route=F.lit(LINK), entity=tid, kind=F.lit("end"), t=F.col("request_mono_ns"), tid=tid,
                        committed=F.coalesce(F.col("txn_committed"), F.lit(False)))),
        ]

    def _share(self) -> list[Any]:
        """Share-group events; the entity is the group (replay_share_group keeps one view
        per share-partition and applies a session close to all of them)."""
        F = _F()
        group, member = F.col("group_id"), F.col("member_id")
        rows = _api(ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE) & (F.col("status") == "ok") & group.isNotNull() & member.isNotNull()
        top_ok = F.coalesce(F.col("error_code"), F.lit(0)) == 0

        def share(kind: str, **kw: Any) -> Any:
            return event(route=F.lit("share_group"), entity=group, kind=F.lit(kind), t_req=F.col("request_wall_ms"),
                         t_resp=F.col("response_wall_ms"), ok=F.col("ok"), **kw)

        spso_rows = _api(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS) & (F.col("status") == "ok") & group.isNotNull()
        return [
            _each(F.when(rows, F.col("acknowledgement_batches")), lambda a: a["side"] == "request",
                  lambda a: share("ack", topic_id=a["topic_id"], partition=a["partition"], member=member,
                                  first=a["first_offset"], last=a["last_offset"], types=a["acknowledge_types"])),
            _each(F.when(rows & _api(ApiKey.SHARE_FETCH) & top_ok, F.col("acquired_records")), lambda a: F.lit(True),
                  lambda a: share("acq", topic_id=a["topic_id"], partition=a["partition"], member=member,
                                  first=a["first_offset"], last=a["last_offset"], count=a["delivery_count"])),
            _when(rows & (F.col("share_session_epoch") == -1) & top_ok, share("close", member=member)),
            _each(F.when(spso_rows, F.col("share_start_offsets")),
                  lambda p: (F.coalesce(p["error_code"], F.lit(0)) == 0) & (p["start_offset"] >= 0),
                  lambda p: share("spso", topic_id=p["topic_id"], partition=p["partition"], first=p["start_offset"],
                                  last=p["start_offset"])),
        ]

    def _session(self) -> Any:
        F = _F()
        cond = (_api(ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE) & (F.col("status") == "ok") & F.col("group_id").isNotNull()
                & F.col("member_id").isNotNull() & F.col("share_session_epoch").isNotNull())
        return _when(cond, event(
            route=F.lit("share_session"), entity=F.concat_ws("|", "upstream", "group_id", "member_id"),
            api=F.col("api_key"), group=F.col("group_id"), member=F.col("member_id"), epoch=F.col("share_session_epoch"),
            has_acks=F.coalesce(F.exists("acknowledgement_batches", lambda a: a["side"] == "request"), F.lit(False)),
            error=F.coalesce(F.col("error_code").cast("int"), F.lit(0))))

    def _fetch(self) -> list[Any]:
        """Read_committed Fetch response batches ("fb") that could break a FETCH rule (beyond
        the LSO, or transactional data not listed as aborted), and the transactional
        Produce batches whose transaction's outcome the window decides."""
        F = _F()
        topic_of = lambda x: F.coalesce(x["topic_id"], x["topic"])  # noqa: E731

        def fb(b: Any) -> Any:
            same = lambda x: (x["partition"] == b["partition"]) & (topic_of(x) == topic_of(b))  # noqa: E731
            lso = F.element_at(F.filter("partitions", lambda p: (p["side"] == "response") & same(p)), 1)["last_stable_offset"]
            listed = F.exists("aborted_transactions", lambda a: same(a) & (a["producer_id"] == b["producer_id"])
                              & (a["first_offset"] <= b["base_offset"]))
            tkey = self.topic_key(b["topic"], b["topic_id"])
            return event(route=F.lit("fetch"), entity=F.concat_ws("-", tkey, b["partition"].cast("string")), kind=F.lit("fb"),
                         pid=b["producer_id"], first=b["base_offset"], last=b["last_offset"], lso=lso,
                         listed=F.coalesce(listed, F.lit(False)), transactional=b["transactional"], control=b["control"])

        def pb(b: Any) -> Any:
            same = lambda p: ((p["side"] == "response") & (p["partition"] == b["partition"])  # noqa: E731
                              & (topic_of(p) == topic_of(b)) & (F.coalesce(p["error_code"], F.lit(0)) == 0)
                              & p["base_offset"].isNotNull())
            base = F.element_at(F.filter("partitions", same), 1)["base_offset"]
            tkey = self.topic_key(b["topic"], b["topic_id"])
            return event(route=F.lit(LINK), entity=F.concat_ws("-", tkey, b["partition"].cast("string")), kind=F.lit("ab"),
                         tid=F.col("transactional_id"), pid=b["producer_id"], first=base,
                         last=base + b["record_count"] - 1)

        fetches = F.when(_api(ApiKey.FETCH) & (F.col("status") == "ok"), F.col("batches"))  # read_committed only (_wanted)
        produces = F.when(_api(ApiKey.PRODUCE) & (F.col("status") == "ok") & F.col("transactional_id").isNotNull(),
                          F.col("batches"))
        # Pruning only: keep the fetched batches that replay_fetch_partition (entity_replay.py)
        # could flag -- at/after the LSO, or transactional data with no aborted-transactions
        # entry. It must stay a superset of that function's conditions, or a violation is lost.
        possible = lambda e: ((e["lso"].isNotNull() & (e["lso"] >= 0) & (e["last"] >= e["lso"]))  # noqa: E731
                              | (F.coalesce(e["transactional"], F.lit(False)) & ~F.coalesce(e["control"], F.lit(False))
                                 & ~e["listed"]))
        fetched = F.coalesce(F.filter(F.transform(F.filter(fetches, lambda b: b["side"] == "response"), fb), possible),
                             F.array().cast(f"array<{_EVENT_DDL}>"))
        produced = F.filter(_each(produces, lambda b: (b["side"] == "request") & b["transactional"], pb),
                            lambda e: e["first"].isNotNull() & (e["first"] >= 0))
        return [fetched, produced]

    # -- 2. the transaction link: one window ------------------------------------------------

    def linked(self, flat: Any) -> Any:
        """Events of transactional ids resolved against the nearest successful EndTxn at or
        after them (seq order; it ends their transaction): staged offsets keyed by that
        transaction, its end for each group it staged offsets in, and the offsets of
        aborted transactions as "ab" events of the fetched partition."""
        from pyspark.sql import Window

        F = _F()
        w = Window.partitionBy("tid").orderBy(F.col("seq").desc()).rowsBetween(Window.unboundedPreceding, 0)
        mark = F.when(F.col("kind") == "end", F.struct(F.col("seq").alias("s"), F.col("t").alias("t"),
                                                       F.col("committed").alias("c")))
        x = flat.filter(F.col("route") == LINK).withColumn("_end", F.last(mark, ignorenulls=True).over(w))
        txn = F.concat_ws("#", "tid", F.coalesce(F.col("_end.s").cast("string"), F.lit("open")))
        kind, end = F.col("kind"), F.col("_end")
        x = x.filter((kind == "txn_commit") | (end.isNotNull() & (kind == "txn_end"))
                     | (end.isNotNull() & ~F.col("_end.c") & (kind == "ab")))
        ends = kind == "txn_end"
        return (x.withColumn("route", F.when(kind == "ab", F.lit("fetch")).otherwise(F.lit("group")))
                .withColumn("txn", txn)
                .withColumn("seq", F.when(ends, F.col("_end.s")).otherwise(F.col("seq")))
                .withColumn("t", F.when(ends, F.col("_end.t")).otherwise(F.col("t")))
                .withColumn("committed", F.when(ends, F.col("_end.c")))
                .withColumn("conn", F.when(~ends, F.col("conn")))  # not the EndTxn's: never a violation's
                .withColumn("api_name", F.when(~ends, F.col("api_name")))
                .drop("_end"))

    # -- 3. every replay in one grouped map ----------------------------------------------------

    def violations(self) -> Any:
        """One row per (rule, entity, seq), with requirement ids, connection and api of the exchange."""
        F = _F()
        flat = self.flat_events()
        events = flat.filter(F.col("route") != LINK).unionByName(self.linked(flat))
        cfg = self.cfg

        def run(pdf):  # one bucket: many whole entities of any route
            import pandas as pd

            out = replay_bucket(pdf, cfg)
            return pd.DataFrame(out, columns=[c.split()[0] for c in VIOLATION_DDL.split(", ")])

        return (events.withColumn("bucket", F.abs(F.hash("route", "entity")) % self.buckets)
                .groupBy("bucket").applyInPandas(run, schema=VIOLATION_DDL))


def replay_bucket(pdf: Any, cfg: CheckConfig) -> list[tuple]:
    """The violations of the entities in one bucket of the flat event table (pandas), one
    per (rule, entity, seq) with the smallest detail, with the exchange's connection and api."""
    where: dict[int, tuple] = {}
    for seq, conn, api in zip(pdf["seq"].tolist(), pdf["conn"].tolist(), pdf["api_name"].tolist()):
        if api is not None:
            where[int(seq)] = (None if conn != conn else int(conn), api)
    found: dict[tuple, str] = {}
    for route, sub in pdf.groupby("route", sort=False):
        cols = ROUTE_COLUMNS[route]
        by: dict[str, list[dict]] = {}
        for vals in zip(*[sub[c].tolist() for c in cols]):
            e = dict(zip(cols, vals))
            by.setdefault(e["entity"], []).append(e)
        for entity, evs in by.items():
            for rule, ent, seq, detail in REPLAYS[route](entity, evs, cfg):
                key = (rule, ent, int(seq))
                if key not in found or detail < found[key]:
                    found[key] = detail
    return [(rule, requirements_of(rule), ent, seq, *where.get(seq, (None, None)), detail)
            for (rule, ent, seq), detail in found.items()]
