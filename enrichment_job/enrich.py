"""Ratings of a micro-batch (plus those still waiting) -> the as-of join -> enriched records,
alerts and dead letters, built on the JVM and handed to the driver as Arrow columns.

A rating is released once the CDC watermark has passed rating_time + grace (its join can no
longer change) and every earlier rating of its customer is released (order per customer). The
others wait, on the driver as an Arrow table, and join the next batch. Each batch's Kafka
transaction carries a marker with the watermark it used and, per ratings partition, where the
waiting ratings start and how far the batch read. Since the watermark only grows, "waiting after
batch N" is exactly "the ratings in those offset ranges not releasable at N's watermark": a
restart rebuilds it from Kafka (`recover`), and a re-run of batch N decides as its first run did.
"""

import json
import logging
from dataclasses import dataclass
from functools import cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from enrichment_job.batch_io import to_records
from enrichment_job.kafka_out import Records
from enrichment_job.metrics import Steps
from enrichment_job.schemas import RATING_FIELDS
from enrichment_job.settings import JobSettings
from enrichment_job.transforms import (
    alert_rule,
    as_kafka_records,
    asof_join,
    dead_letters,
    parse_ratings,
    release,
)

log = logging.getLogger("enrichment_job")
ORDER = [("partition", "ascending"), ("offset", "ascending")]
# A waiting rating: its fields and where it came from (its value is not kept: it was parsed).
WAITING = StructType(
    [
        *RATING_FIELDS.fields,
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ]
)
HEADERS = "array<struct<key:string,value:binary>>"


@dataclass(frozen=True)
class RatingsResult:
    enriched: Records
    alerts: Records
    dead: Records
    waiting: pa.Table | None  # WAITING rows, in input order
    waiting_from: dict[int, int]  # partition -> first waiting offset


class Ratings:
    """The ratings side of the pipeline: what waits between batches, and one batch's step."""

    def __init__(self, spark: SparkSession, settings: JobSettings) -> None:
        self.spark = spark
        self.settings = settings
        self.rule = alert_rule(settings.alert_stars_below, settings.alert_club_status)
        self.waiting: pa.Table | None = None

    @property
    def waiting_count(self) -> int:
        return self.waiting.num_rows if self.waiting is not None else 0

    def recover(self, marker: dict[str, Any]) -> None:
        """The ratings waiting after the marker's batch, re-read from the ratings topic."""
        starts = {int(p): int(o) for p, o in marker.get("waiting_from", {}).items()}
        ends = {int(p): int(o) for p, o in marker.get("consumed_to", {}).items()}
        if not starts:
            self.waiting = None
            return
        topic = self.settings.ratings_topic
        raw = (
            self.spark.read.format("kafka")
            .options(**self.settings.kafka_options())
            .option("assign", json.dumps({topic: sorted(starts)}))
            .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in starts.items()}}))
            .option("endingOffsets", json.dumps({topic: {str(p): ends[p] for p in starts}}))
            .load()
        )
        good = parse_ratings(raw).where("dlq_reason IS NULL").drop("dlq_reason")
        flagged = release(good, marker["watermark_ms"], self.settings.grace_ms)
        self.waiting = _waiting(flagged.where("NOT released")).toArrow().sort_by(ORDER)
        log.info("recovered %d waiting ratings after batch %s", self.waiting.num_rows, marker["batch_id"])

    def step(
        self,
        raw: DataFrame,
        versions: tuple[DataFrame, DataFrame | None],
        watermark_ms: int | None,
        steps: Steps | None = None,
    ) -> RatingsResult:
        """`raw`: the batch's rows of the ratings topic; `versions`: the customer table (its
        base and its recent versions, see `CustomerTable.versions`)."""
        settings = self.settings
        parsed = parse_ratings(raw).persist()
        try:
            good = (
                parsed.where("dlq_reason IS NULL")
                .drop("dlq_reason")
                .withColumn("value", F.lit(None).cast("binary"))
            )
            if self.waiting is not None:
                good = good.unionByName(self.spark.createDataFrame(self.waiting, schema=WAITING))
            # Partitioned like the customer table: the release window and the join in place.
            good = good.repartition(settings.shuffle_partitions, "user_id")
            flagged = release(good, watermark_ms, settings.grace_ms).persist()
            try:
                with (steps or Steps())("join"):
                    rows = self._collect(parsed, flagged, versions, watermark_ms)
            finally:
                flagged.unpersist()
        finally:
            parsed.unpersist()
        kind = rows.column("kind")
        enriched = rows.filter(pc.equal(kind, "enriched"))
        waiting = rows.filter(pc.equal(kind, "waiting"))
        starts = waiting.group_by("partition").aggregate([("offset", "min")])
        return RatingsResult(
            enriched=to_records(enriched.select(["key", "value"]), settings.enriched_topic),
            alerts=to_records(
                enriched.filter(pc.fill_null(enriched.column("is_alert"), False)).select(["key", "value"]),
                settings.alerts_topic,
            ),
            dead=to_records(
                rows.filter(pc.equal(kind, "bad")).select(["key", "value", "headers"]), settings.dlq_topic
            ),
            waiting=(
                pa.Table.from_struct_array(waiting.column("rating").combine_chunks())
                if waiting.num_rows
                else None
            ),
            waiting_from=dict(
                zip(
                    (int(p) for p in starts.column("partition").to_pylist()),
                    (int(o) for o in starts.column("offset_min").to_pylist()),
                    strict=True,
                )
            ),
        )

    def _collect(
        self,
        parsed: DataFrame,
        flagged: DataFrame,
        versions: tuple[DataFrame, DataFrame | None],
        watermark_ms: int | None,
    ) -> pa.Table:
        """Enriched records, waiting ratings and dead letters in one Spark job (plus the join's
        broadcasts), as Arrow, sorted by input position."""
        base, recent = versions
        enriched = asof_join(flagged.where("released"), base, self.settings.grace_ms, recent).withColumns(
            {"cdc_watermark_ms": F.lit(watermark_ms), "enriched_ms": F.unix_millis(F.current_timestamp())}
        )
        keyed = as_kafka_records(
            enriched.withColumn("is_alert", F.coalesce(self.rule, F.lit(False))),
            key="user_id",
            keep=("rating_partition", "rating_offset", "is_alert"),
            value_columns=enriched.columns,
        )
        out, waiting, bad = _row_columns()
        return (
            keyed.select(*out)
            .unionByName(flagged.where("NOT released").select(*waiting))
            .unionByName(
                dead_letters(
                    parsed.where("dlq_reason IS NOT NULL"), "enrichment", keep=("partition", "offset")
                ).select(*bad)
            )
            .toArrow()
            .sort_by(ORDER)
        )


@cache
def _row_columns() -> tuple[tuple[Column, ...], ...]:
    """The one result of a step: enriched records, waiting ratings and dead letters as rows of
    the same shape (kind, partition, offset, key, value, headers, is_alert, rating)."""
    none: dict[str, Column] = {
        "key": F.lit(None).cast("binary"),
        "value": F.lit(None).cast("binary"),
        "headers": F.lit(None).cast(HEADERS),
        "is_alert": F.lit(None).cast("boolean"),
        "rating": F.lit(None).cast(WAITING),
    }
    enriched = (
        F.lit("enriched").alias("kind"),
        F.col("rating_partition").alias("partition"),
        F.col("rating_offset").alias("offset"),
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        none["headers"].alias("headers"),
        F.col("is_alert"),
        none["rating"].alias("rating"),
    )
    waiting = (
        F.lit("waiting").alias("kind"),
        F.col("partition"),
        F.col("offset"),
        none["key"].alias("key"),
        none["value"].alias("value"),
        none["headers"].alias("headers"),
        none["is_alert"].alias("is_alert"),
        F.struct(*WAITING.names).cast(WAITING).alias("rating"),  # nullable fields, for Arrow
    )
    bad = (
        F.lit("bad").alias("kind"),
        F.col("partition"),
        F.col("offset"),
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        F.col("headers"),
        none["is_alert"].alias("is_alert"),
        none["rating"].alias("rating"),
    )
    return enriched, waiting, bad


def _waiting(flagged: DataFrame) -> DataFrame:
    return flagged.select(*WAITING.names)
