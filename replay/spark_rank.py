"""Row numbers within a group that scale with the group, not with one task.

`row_number().over(Window.partitionBy(g).orderBy(o))` sends every row of a group to one
task. The diff numbers things per category (every producer id of a trace in order of first
appearance, every connection of a client): at 10M exchanges one such group held 8.5M rows
in one task of two cores' local mode, and the 10M diff died of OutOfMemoryError.

Here the rows are range-partitioned on (group, order) — as many tasks as the data needs,
each holding a contiguous slice of the global order — and numbered inside their partition;
one small aggregate (a row per group and partition it spans: about as many rows as there
are groups and partitions, collected) gives every partition the count of its group's rows
in the partitions before it. Same numbers as
the window: 1-based, in `order`, ties broken by the order columns only (callers pass a
total order).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

_ID_BITS = 33  # monotonically_increasing_id(): partition index above bit 33, row index below


def number_within(df: DataFrame, group: Sequence[str], order: Sequence[str], name: str) -> DataFrame:
    """`df` with column `name`: the row's 1-based position in `order` among the rows with
    its `group` values."""
    keys = [*group, *order]
    numbered = (df.repartitionByRange(*keys).sortWithinPartitions(*keys)
                .withColumn("_mid", F.monotonically_increasing_id())
                .localCheckpoint())  # the ids are fixed once: the count and the join read the same rows
    part, local = F.shiftright("_mid", _ID_BITS), F.col("_mid").bitwiseAND((1 << _ID_BITS) - 1)
    spans = numbered.groupBy(part.alias("_part"), *group).agg(
        F.count(F.lit(1)).alias("_rows"), F.min(local).alias("_first")).collect()
    before: dict[tuple, int] = defaultdict(int)  # group -> rows of it in earlier partitions
    bases = []
    for r in sorted(spans, key=lambda r: r["_part"]):
        g = tuple(r[c] for c in group)
        bases.append((r["_part"], *g, before[g] - r["_first"] + 1))
        before[g] += r["_rows"]
    fields = [T.StructField("_b" + c, df.schema[c].dataType) for c in group]
    schema = T.StructType([T.StructField("_part", T.LongType(), False), *fields, T.StructField("_base", T.LongType())])
    base_df = F.broadcast(df.sparkSession.createDataFrame(bases, schema))
    same = [F.col("_part") == F.col("_bpart")] + [F.col(c).eqNullSafe(F.col("_b" + c)) for c in group]
    joined = numbered.withColumn("_part", part).join(base_df.withColumnRenamed("_part", "_bpart"),
                                                     _all(same))
    return joined.withColumn(name, F.col("_base") + local).drop("_mid", "_part", "_bpart", "_base",
                                                                *["_b" + c for c in group])


def _all(conditions: list[Column]) -> Column:
    out = conditions[0]
    for c in conditions[1:]:
        out = out & c
    return out
