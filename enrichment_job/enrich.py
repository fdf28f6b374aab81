"""Ratings of a micro-batch (plus those still waiting) -> the as-of join -> enriched records,
alerts and dead letters, built on the JVM and handed to the driver as Arrow columns.

A rating is released once its join can no longer change (the CDC watermark has passed its
rating_time and a version valid then was found, or has passed rating_time + grace) and every
earlier rating of its customer is released (order per customer); see `transforms.release`. The
others wait, on the driver as an Arrow table, and join the next batch. Each batch's Kafka
transaction carries a marker with the watermark it used and, per ratings partition, where the
waiting ratings start and how far the batch read. The watermark only grows and the table only
gains versions, so "waiting after batch N" is exactly "the ratings in those offset ranges not
releasable at N's watermark against N's table": a restart, whose table is N's (see
`CustomerTable.catch_up`), rebuilds it from Kafka (`recover`), and a re-run of batch N decides
as its first run did.
"""

import json
import logging
import time
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
from enrichment_job.plans import Columns, select
from enrichment_job.schemas import RATING_FIELDS
from enrichment_job.settings import JobSettings
from enrichment_job.transforms import (
    alert_rule,
    asof_join,
    dead_letter_headers,
    parse_ratings,
    release,
    with_batch_values,
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


@dataclass(frozen=True)
class RatingsResult:
    enriched: Records
    alerts: Records
    dead: Records
    waiting: pa.Table | None  # WAITING rows, in input order
    waiting_from: dict[int, int]  # partition -> first waiting offset
    new: int  # ratings of the batch (the rest had waited)


class Ratings:
    """The ratings side of the pipeline: what waits between batches, and one batch's step."""

    def __init__(self, spark: SparkSession, settings: JobSettings) -> None:
        self.spark = spark
        self.settings = settings
        self.rule = alert_rule(settings.alert_stars_below, settings.alert_club_status)
        self.waiting: pa.Table | None = None
        self._rows: Columns | None = None  # the step's output columns, built once

    def _parse(self, raw: DataFrame) -> DataFrame:
        return parse_ratings(raw, self.settings.max_future_ms, self.settings.max_rating_bytes)

    @property
    def waiting_count(self) -> int:
        return self.waiting.num_rows if self.waiting is not None else 0

    def recover(self, marker: dict[str, Any], versions: tuple[DataFrame, DataFrame | None]) -> None:
        """The ratings waiting after the marker's batch, re-read from the ratings topic and
        decided again against `versions`, the customer table as that batch had it."""
        starts = {int(p): int(o) for p, o in marker.get("waiting_from", {}).items()}
        ends = {int(p): int(o) for p, o in marker.get("consumed_to", {}).items()}
        self.waiting = None
        if not starts:
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
        parsed = select(self._parse(raw), _flow_columns())
        readable = parsed.where("dlq_reason IS NULL")
        rows = self._collect(readable, versions, marker["watermark_ms"])
        self.waiting = _waiting(rows)
        log.info(
            "recovered %d waiting ratings after batch %s",
            self.waiting.num_rows if self.waiting is not None else 0,
            marker["batch_id"],
        )

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
        waited = self.waiting_count
        parsed = select(self._parse(raw), _flow_columns())
        if self.waiting is not None:
            parsed = parsed.unionByName(
                self.spark.createDataFrame(self.waiting, schema=WAITING).withColumn(
                    "dlq_reason", F.lit(None).cast("string")
                )
            )
        with (steps or Steps())("join"):
            rows = self._collect(parsed, versions, watermark_ms)
        kind = rows.column("kind")
        enriched = rows.filter(pc.equal(kind, "enriched"))
        starts = rows.filter(pc.equal(kind, "waiting")).group_by("partition").aggregate([("offset", "min")])
        return RatingsResult(
            enriched=to_records(enriched.select(["key", "value"]), settings.enriched_topic),
            alerts=to_records(
                enriched.filter(pc.fill_null(enriched.column("is_alert"), False)).select(["key", "value"]),
                settings.alerts_topic,
            ),
            dead=to_records(
                rows.filter(pc.equal(kind, "bad")).select(["key", "value", "headers"]), settings.dlq_topic
            ),
            waiting=_waiting(rows),
            waiting_from=dict(
                zip(
                    (int(p) for p in starts.column("partition").to_pylist()),
                    (int(o) for o in starts.column("offset_min").to_pylist()),
                    strict=True,
                )
            ),
            new=rows.num_rows - waited,  # a row out for each rating in
        )

    def _collect(
        self, ratings: DataFrame, versions: tuple[DataFrame, DataFrame | None], watermark_ms: int | None
    ) -> pa.Table:
        """Enriched records, waiting ratings and dead letters in one Spark job (plus the
        broadcast of the recent versions), as Arrow, sorted by input position.

        Every row takes the same path, so no intermediate result is cached or read twice: the
        join and the aggregation find nothing for a dead letter (its user_id is null) and are
        not used for a waiting rating; the last projection says which of the three a row is."""
        base, recent = versions
        grace_ms = self.settings.grace_ms
        # Partitioned like the customer table: the join, the aggregation per rating and the
        # release window per customer all run in place.
        flowing = ratings.repartition(self.settings.shuffle_partitions, "user_id")
        joined = with_batch_values(
            asof_join(flowing, base, grace_ms, recent, carry=CARRIED),
            cdc_watermark_ms=watermark_ms,
            enriched_ms=time.time_ns() // 1_000_000,
        )
        joined = release(joined, grace_ms)
        if self._rows is None:  # the same every batch
            in_value = tuple(c for c in joined.columns if c not in (*CARRIED, *DECIDED))
            self._rows = _row_columns(in_value, self.rule, self.settings.max_rating_bytes)
        return select(joined, self._rows).toArrow().sort_by(ORDER)


# What a rating carries through the join besides its fields: its origin, and for a dead letter
# its original bytes and reason.
CARRIED = ("key", "value", "topic", "dlq_reason")
# How the step decided a rating's fate: not part of the enriched record.
DECIDED = ("settled", "released")


@cache
def _flow_columns() -> Columns:
    """A parsed rating as it enters the step: a dead letter keeps its original value and has no
    user_id (it joins nothing and holds back no customer's ratings) and no rating_time (the
    join's arithmetic never sees a value that made it a dead letter); a readable rating drops
    its value (it was parsed)."""
    bad = F.col("dlq_reason").isNotNull()
    cleared = ("user_id", "rating_time")
    return Columns(
        *[F.when(~bad, F.col(n)).alias(n) if n in cleared else F.col(n) for n in RATING_FIELDS.names],
        F.col("key"),
        F.when(bad, F.col("value")).alias("value"),
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp"),
        F.col("dlq_reason"),
    )


def _row_columns(in_value: tuple[str, ...], rule: Column, max_bytes: int) -> Columns:
    """The one result of a step, a row per rating: kind (enriched, waiting or bad), partition,
    offset, key, value, headers, is_alert, rating (the WAITING fields of a waiting rating).

    A dead letter keeps the rating's bytes, unless they are over `max_bytes`: with its headers
    it might not fit in a Kafka record, so it goes without, and its headers say where the
    rating is (topic, partition, offset) and why it is there."""
    bad = F.col("dlq_reason").isNotNull()
    enriched = ~bad & F.col("released")
    waiting = ~bad & ~F.col("released")
    as_waiting = F.struct(
        *RATING_FIELDS.names,
        "key",
        "value",
        "topic",
        F.col("rating_partition").alias("partition"),
        F.col("rating_offset").alias("offset"),
        F.col("rating_kafka_ts").alias("timestamp"),
    ).cast(WAITING)  # nullable fields, for Arrow
    value = F.to_json(F.struct(*[F.col(c) for c in in_value]), {"ignoreNullFields": "false"})
    headers = dead_letter_headers("enrichment", "rating_partition", "rating_offset")
    return Columns(
        F.when(bad, "bad").when(enriched, "enriched").otherwise("waiting").alias("kind"),
        F.col("rating_partition").alias("partition"),
        F.col("rating_offset").alias("offset"),
        F.when(bad, F.col("key")).when(enriched, F.col("user_id").cast("string").cast("binary")).alias("key"),
        # Nulls stay in the record (an unmatched rating says club_status: null, not nothing).
        F.when(bad & (F.length("value") <= max_bytes), F.col("value"))
        .when(enriched, value.cast("binary"))
        .alias("value"),
        F.when(bad, headers).alias("headers"),
        F.when(enriched, F.coalesce(rule, F.lit(False))).alias("is_alert"),
        F.when(waiting, as_waiting).alias("rating"),
    )


def _waiting(rows: pa.Table) -> pa.Table | None:
    """The WAITING rows among a step's rows, in input order; None when there are none."""
    waiting = rows.filter(pc.equal(rows.column("kind"), "waiting"))
    return pa.Table.from_struct_array(waiting.column("rating").combine_chunks()) if waiting.num_rows else None
