"""From a micro-batch's DataFrames to the records a transactional producer writes.

Spark builds every key and value (JSON) on the JVM; the driver receives them as Arrow columns
and only hands the bytes to the producer."""

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from enrichment_job.kafka.transactions import Records

__all__ = ["collect", "concat", "kafka_records", "to_records"]


def concat(tables: list[pa.Table]) -> pa.Table:
    """The tables one after the other, as one chunk. PySpark's createDataFrame stops reading an
    Arrow table at its first empty chunk (PySpark 4.0.0): the rows after it would be lost."""
    return pa.concat_tables(tables).combine_chunks()


def collect(df: DataFrame, order_by: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> pa.Table:
    """One Spark job: `df`'s key, value (and headers), `order_by` and `extra` columns as Arrow,
    sorted by `order_by`. `df` has columns key and value (string or binary; value null =
    tombstone) and optionally headers (array<struct<key string, value binary>>)."""
    columns = [F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value")]
    if "headers" in df.columns:
        columns.append(F.col("headers"))
    table = df.select(*columns, *order_by, *extra).toArrow()
    return table.sort_by([(name, "ascending") for name in order_by]) if order_by else table


def to_records(table: pa.Table, topic: str) -> Records:
    headers = None
    if "headers" in table.column_names:
        headers = [
            [(h["key"], h["value"]) for h in row] if row is not None else None
            for row in table.column("headers").to_pylist()
        ]
    return Records(topic, table.column("key").to_pylist(), table.column("value").to_pylist(), headers)


def kafka_records(df: DataFrame, topic: str, order_by: tuple[str, ...] = ()) -> Records:
    return to_records(collect(df, order_by), topic)
