"""`kipcheck diff` as Spark DataFrame operations (the rules: replay/diff_fields.py).

Plan, per trace: read the segments (only the columns the diff needs), add alignment keys
(row numbers per group: replay/spark_rank.py), build the trace's id placeholders (grouped
table of first appearances, joined back so each exchange carries a small map of its own
ids) and project every compared field to its normalized comparison string — scalars as
strings, list columns as arrays of structs of strings. Then: full outer join A and B on
the connection key, again on the client key for the leftovers, and for every aligned pair
one projection builds the array of differing (path, a, b) — whole lists are compared
first, element by element only when they differ; an unaligned exchange gets its one
presence row. That narrow frame is persisted: the alignment counts are counted from it and
its arrays exploded into the divergence rows (matching pairs yield none). The optional
response-JSON walk is the only Python on the path: `mapInPandas` over aligned pairs,
vectorized per Arrow batch, never a row UDF.

Compacted traces (schema 3, replay/compact.py) carry the alignment keys and id placeholders:
each is read as a bucketed table (`load_v3`) and projected once, and the connection join
runs bucket by bucket with no shuffle (`connection_join`).
"""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from replay import diff_fields as f
from replay import trace_reader as tr
from replay import trace_schema as ts
from replay.compact import layout
from replay.diff_input import TraceInput
from replay.spark_rank import number_within
from replay.diff_pure import GROUP_KEY, SAMPLES, noise_entry, sort_groups
from reference_impl.protocol.api_keys import ApiKey

KEY_SEP = "\u0001"
# Session settings the diff wants (get_spark keeps whatever spark-submit set).
SPARK_CONF = {"spark.ui.showConsoleProgress": "false", "spark.sql.maxPlanStringLength": "65536"}
ORDER = ("_client", "_conn_ord", "request_mono_ns", "seq")
KEEP = ("seq", "connection_id", "api_key", "api_name", "error_code", "request_mono_ns", "_client", "_conn_ord",
        "_req", "_api_ord")
BUCKET_KEY = "_bucket_key"  # schema 3: the bucket column (align_conn), first of the alignment join key
# schema-3 column -> the name the plan gives it
V3_KEYS = {"align_client": "_client", "conn_ord": "_conn_ord", "request_key": "_req", "api_ord": "_api_ord",
           "id_placeholders": "_ids", "align_conn": BUCKET_KEY}
# Schema 3: both traces are bucketed on align_conn, a part of the join key. Spark's default
# co-partitioning rule wants the bucket columns to be ALL the join keys, and would shuffle both.
V3_CONF = {"spark.sql.requireAllClusterKeysForCoPartition": "false"}


def load(spark: SparkSession, inp: TraceInput, with_json: bool) -> DataFrame:
    cols = list(f.READ_COLUMNS) + ([f.JSON_COLUMN] if with_json else [])
    df = spark.read.parquet(*inp.files).select(*cols)
    return df.where((F.col("kind") == "exchange") & F.col("decode_error").isNull()).drop("kind", "decode_error")


def is_v3(inp: TraceInput) -> bool:
    """A compacted trace (kipcheck compact): every file of schema version 3."""
    return bool(inp.files) and all(tr.segment_version(p) == str(ts.COMPACT_VERSION) for p in inp.files)


def load_v3(spark: SparkSession, inp: TraceInput, with_json: bool) -> DataFrame:
    """A compacted trace as a bucketed table over its files (an external table of the
    session catalog: dropping it never touches the files): Spark takes the bucket of each
    file from its name and knows the rows are hash-partitioned by align_conn, so a join of
    two such traces on a key that contains it needs no shuffle. The alignment keys and id
    placeholders are read, not computed."""
    buckets = int(layout(inp.files[0])[ts.META_BUCKETS.decode()])
    name = f"kipcheck_v3_{abs(hash((inp.directory, id(inp))))}"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    location = inp.directory.replace("'", "\\'")
    spark.sql(f"CREATE TABLE {name} ({_v3_ddl()}) USING parquet CLUSTERED BY (align_conn) INTO {buckets} BUCKETS "
              f"LOCATION '{location}'")
    cols = [c for c in f.READ_COLUMNS if c not in ("kind", "decode_error")] + ([f.JSON_COLUMN] if with_json else [])
    df = spark.table(name).where((F.col("kind") == "exchange") & F.col("decode_error").isNull())
    return df.select(*cols, *[F.col(c).alias(alias) for c, alias in V3_KEYS.items()])


def _v3_ddl() -> str:
    from pyspark.sql.pandas.types import from_arrow_schema  # pyspark's Arrow bridge, as check_spark.trace_schema

    return ", ".join(f"`{x.name}` {x.dataType.simpleString()}" for x in from_arrow_schema(ts.schema(ts.COMPACT_VERSION)))


def with_alignment_keys(df: DataFrame) -> DataFrame:
    conns = df.groupBy("connection_id").agg(
        F.min("request_mono_ns").alias("_first"),
        F.max(F.coalesce(F.col("client_id"), F.lit(""))).alias("_client"))
    conns = number_within(conns, ["_client"], ["_first", "connection_id"], "_conn_ord").drop("_first")
    # not broadcast: a 10M-exchange trace has over a million connections. Joined on
    # connection_id, the exchanges stay partitioned by it for the window below (no shuffle).
    df = df.join(conns, "connection_id").withColumn("_req", _request_fingerprint())
    by_time = Window.partitionBy("connection_id", "api_key", "_req").orderBy("request_mono_ns", "seq")
    return df.withColumn("_api_ord", F.row_number().over(by_time))


def _request_fingerprint() -> Column:
    """diff_fields.request_fingerprint as a column expression."""
    topics = F.array_join(F.array_sort(F.array_distinct(F.coalesce(F.col("topics"), F.array().cast("array<string>")))), ",")
    return (F.when(F.col("api_key") == ApiKey.METADATA, topics)
            .when(F.col("api_key") == ApiKey.FIND_COORDINATOR,
                  F.coalesce(F.col("group_id"), F.col("transactional_id"), F.lit("")))
            .otherwise(F.lit("")))


# --- id placeholders -------------------------------------------------------------------------------


def _occurrences(df: DataFrame) -> DataFrame:
    """(seq, slot, cat, value, o): every non-sentinel id occurrence with its order key, from one explode."""
    def occ(cat: str, value: Column, slot: Column) -> Column:
        return F.struct(F.lit(cat).alias("cat"), value.cast("string").alias("value"), slot.alias("slot"))

    arrays = []
    for slot, column, sub, cat in f.ID_SLOTS:
        if sub is None:
            arrays.append(F.array(occ(cat, F.col(column), F.lit(slot))))
        else:
            arrays.append(F.coalesce(F.transform(F.col(column), _occurrence_of(cat, sub, slot, occ)),
                                     F.array().cast("array<struct<cat:string,value:string,slot:int>>")))
    exploded = df.select(*[F.col(c) for c in ORDER], F.explode(F.concat(*arrays)).alias("x"))
    occ_df = exploded.select("seq", "x.slot", "x.cat", "x.value",
                             F.struct(*[F.col(c) for c in ORDER], F.col("x.slot")).alias("o"))
    sentinel = (F.col("value").isNull()
                | ((F.col("cat") == "producer_id") & (F.col("value").cast("long") < 0))
                | ((F.col("cat") == "member_id") & (F.col("value") == ""))
                | ((F.col("cat") == "topic_id") & F.col("value").isin(f.ZERO_UUID, "")))
    return occ_df.where(~sentinel)


def _occurrence_of(cat: str, sub: str, slot: int, occ):
    return lambda e, i: occ(cat, e[sub], i + F.lit(slot))


def _topic_names(df: DataFrame) -> DataFrame:
    pairs = F.concat(*[F.coalesce(F.transform(F.col(c), lambda e: F.struct(e["topic_id"].alias("tid"), e["topic"].alias("name"))),
                                  F.array().cast("array<struct<tid:string,name:string>>")) for c in f.TOPIC_NAME_LISTS])
    names = df.select(F.explode(pairs).alias("e")).select("e.tid", "e.name")
    return names.where(F.col("tid").isNotNull() & F.col("name").isNotNull()).groupBy("tid").agg(
        F.min("name").alias("name"))


def placeholders(occ: DataFrame, names: DataFrame) -> DataFrame:
    """(cat, value, ph) for one trace: named topic ids, the rest numbered by first appearance."""
    unnamed = occ.join(F.broadcast(names.select(F.col("tid").alias("value"), F.lit("topic_id").alias("cat"))),
                       ["cat", "value"], "left_anti")
    first = unnamed.groupBy("cat", "value").agg(F.min("o").alias("o"))
    ranked = number_within(first, ["cat"], ["o", "value"], "n")
    numbered = ranked.select("cat", "value", F.concat(F.lit("<"), F.col("cat"), F.lit("#"),
                                                      F.col("n").cast("string"), F.lit(">")).alias("ph"))
    named = names.select(F.lit("topic_id").alias("cat"), F.col("tid").alias("value"),
                         F.concat(F.lit("<topic_id:"), F.col("name"), F.lit(">")).alias("ph"))
    return numbered.unionByName(named)


def row_id_maps(df: DataFrame) -> DataFrame:
    """(seq, _ids): per exchange, a small map slot -> placeholder of the ids it carries.

    The trace-wide table of placeholders can be large (every producer and member of the
    run), so it is joined to the occurrences, and each exchange carries only its own ids."""
    occ = _occurrences(df)
    ph = placeholders(occ, _topic_names(df))
    located = occ.select("seq", "slot", "cat", "value").join(ph, ["cat", "value"])
    return located.groupBy("seq").agg(F.map_from_entries(F.collect_list(F.struct("slot", "ph"))).alias("_ids"))


# --- comparison strings -------------------------------------------------------------------------------


def fmt(c: Column, fld: f.Field, ids: Column, slot: Column | None = None) -> Column:
    """The comparison string of a value (same strings as diff_fields.fmt); an id is looked
    up in the exchange's map by its slot."""
    if fld.kind == "bool":
        return F.when(c.isNull(), f.NULL).when(c, "true").otherwise("false")
    if fld.kind in ("bag", "seq"):
        arr = F.array_sort(c) if fld.kind == "bag" else c
        return F.when(c.isNull(), f.NULL).otherwise(
            F.concat(F.lit("["), F.array_join(F.transform(arr, lambda x: x.cast("string")), ","), F.lit("]")))
    s = c.cast("string")
    if fld.category is not None:
        s = F.coalesce(F.try_element_at(ids, slot), s)
    return F.coalesce(s, F.lit(f.NULL))


_SLOT_OF = {(column, sub): slot for slot, column, sub, _ in f.ID_SLOTS}


def normalized(df: DataFrame, with_json: bool) -> DataFrame:
    """Alignment keys, pair metadata and every compared field as its comparison string."""
    ids = F.col("_ids")
    cols = [F.col(c) for c in KEEP + ((BUCKET_KEY,) if BUCKET_KEY in df.columns else ())]
    cols += [fmt(F.col(x.name), x, ids, F.lit(_SLOT_OF.get((x.name, None), -1))).alias("n_" + x.name)
             for x in f.SCALARS]
    for column, fields in f.LISTS:
        cols.append(F.coalesce(F.transform(F.col(column), _entry_strings(column, fields, ids)),
                               F.array().cast(T.ArrayType(_string_struct(fields)))).alias("n_" + column))
    if with_json:
        cols.append(F.col(f.JSON_COLUMN))
    if "_ids" not in df.columns:  # schema 3 carries them
        df = df.join(row_id_maps(df), "seq", "left")
    return df.select(*cols)


def _entry_strings(column: str, fields: tuple[f.Field, ...], ids: Column):
    def entry(e: Column, i: Column) -> Column:
        return F.struct(*[fmt(e[x.name], x, ids, i + F.lit(_SLOT_OF.get((column, x.name), -1))).alias(x.name)
                          for x in fields])
    return entry


def _string_struct(fields: tuple[f.Field, ...]) -> T.StructType:
    return T.StructType([T.StructField(x.name, T.StringType(), True) for x in fields])


def _side(df: DataFrame, prefix: str) -> DataFrame:
    return df.select(*[F.col(c).alias(prefix + c) for c in df.columns])


def _diff_entry(path: Column, a: Column, b: Column) -> Column:
    return F.struct(path.alias("path"), a.alias("a_value"), b.alias("b_value"))


def _element_differences(column: str, fields: tuple[f.Field, ...], la: Column, lb: Column):
    """i -> array of (path, a, b) for every subfield of element i of the two lists."""
    def entries(i: Column) -> Column:
        ea, eb = F.get(la, i), F.get(lb, i)
        return F.array(*[_diff_entry(
            F.concat(F.lit(column + "["), i.cast("string"), F.lit("]." + x.name)),
            F.when(ea.isNull(), f.MISSING_VALUE).otherwise(ea[x.name]),
            F.when(eb.isNull(), f.MISSING_VALUE).otherwise(eb[x.name])) for x in fields])
    return entries


def column_differences() -> Column:
    """array<struct<path, a_value, b_value>> of the differing fields of one aligned pair."""
    parts = []
    scalars = [F.when(F.col("a_n_" + x.name) != F.col("b_n_" + x.name),
                      _diff_entry(F.lit(x.name), F.col("a_n_" + x.name), F.col("b_n_" + x.name)))
               for x in f.SCALARS]
    parts.append(F.filter(F.array(*scalars), lambda d: d.isNotNull()))
    for column, fields in f.LISTS:
        la, lb = F.col("a_n_" + column), F.col("b_n_" + column)
        n = F.greatest(F.size(la), F.size(lb))

        per_list = F.when(la == lb, F.array()).otherwise(F.filter(
            F.flatten(F.transform(F.sequence(F.lit(0), n - 1), _element_differences(column, fields, la, lb))),
            lambda d: d["a_value"] != d["b_value"]))
        parts.append(per_list)
    return F.concat(*parts)


# --- alignment ------------------------------------------------------------------------------------------


def connection_join(sa: DataFrame, sb: DataFrame) -> DataFrame:
    """The full outer join of two sides (a_* / b_*) on the connection key. Compacted traces
    put their bucket column first: both sides are hash-partitioned by it, so the join runs
    bucket i against bucket i, with no shuffle (test_diff_spark asserts the plan)."""
    bucketed = "a_" + BUCKET_KEY in sa.columns and "b_" + BUCKET_KEY in sb.columns
    key1 = ([BUCKET_KEY] if bucketed else []) + ["_client", "_conn_ord", "api_key", "_req", "_api_ord"]
    return sa.join(sb, [F.col("a_" + k) == F.col("b_" + k) for k in key1], "full_outer")


def align(a: DataFrame, b: DataFrame) -> DataFrame:
    """Aligned pairs and leftovers: a_* / b_* columns (one side null when unaligned) + `align`."""
    sa, sb = _side(a, "a_"), _side(b, "b_")
    first = connection_join(sa, sb).persist()  # read three times below
    pairs = first.where(F.col("a_seq").isNotNull() & F.col("b_seq").isNotNull()).withColumn("align", F.lit(f.ALIGN_CONNECTION))
    left_a = first.where(F.col("b_seq").isNull()).select(*[c for c in sa.columns if c != "a_" + BUCKET_KEY])
    left_b = first.where(F.col("a_seq").isNull()).select(*[c for c in sb.columns if c != "b_" + BUCKET_KEY])
    left_a = number_within(left_a, ["a__client", "a_api_key"], ["a_request_mono_ns", "a_seq"], "a__left_ord")
    left_b = number_within(left_b, ["b__client", "b_api_key"], ["b_request_mono_ns", "b_seq"], "b__left_ord")
    key2 = ["_client", "api_key", "_left_ord"]
    second = left_a.join(left_b, [F.col("a_" + k) == F.col("b_" + k) for k in key2], "full_outer").drop(
        "a__left_ord", "b__left_ord")
    second = second.withColumn("align", F.when(F.col("a_seq").isNotNull() & F.col("b_seq").isNotNull(),
                                               F.lit(f.ALIGN_CLIENT)))
    return pairs.drop("a_" + BUCKET_KEY, "b_" + BUCKET_KEY).unionByName(second)


def _presence_field(prefix: str) -> Column:
    """diff_fields.is_idle_poll over the normalized columns of one side."""
    c = lambda name: F.col(prefix + "n_" + name)  # noqa: E731
    idle = (_api(prefix).isin(*sorted(f.POLL_APIS)) & c("error_code").isin("0", f.NULL)
            & c("error_codes").isin("[]", f.NULL) & (F.size(c("acquired_records")) == 0)
            & ~F.exists(c("batches"), lambda b: b["side"] == "response"))
    return F.when(idle, f.IDLE_POLL_FIELD).otherwise(f.EXCHANGE_FIELD)


def _api(prefix: str) -> Column:
    return F.coalesce(F.col(prefix + "api_name"), F.concat(F.lit("api_"), F.col(prefix + "api_key").cast("string")))


def _meta(kind: Column) -> list[Column]:
    both = F.col("a_seq").isNotNull()
    return [
        kind.alias("kind"),
        F.when(both, F.col("a_api_key")).otherwise(F.col("b_api_key")).alias("api_key"),
        F.when(both, _api("a_")).otherwise(_api("b_")).alias("api_name"),
        F.col("a_seq"), F.col("b_seq"), F.col("a_connection_id"), F.col("b_connection_id"),
        F.when(both, F.col("a__client")).otherwise(F.col("b__client")).alias("client_id"),
        F.col("align"), F.col("a_error_code"), F.col("b_error_code"),
    ]


_JSON_OUT = T.StructType([
    T.StructField("a_seq", T.LongType()), T.StructField("b_seq", T.LongType()),
    T.StructField("path", T.StringType()), T.StructField("a_value", T.StringType()),
    T.StructField("b_value", T.StringType()),
])


def _json_walk(batches: Iterator[Any]) -> Iterator[Any]:
    """mapInPandas body: per Arrow batch of aligned pairs, the differing JSON leaves."""
    import pandas as pd  # runs in the Spark executor's Python worker (mapInPandas)

    for pdf in batches:
        out: list[tuple] = []
        for sa, sb, ja, jb in zip(pdf["a_seq"], pdf["b_seq"], pdf["a_" + f.JSON_COLUMN], pdf["b_" + f.JSON_COLUMN]):
            for path, va, vb in f.json_differences(ja, jb):
                out.append((int(sa), int(sb), path, va, vb))
        yield pd.DataFrame(out, columns=["a_seq", "b_seq", "path", "a_value", "b_value"])


def _kind() -> Column:
    return (F.when(F.col("align").isNotNull(), F.lit(f.KIND_FIELD))
            .when(F.col("a_seq").isNotNull(), F.lit(f.KIND_ONLY_A)).otherwise(F.lit(f.KIND_ONLY_B)))


def _unaligned_entry() -> Column:
    """The one (path, a, b) row of an exchange only one trace has."""
    a_side = F.col("a_seq").isNotNull()
    return F.array(_diff_entry(F.when(a_side, _presence_field("a_")).otherwise(_presence_field("b_")),
                               F.when(a_side, "<present>").otherwise(f.MISSING_VALUE),
                               F.when(F.col("b_seq").isNotNull(), "<present>").otherwise(f.MISSING_VALUE)))


def diff(a: DataFrame, b: DataFrame, with_json: bool) -> tuple[DataFrame, DataFrame]:
    """(divergence rows without requirement ids / noise, one row per aligned pair or unaligned
    exchange: _meta + `_d`, its differences).

    The second frame is persisted and narrow: the joins run once and feed both the rows and
    alignment_stats (measured at 1M exchanges: the stats job alone re-ran both joins, 44 of
    the diff's 183 executor CPU-s)."""
    joined = align(a, b)
    entries = F.when(F.col("align").isNotNull(), column_differences()).otherwise(_unaligned_entry())
    compared = joined.select(*_meta(_kind()), entries.alias("_d")).persist()
    rows = compared.select(*[c for c in compared.columns if c != "_d"], F.explode("_d").alias("d")).select(
        "*", "d.path", "d.a_value", "d.b_value").drop("d")
    if with_json:
        pairs = joined.where(F.col("align").isNotNull())
        js = pairs.where(F.col("a_" + f.JSON_COLUMN).isNotNull() & F.col("b_" + f.JSON_COLUMN).isNotNull()).select(
            "a_seq", "b_seq", "a_" + f.JSON_COLUMN, "b_" + f.JSON_COLUMN).mapInPandas(_json_walk, _JSON_OUT)
        meta = pairs.select(*_meta(F.lit(f.KIND_FIELD)))
        rows = rows.unionByName(js.join(meta, ["a_seq", "b_seq"]).select(*rows.columns))
    rows = rows.withColumn("field", F.regexp_replace("path", r"\[\d+\]", "[]"))
    return rows, compared


# --- noise, requirement ids, summary --------------------------------------------------------------------------


def alignment_stats(compared: DataFrame) -> dict:
    """Pairs by how they aligned, unaligned counts and pairs per api, in one job."""
    cls = F.coalesce(F.col("align"), F.col("kind"))
    counts = compared.select(cls.alias("cls"), F.col("api_name").alias("api")).groupBy("cls", "api").count().collect()
    total = {c: 0 for c in (f.ALIGN_CONNECTION, f.ALIGN_CLIENT, f.KIND_ONLY_A, f.KIND_ONLY_B)}
    per_api: dict[str, int] = {}
    for r in counts:
        total[r["cls"]] += r["count"]
        if r["cls"] in (f.ALIGN_CONNECTION, f.ALIGN_CLIENT):
            per_api[r["api"]] = per_api.get(r["api"], 0) + r["count"]
    return {"pairs_connection": total[f.ALIGN_CONNECTION], "pairs_client": total[f.ALIGN_CLIENT],
            "only_in_a": total[f.KIND_ONLY_A], "only_in_b": total[f.KIND_ONLY_B],
            "pairs_per_api": dict(sorted(per_api.items()))}


def learn_noise(rows: DataFrame, per_api: dict[str, int]) -> list[dict]:
    """Same table as diff_pure.learn_noise, from one grouped job."""
    counts = rows.groupBy("kind", "api_name", "field").agg(
        F.countDistinct(F.struct("a_seq", "b_seq")).alias("pairs"), F.count(F.lit(1)).alias("rows")).collect()
    table, unaligned = [], {}
    for r in counts:
        if r["kind"] == f.KIND_FIELD:
            table.append(noise_entry(r["api_name"], r["field"], r["pairs"], per_api.get(r["api_name"], 0)))
        else:
            key = (r["api_name"], r["field"])
            unaligned[key] = unaligned.get(key, 0) + r["rows"]
    table += [noise_entry(api, field, n, per_api.get(api, 0) + n) for (api, field), n in unaligned.items()]
    return sorted(table, key=lambda e: (e["api_name"], e["field"]))


def requirement_ids() -> Column:
    """diff_fields.REQUIREMENT_RULES as one CASE expression over (api_name, field)."""
    expr = None
    for api, rx, ids in f.REQUIREMENT_RULES:
        cond = F.col("field").rlike(f"^(?:{rx})$")
        if api != "*":
            cond = (F.col("api_name") == api) & cond
        value = F.array(*[F.lit(i) for i in ids]).cast("array<string>")
        expr = F.when(cond, value) if expr is None else expr.when(cond, value)
    return expr.otherwise(F.array().cast("array<string>"))


def _annotate(rows: DataFrame, noise: list[dict]) -> DataFrame:
    noisy = [e["api_name"] + KEY_SEP + e["field"] for e in noise]
    learned = F.concat(F.col("api_name"), F.lit(KEY_SEP), F.col("field")).isin(noisy) if noisy else F.lit(False)
    flag = learned | (F.col("field") == f.IDLE_POLL_FIELD)
    out = rows.withColumn("requirement_ids", requirement_ids()).withColumn("noise", flag)
    return out.select(*[F.col(c).cast(_spark_type(c)) for c in f.DIVERGENCE_COLUMNS])


def _spark_type(column: str) -> str:
    return {"api_key": "smallint", "a_error_code": "smallint", "b_error_code": "smallint", "a_seq": "bigint",
            "b_seq": "bigint", "a_connection_id": "bigint", "b_connection_id": "bigint",
            "requirement_ids": "array<string>", "noise": "boolean"}.get(column, "string")


_SAMPLE_FIELDS = ("a_seq", "b_seq", "path", "a_value", "b_value")


def summary_groups(rows: DataFrame) -> list[dict]:
    """The summary groups of diff_pure.group_divergences, with their first samples, in one job."""
    key = list(GROUP_KEY)
    agg = rows.groupBy(*key).agg(F.count(F.lit(1)).alias("count"),
                                 F.countDistinct(F.struct("a_seq", "b_seq")).alias("exchanges"),
                                 F.first("requirement_ids").alias("requirement_ids"))
    order = Window.partitionBy(*key).orderBy(F.coalesce("a_seq", F.lit(-1)), F.coalesce("b_seq", F.lit(-1)), "path")
    firsts = rows.withColumn("_r", F.row_number().over(order)).where(F.col("_r") <= SAMPLES)
    samples = firsts.groupBy(*[F.col(k).alias("s_" + k) for k in key]).agg(
        F.array_sort(F.collect_list(F.struct("_r", *_SAMPLE_FIELDS))).alias("samples"))
    joined = agg.join(samples, [F.col(k).eqNullSafe(F.col("s_" + k)) for k in key], "left")
    out = []
    for r in joined.collect():
        g = {k: r[k] for k in key}
        g.update(count=r["count"], exchanges=r["exchanges"], requirement_ids=list(r["requirement_ids"] or []),
                 samples=[{k: s[k] for k in _SAMPLE_FIELDS} for s in (r["samples"] or [])])
        out.append(g)
    return sort_groups(out)


def prepare(spark: SparkSession, inp: TraceInput, with_json: bool, v3: bool = False) -> DataFrame:
    """A trace's normalized exchanges, checkpointed: both joins read them, and the cut
    lineage keeps the plans of the later jobs small. A compacted trace (`v3`) is one
    narrow projection of its bucketed scan, not checkpointed, so the join sees its buckets."""
    if v3:
        return normalized(load_v3(spark, inp, with_json), with_json)
    keyed = with_alignment_keys(load(spark, inp, with_json)).persist()  # read by the id map and the projection
    out = normalized(keyed, with_json).localCheckpoint()
    keyed.unpersist()
    return out


def run(spark: SparkSession, a_in: TraceInput, b_in: TraceInput, noise_in: TraceInput | None, with_json: bool,
        out_path: str | None = None) -> tuple[DataFrame, dict]:
    """Divergence DataFrame (written to out_path as Parquet when given) and the result dict.

    When every input is compacted (schema 3) the exchanges are joined bucket by bucket."""
    v3 = all(is_v3(x) for x in (a_in, b_in, noise_in) if x is not None)
    if v3:
        for key, value in V3_CONF.items():
            spark.conf.set(key, value)
    a = prepare(spark, a_in, with_json, v3)
    b = prepare(spark, b_in, with_json, v3)
    rows, compared_ab = diff(a, b, with_json)
    noise_table: list[dict] = []
    stats_noise = None
    if noise_in is not None:
        n_rows, n_compared = diff(a, prepare(spark, noise_in, with_json, v3), with_json)
        n_stats = alignment_stats(n_compared)
        noise_table = learn_noise(n_rows, n_stats["pairs_per_api"])
        stats_noise = {k: v for k, v in n_stats.items() if k != "pairs_per_api"}
    rows = _annotate(rows, noise_table).persist()
    if out_path is not None:
        rows.coalesce(1).sortWithinPartitions("kind", F.coalesce("a_seq", F.lit(-1)), F.coalesce("b_seq", F.lit(-1)),
                                               "path").write.mode("overwrite").parquet(out_path)
    stats = alignment_stats(compared_ab)
    if stats_noise is not None:
        stats["noise_alignment"] = stats_noise
    paired = stats["pairs_connection"] + stats["pairs_client"]
    compared = {"a": paired + stats["only_in_a"], "b": paired + stats["only_in_b"]}
    return rows, {"alignment": stats, "noise": noise_table, "groups": summary_groups(rows),
                  "compared_exchanges": compared}
