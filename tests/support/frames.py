"""Spark frames in unit tests, shaped as Spark's Kafka source gives them."""

from pyspark.sql import DataFrame, SparkSession


def kafka_rows(spark: SparkSession, values: list[bytes | None]) -> DataFrame:
    """Records of one partition of a topic "enriched", key b"k", offsets from 0."""
    rows = [(b"k", v, "enriched", 0, i, None) for i, v in enumerate(values)]
    return spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
