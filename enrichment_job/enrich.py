"""Query 2: ratings (plus those still waiting) -> the as-of join -> enriched records, alerts and
dead letters, exactly once.

A rating is released once the CDC watermark has passed rating_time + grace (its join can no
longer change) and every earlier rating of its customer is released (order per customer). The
others wait, in memory (a locally checkpointed DataFrame). Each batch's Kafka transaction ends
with a marker holding the watermark it used and, per ratings partition, where the waiting
ratings start and how far the batch read. Since the watermark only grows, "waiting after batch
N" is exactly "the ratings in those offset ranges not releasable at N's watermark": a restart
rebuilds it from Kafka, and a re-run of batch N decides exactly as its first run did.
"""

import json
import logging
import time
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from enrichment_job.batch_io import collect, kafka_records, to_records
from enrichment_job.kafka_out import TransactionalOutput
from enrichment_job.metrics import Metrics, Steps
from enrichment_job.settings import JobSettings
from enrichment_job.table import CustomerTable
from enrichment_job.transforms import (
    alert_rule,
    as_kafka_records,
    asof_join,
    dead_letters,
    parse_ratings,
    release,
)

log = logging.getLogger("enrichment_job")
TICK_TOPIC = "__tick"
ORDER = ("rating_partition", "rating_offset")


class Enrichment:
    def __init__(
        self,
        spark: SparkSession,
        settings: JobSettings,
        table: CustomerTable,
        out: TransactionalOutput,
        metrics: Metrics,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.table = table
        self.out = out
        self.metrics = metrics
        self.consumed_to: dict[int, int] = {}
        self.waiting: DataFrame | None = None
        if out.marker is not None:
            self._recover(out.marker)

    def _recover(self, marker: dict[str, Any]) -> None:
        """The waiting ratings after the marker's batch, re-read from the ratings topic."""
        self.consumed_to = {int(p): int(o) for p, o in marker["consumed_to"].items()}
        starts = {int(p): int(o) for p, o in marker["waiting_from"].items()}
        if not starts:
            self.waiting = None
            return
        topic = self.settings.ratings_topic
        raw = (
            self.spark.read.format("kafka")
            .options(**self.settings.kafka_options())
            .option("assign", json.dumps({topic: sorted(starts)}))
            .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in starts.items()}}))
            .option("endingOffsets", json.dumps({topic: {str(p): self.consumed_to[p] for p in starts}}))
            .load()
        )
        good = parse_ratings(raw).where("dlq_reason IS NULL").drop("dlq_reason")
        flagged = release(good, marker["watermark_ms"], self.settings.grace_ms)
        self.waiting = flagged.where("NOT released").drop("released").localCheckpoint()
        log.info("recovered %d waiting ratings after batch %s", self.waiting.count(), marker["batch_id"])

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self.out.committed(batch_id):
            log.info("enrichment batch %d is already in Kafka; not writing it again", batch_id)
            return
        started, steps = time.monotonic(), Steps()
        with steps("table"):
            table, state = self.table.snapshot()
        watermark = state.watermark_ms
        parsed = parse_ratings(batch.where(F.col("topic") != TICK_TOPIC)).persist()
        good = parsed.where("dlq_reason IS NULL").drop("dlq_reason")
        if self.waiting is not None:
            good = good.unionByName(self.waiting)
        flagged = release(good, watermark, self.settings.grace_ms).persist()
        try:
            # 1. What this batch read and what stays waiting (where it starts in each partition,
            #    for the marker): one Spark job.
            with steps("waiting"):
                read_stats = parsed.groupBy("partition").agg(
                    F.lit("read").alias("kind"),
                    F.max("offset").alias("offset"),
                    F.count("*").alias("n"),
                    F.count_if(F.col("dlq_reason").isNotNull()).alias("bad"),
                )
                left_stats = (
                    flagged.where("NOT released")
                    .groupBy("partition")
                    .agg(
                        F.lit("left").alias("kind"),
                        F.min("offset").alias("offset"),
                        F.count("*").alias("n"),
                        F.lit(0).cast("long").alias("bad"),
                    )
                )
                stats = read_stats.unionByName(left_stats).collect()
                read = [(r["partition"], r["offset"], r["n"], r["bad"]) for r in stats if r["kind"] == "read"]
                left = [(r["partition"], r["offset"], r["n"]) for r in stats if r["kind"] == "left"]
                if not read and self.waiting is None:
                    # Nothing new and nothing waiting: no output, and the last marker still holds.
                    idle = {"enriched": 0, "alerts": 0, "dlq": 0, "waiting": 0, "new": 0}
                    self.metrics.enrich_batch(batch_id, idle, watermark, time.monotonic() - started, steps)
                    return
                still = flagged.where("NOT released").drop("released").localCheckpoint() if left else None
                waiting_from = {r[0]: r[1] for r in left}
                read_to = {r[0]: r[1] + 1 for r in read}
            consumed_to = {**self.consumed_to, **read_to}
            # 2. Enriched records, alerts and dead letters, built on the JVM, in input order.
            enriched = asof_join(flagged.where("released"), table, self.settings.grace_ms).withColumns(
                {
                    "cdc_watermark_ms": F.lit(watermark),
                    "enriched_ms": F.unix_millis(F.current_timestamp()),
                }
            )
            rule = alert_rule(self.settings.alert_stars_below, self.settings.alert_club_status)
            with steps("join+collect"):
                # One Spark job for both topics: the alert flag comes along with each record.
                records = collect(_keyed(enriched, rule), ORDER, extra=("is_alert",))
                outputs = [
                    to_records(records, self.settings.enriched_topic),
                    to_records(records.filter(records.column("is_alert")), self.settings.alerts_topic),
                ]
            if any(r[3] for r in read):
                bad = dead_letters(parsed.where("dlq_reason IS NOT NULL"), "enrichment")
                outputs.append(kafka_records(bad, self.settings.dlq_topic))
            counts = {"enriched": len(outputs[0]), "alerts": len(outputs[1]), "dlq": sum(r[3] for r in read)}
            counts |= {"waiting": sum(r[2] for r in left), "new": sum(r[2] for r in read)}
            # 3. One transaction: the outputs and the marker that makes a re-run a no-op.
            marker = {
                "watermark_ms": watermark,
                "waiting_from": waiting_from,
                "consumed_to": consumed_to,
                **counts,
            }
            with steps("kafka"):
                self.out.write(batch_id, outputs, marker)
            self.waiting, self.consumed_to = still, consumed_to
        finally:
            flagged.unpersist()
            parsed.unpersist()
        self.metrics.enrich_batch(batch_id, counts, watermark, time.monotonic() - started, steps)


def _keyed(enriched: DataFrame, rule: Column) -> DataFrame:
    """Keyed JSON records that keep the input position, so the driver writes them in order, and
    whether each one raises an alert (the flag is not part of the record)."""
    flagged = enriched.withColumn("is_alert", F.coalesce(rule, F.lit(False)))
    return as_kafka_records(flagged, key="user_id", keep=(*ORDER, "is_alert"), value_columns=enriched.columns)
