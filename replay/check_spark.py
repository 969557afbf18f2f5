"""`kipcheck check` on Spark: DataFrame normalization and comparison, per-entity replay.

Selection, explosion of the nested columns, topic-name/id alignment, transaction
ordinals (window), the aborted-range join and the read_committed Fetch rules are
DataFrame operations. The per-entity state machines (replay.entity_replay) run through
`applyInPandas`, grouped by a hash bucket of the entity: one pandas call replays many
whole entities (an entity never spans two buckets), so the per-call overhead of grouped
map does not scale with the number of entities. Same events, same replays, same results
as replay.check_pure (the parity test holds them to it).
"""

from __future__ import annotations

from typing import Any

from replay import check_events as ev
from replay.check_rules import RULES
from replay.entity_replay import REPLAYS, CheckConfig
from reference_impl.protocol.api_keys import ApiKey

VIOLATION_DDL = "rule_id string, entity string, seq long, detail string"


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


def exchanges(df: Any) -> Any:
    """Decoded exchanges some rule reads (replay.check_events.relevant, as a column
    expression), the typed columns (schema version 2, or derived for version-1 rows) in
    place of the JSON text."""
    F = _F()
    df = upgrade(df)
    api = F.col("api_key")
    wanted = (F.when(api == ApiKey.PRODUCE, F.col("transactional_id").isNotNull())
              .when(api == ApiKey.FETCH, F.coalesce(F.col("isolation_level") == ev.READ_COMMITTED, F.lit(False)))
              .otherwise(api.isin(*ev.RELEVANT_APIS)))
    return (df.filter((F.col("kind") == "exchange") & F.col("seq").isNotNull() & F.col("decode_error").isNull() & wanted)
            .select(*ev.COLUMNS)
            .withColumnRenamed("granted_producer_id", "grant_pid")
            .withColumn("grant_epoch", F.col("granted_producer_epoch").cast("int")).drop("granted_producer_epoch")
            .withColumn("committed", F.when(api == ApiKey.END_TXN, F.coalesce(F.col("txn_committed"), F.lit(False))))
            .drop("txn_committed"))


def _ok() -> Any:
    F = _F()
    return ((F.col("status") == "ok") & (F.coalesce(F.col("error_code"), F.lit(0)) == 0)
            & (F.coalesce(F.size("error_codes"), F.lit(0)) <= 0))


def _api(*keys: int) -> Any:
    return _F().col("api_key").isin(*keys)


class SparkChecker:
    def __init__(self, spark: Any, df: Any, cfg: CheckConfig | None = None, buckets: int | None = None) -> None:
        from pyspark import StorageLevel

        F = _F()
        self.spark, self.cfg = spark, cfg or CheckConfig()
        self.buckets = buckets or int(spark.conf.get("spark.sql.shuffle.partitions", "8"))
        self.base = exchanges(df).withColumn("ok", _ok()).persist(StorageLevel.MEMORY_AND_DISK)
        names = (self.base.select(F.explode("partitions").alias("p"))
                 .filter(F.col("p.topic").isNotNull() & F.col("p.topic_id").isNotNull())
                 .groupBy(F.col("p.topic").alias("t")).agg(F.min("p.topic_id").alias("i")).collect())
        # topics are few: a literal map, no join (and no shuffle) where names meet ids
        self.names = F.create_map(*[F.lit(x) for r in names for x in (r.t, r.i)]) if names else None
        self._txn_rows = None

    # -- helpers ------------------------------------------------------------------------

    def topic_key(self, topic: Any, topic_id: Any) -> Any:
        """The topic id, else the id the trace gives the name, else the name."""
        F = _F()
        if self.names is None:
            return F.coalesce(topic_id, topic)
        return F.coalesce(topic_id, F.element_at(self.names, topic), topic)

    def txn_rows(self) -> Any:
        """Produce, EndTxn and TxnOffsetCommit exchanges of transactional ids, with the
        transaction ordinal (successful EndTxns of the id before it: a window) and the
        transaction key `txn` = "<transactional id>#<ordinal>"."""
        if self._txn_rows is None:
            from pyspark import StorageLevel
            from pyspark.sql import Window

            F = _F()
            w = Window.partitionBy("transactional_id").orderBy("seq").rowsBetween(Window.unboundedPreceding, -1)
            end = (_api(ApiKey.END_TXN) & F.col("ok")).cast("int")
            self._txn_rows = (self.base.filter(F.col("transactional_id").isNotNull()
                                               & _api(ApiKey.PRODUCE, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT))
                              .withColumn("ordinal", F.coalesce(F.sum(end).over(w), F.lit(0)))
                              .withColumn("txn", F.concat_ws("#", "transactional_id", F.col("ordinal").cast("string")))
                              .persist(StorageLevel.MEMORY_AND_DISK))
        return self._txn_rows

    def replay(self, events: dict[str, Any]) -> Any:
        """Every entity replay in one shuffle: the event frames of all kinds (one superset
        schema, a `replay` column naming the kind) bucketed by hash of (kind, entity)."""
        F = _F()
        cfg = self.cfg
        frames = [df.withColumn("replay", F.lit(kind)) for kind, df in events.items()]
        union = frames[0]
        for f in frames[1:]:
            union = union.unionByName(f, allowMissingColumns=True)
        columns = union.columns

        def run(pdf):  # one bucket: many whole entities of any kind
            import pandas as pd

            data = [pdf[c].tolist() for c in columns]
            by: dict[tuple, list[dict]] = {}
            for vals in zip(*data):
                e = dict(zip(columns, vals))
                by.setdefault((e["replay"], e["entity"]), []).append(e)
            out = []
            for (kind, entity), evs in by.items():
                out.extend(REPLAYS[kind](entity, evs, cfg))
            return pd.DataFrame(out, columns=["rule_id", "entity", "seq", "detail"])

        return (union.withColumn("bucket", F.abs(F.hash("replay", "entity")) % self.buckets)
                .groupBy("bucket").applyInPandas(run, schema=VIOLATION_DDL))

    # -- normalized events ----------------------------------------------------------------

    def txn_events(self) -> Any:
        F = _F()
        init = _api(ApiKey.INIT_PRODUCER_ID)
        return (self.base.filter(F.col("transactional_id").isNotNull() & (F.col("status") == "ok")
                                 & _api(ApiKey.PRODUCE, *ev.TXN_APIS))
                .select(F.col("transactional_id").alias("entity"), "seq", F.col("api_key").cast("int").alias("api"),
                        F.col("request_mono_ns").alias("t_req"), F.col("response_mono_ns").alias("t_resp"),
                        F.when(~init, F.col("producer_id")).alias("pid"),
                        F.when(~init, F.col("producer_epoch").cast("int")).alias("epoch"),
                        "grant_pid", "grant_epoch", "ok"))

    def group_events(self) -> Any:
        F = _F()
        txn = self.txn_rows()
        keep = ["seq", "group_id", "api_key", "request_mono_ns", "ok", "partitions", "txn"]
        plain = self.base.filter(_api(ApiKey.OFFSET_COMMIT)).withColumn("txn", F.lit(None).cast("string")).select(*keep)
        staged = txn.filter(_api(ApiKey.TXN_OFFSET_COMMIT)).select(*keep)
        commits = (plain.unionByName(staged).filter(F.col("ok") & F.col("group_id").isNotNull())
                   .select("seq", "group_id", "api_key", "request_mono_ns", "txn", F.explode("partitions").alias("p"))
                   .filter((F.col("p.side") == "request") & F.col("p.committed_offset").isNotNull())
                   .select(F.col("group_id").alias("entity"), "seq",
                           F.when(_api(ApiKey.TXN_OFFSET_COMMIT), F.lit("txn_commit")).otherwise(F.lit("commit")).alias("kind"),
                           F.col("request_mono_ns").alias("t"), self.topic_key(F.col("p.topic"), F.col("p.topic_id")).alias("topic"),
                           F.col("p.partition").alias("partition"), F.col("p.committed_offset").alias("offset"), "txn",
                           F.lit(None).cast("boolean").alias("committed")))
        fetches = (self.base.filter(_api(ApiKey.OFFSET_FETCH) & (F.col("status") == "ok") & F.col("group_id").isNotNull())
                   .select("seq", "group_id", "response_mono_ns", F.explode("partitions").alias("p"))
                   .filter((F.col("p.side") == "response") & F.col("p.committed_offset").isNotNull()
                           & (F.coalesce(F.col("p.error_code"), F.lit(0)) == 0))
                   .select(F.col("group_id").alias("entity"), "seq", F.lit("fetch").alias("kind"),
                           F.col("response_mono_ns").alias("t"), self.topic_key(F.col("p.topic"), F.col("p.topic_id")).alias("topic"),
                           F.col("p.partition").alias("partition"), F.col("p.committed_offset").alias("offset"),
                           F.lit(None).cast("string").alias("txn"), F.lit(None).cast("boolean").alias("committed")))
        groups_of_txn = (txn.filter(_api(ApiKey.TXN_OFFSET_COMMIT) & F.col("ok") & F.col("group_id").isNotNull())
                         .select("txn", F.col("group_id").alias("entity")).distinct())
        ends = (txn.filter(_api(ApiKey.END_TXN) & F.col("ok")).join(groups_of_txn, "txn")
                .select("entity", "seq", F.lit("txn_end").alias("kind"), F.col("request_mono_ns").alias("t"),
                        F.lit(None).cast("string").alias("topic"), F.lit(None).cast("int").alias("partition"),
                        F.lit(None).cast("long").alias("offset"), "txn", "committed"))
        return commits.unionByName(fetches).unionByName(ends)

    def share_events(self) -> Any:
        """Share-group events; the entity is the group (replay_share_group keeps one view
        per share-partition and applies a session close to all of them)."""
        F = _F()
        rows = (self.base.filter(_api(ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE) & (F.col("status") == "ok")
                                 & F.col("group_id").isNotNull() & F.col("member_id").isNotNull())
                .select("seq", "api_key", "group_id", "member_id", "error_code", "share_session_epoch", "ok",
                        "request_wall_ms", "response_wall_ms", "acquired_records", "acknowledgement_batches"))
        top_ok = F.coalesce(F.col("error_code"), F.lit(0)) == 0
        none_l, none_i, none_a = F.lit(None).cast("long"), F.lit(None).cast("int"), F.lit(None).cast("array<int>")

        def shaped(df: Any, kind: str, tid: Any, part: Any, member: Any, first: Any, last: Any, count: Any, types: Any) -> Any:
            return df.select(F.col("group_id").alias("entity"), "seq", F.lit(kind).alias("kind"), tid.alias("topic_id"),
                             part.cast("int").alias("partition"), member.alias("member"), first.alias("first"),
                             last.alias("last"), count.cast("int").alias("count"), types.alias("types"),
                             F.col("request_wall_ms").alias("t_req"), F.col("response_wall_ms").alias("t_resp"), "ok")

        acks = rows.select("*", F.explode("acknowledgement_batches").alias("a")).filter(F.col("a.side") == "request")
        acks = shaped(acks, "ack", F.col("a.topic_id"), F.col("a.partition"), F.col("member_id"), F.col("a.first_offset"),
                      F.col("a.last_offset"), none_i, F.col("a.acknowledge_types").cast("array<int>"))
        acqs = rows.filter(_api(ApiKey.SHARE_FETCH) & top_ok).select("*", F.explode("acquired_records").alias("a"))
        acqs = shaped(acqs, "acq", F.col("a.topic_id"), F.col("a.partition"), F.col("member_id"), F.col("a.first_offset"),
                      F.col("a.last_offset"), F.col("a.delivery_count"), none_a)
        closes = shaped(rows.filter((F.col("share_session_epoch") == -1) & top_ok), "close", F.lit(None).cast("string"),
                        none_i, F.col("member_id"), none_l, none_l, none_i, none_a)
        spso = (self.base.filter(_api(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS) & (F.col("status") == "ok") & F.col("group_id").isNotNull())
                .select("seq", "group_id", "ok", "request_wall_ms", "response_wall_ms",
                        F.explode("share_start_offsets").alias("p"))
                .filter((F.coalesce(F.col("p.error_code"), F.lit(0)) == 0) & (F.col("p.start_offset") >= 0)))
        spso = shaped(spso, "spso", F.col("p.topic_id"), F.col("p.partition"), F.lit(None).cast("string"),
                      F.col("p.start_offset"), F.col("p.start_offset"), none_i, none_a)
        return acks.unionByName(acqs).unionByName(closes).unionByName(spso)

    def session_events(self) -> Any:
        F = _F()
        return (self.base.filter(_api(ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE) & (F.col("status") == "ok")
                                 & F.col("group_id").isNotNull() & F.col("member_id").isNotNull()
                                 & F.col("share_session_epoch").isNotNull())
                .select(F.concat_ws("|", "upstream", "group_id", "member_id").alias("entity"), "seq",
                        F.col("api_key").cast("int").alias("api"), F.col("group_id").alias("group"),
                        F.col("member_id").alias("member"), F.col("share_session_epoch").alias("epoch"),
                        F.coalesce(F.exists("acknowledgement_batches", lambda a: a["side"] == "request"), F.lit(False)).alias("has_acks"),
                        F.coalesce(F.col("error_code").cast("int"), F.lit(0)).alias("error"),
                        F.col("connection_id").alias("conn")))

    # -- row rules: read_committed fetches -------------------------------------------------

    def aborted_ranges(self) -> Any:
        """(topic, partition, producer id, lo, hi) of transactional data that aborted."""
        F = _F()
        txn = self.txn_rows()
        aborted = txn.filter(_api(ApiKey.END_TXN) & F.col("ok") & ~F.col("committed")).select("txn")
        produce = (txn.filter(_api(ApiKey.PRODUCE) & (F.col("status") == "ok")).join(aborted, "txn")
                   .select("partitions", F.explode("batches").alias("b"))
                   .filter((F.col("b.side") == "request") & F.col("b.transactional")))
        same = lambda p: ((p["side"] == "response") & (p["partition"] == F.col("b.partition"))  # noqa: E731
                          & (F.coalesce(p["topic_id"], p["topic"]) == F.coalesce(F.col("b.topic_id"), F.col("b.topic")))
                          & (F.coalesce(p["error_code"], F.lit(0)) == 0) & p["base_offset"].isNotNull())
        b = produce.withColumn("base", F.element_at(F.filter("partitions", same), 1)["base_offset"]).filter(F.col("base") >= 0)
        return b.select(self.topic_key(F.col("b.topic"), F.col("b.topic_id")).alias("r_topic"),
                        F.col("b.partition").alias("r_partition"), F.col("b.producer_id").alias("r_pid"),
                        F.col("base").alias("lo"), (F.col("base") + F.col("b.record_count") - 1).alias("hi"))

    def fetch_violations(self) -> Any:
        F = _F()
        rc = self.base.filter(_api(ApiKey.FETCH) & (F.col("status") == "ok"))  # exchanges() kept read_committed only
        b = rc.select("seq", "partitions", "aborted_transactions", F.explode("batches").alias("b")).filter(F.col("b.side") == "response")
        btopic = F.coalesce(F.col("b.topic_id"), F.col("b.topic"))
        same = lambda x: (x["partition"] == F.col("b.partition")) & (F.coalesce(x["topic_id"], x["topic"]) == btopic)  # noqa: E731
        b = b.select("b", "seq",
                     F.element_at(F.filter("partitions", lambda p: (p["side"] == "response") & same(p)), 1)
                     ["last_stable_offset"].alias("lso"),
                     F.exists("aborted_transactions", lambda a: same(a) & (a["producer_id"] == F.col("b.producer_id"))
                              & (a["first_offset"] <= F.col("b.base_offset"))).alias("listed"),
                     self.topic_key(F.col("b.topic"), F.col("b.topic_id")).alias("tkey"))
        b = b.withColumn("entity", F.concat_ws("-", "tkey", F.col("b.partition").cast("string")))
        lso = (b.filter(F.col("lso").isNotNull() & (F.col("lso") >= 0) & (F.col("b.last_offset") >= F.col("lso")))
               .select(F.lit("FETCH.BEYOND_LSO").alias("rule_id"), "entity", "seq",
                       F.format_string("batch %d-%d at/after LSO %d", "b.base_offset", "b.last_offset", "lso").alias("detail")))
        data = b.filter(F.col("b.transactional") & ~F.col("b.control") & ~F.coalesce(F.col("listed"), F.lit(False)))
        ranges = self.aborted_ranges()
        hit = data.join(ranges, (data["tkey"] == ranges["r_topic"]) & (F.col("b.partition") == ranges["r_partition"])
                        & (F.col("b.producer_id") == ranges["r_pid"]) & (ranges["lo"] <= F.col("b.last_offset"))
                        & (F.col("b.base_offset") <= ranges["hi"]))
        unlisted = hit.select(F.lit("FETCH.ABORTED_UNLISTED").alias("rule_id"), "entity", "seq",
                              F.format_string("aborted batch %d-%d of producer %d not listed", "b.base_offset",
                                              "b.last_offset", "b.producer_id").alias("detail"))
        return lso.unionByName(unlisted)

    # -- all rules --------------------------------------------------------------------------

    def violations(self) -> Any:
        """One row per (rule, entity, seq), with requirement ids, connection and api of the exchange."""
        F = _F()
        replayed = self.replay({"txn": self.txn_events(), "group": self.group_events(),
                                "share_group": self.share_events(), "share_session": self.session_events()})
        found = self.fetch_violations().unionByName(replayed)
        found = found.groupBy("rule_id", "entity", "seq").agg(F.min("detail").alias("detail"))
        reqs = self.spark.createDataFrame([(r.id, ",".join(r.requirements)) for r in RULES], "rule_id string, requirement_ids string")
        where = self.base.select("seq", "connection_id", "api_name")
        # violations are few: broadcast them rather than shuffling every exchange
        return (F.broadcast(found).join(F.broadcast(reqs), "rule_id", "left").join(where, "seq", "left")
                .select("rule_id", "requirement_ids", "entity", "seq", "connection_id", "api_name", "detail"))
