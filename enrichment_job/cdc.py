"""Query 1: Debezium change events -> customer versions (Delta), the compacted `customers`
topic, the CDC watermark, and dead letters for events the job cannot read."""

import logging
import time

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from enrichment_job.batch_io import kafka_records
from enrichment_job.kafka_out import TransactionalOutput
from enrichment_job.metrics import Metrics, Steps
from enrichment_job.settings import JobSettings
from enrichment_job.table import CustomerTable
from enrichment_job.transforms import dead_letters, parse_cdc, to_versions

log = logging.getLogger("enrichment_job")


class CdcIngestion:
    """foreachBatch handler; idempotent per batch id, so a re-run after a crash changes nothing."""

    def __init__(
        self,
        settings: JobSettings,
        table: CustomerTable,
        out: TransactionalOutput,
        app_id: str,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.table = table
        self.out = out
        self.app_id = app_id
        self.metrics = metrics

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started, steps = time.monotonic(), Steps()
        events = parse_cdc(batch).persist()
        try:
            good = events.where("dlq_reason IS NULL AND NOT is_tombstone")
            customers = good.where(F.col("source.table") == "customers")
            with steps("read"):
                stats = self._stats(events)
            # 1. The table and the watermark, in one Delta commit (the watermark alone: in memory).
            versions = to_versions(customers) if stats["changes"] else None
            with steps("table"):
                self.table.advance(versions, stats["watermark"], self.app_id, batch_id)
            # 2. Kafka, once: every change to `customers` in CDC order (tombstone on delete), dead
            #    letters. A batch of heartbeats only has nothing to write.
            if (stats["changes"] or stats["bad"]) and not self.out.committed(batch_id):
                with steps("kafka"):
                    self._write_kafka(events, customers, batch_id)
        finally:
            events.unpersist()
        self.metrics.cdc_batch(
            batch_id,
            stats["changes"],
            stats["bad"],
            self.table.state.watermark_ms,
            time.monotonic() - started,
            steps=steps,
        )
        if batch_id and batch_id % self.settings.maintenance_every_batches == 0:
            self.table.maintain()

    @staticmethod
    def _stats(events: DataFrame) -> Row:
        stats = events.agg(
            F.max(F.when(F.col("dlq_reason").isNull(), F.col("source.ts_ms"))).alias("watermark"),
            F.count_if(F.col("dlq_reason").isNotNull()).alias("bad"),
            F.count_if(
                F.col("dlq_reason").isNull() & ~F.col("is_tombstone") & (F.col("source.table") == "customers")
            ).alias("changes"),
        ).first()
        assert stats is not None
        return stats

    def _write_kafka(self, events: DataFrame, customers: DataFrame, batch_id: int) -> None:
        rows = customers.select(
            F.col("customer_id").cast("string").alias("key"),
            F.when(F.col("op") == "d", F.lit(None)).otherwise(F.to_json(F.col("after"))).alias("value"),
            "partition",
            "offset",
        )
        self.out.write(
            batch_id,
            [
                kafka_records(rows, self.settings.customers_topic, ("partition", "offset")),
                kafka_records(
                    dead_letters(events.where("dlq_reason IS NOT NULL"), "cdc"), self.settings.dlq_topic
                ),
            ],
            {"watermark_ms": self.table.state.watermark_ms},
        )
