"""Wiring of the views job: one Spark session, one stateful streaming query per view, and one
stateless query for the records a view cannot count.

Each view's query reads the enriched topic (committed records only), keeps its aggregation in
Spark's RocksDB state store (changelog checkpointing: a batch writes only the rows it changed)
and, per micro-batch, writes every changed row to the view's compacted changelog topic plus a
marker in one Kafka transaction (`kafka_out.TransactionalOutput`). When Spark re-runs a batch
after a crash, its state starts again from the previous batch's version, so the rows come out
the same, and the committed marker keeps them from being written twice.
"""

import logging
import time
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import BooleanType, DataType, DoubleType, IntegerType, LongType, StringType

from enrichment_job.app import batch_ends, build_session, run_id
from enrichment_job.batch_io import collect, kafka_records, to_records
from enrichment_job.kafka_out import Records, TransactionalOutput
from enrichment_job.metrics import Metrics, ProgressListener
from enrichment_job.transforms import dead_letters
from enrichment_job.views.declarations import VIEWS, View
from enrichment_job.views.settings import ViewsSettings
from enrichment_job.views.transforms import parse_enriched

log = logging.getLogger("enrichment_job.views")

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
DLQ_QUERY = "dead-letters"
_TYPES: dict[type[DataType], str] = {
    IntegerType: "int",
    LongType: "long",
    DoubleType: "double",
    StringType: "string",
    BooleanType: "boolean",
}


def column_types(df: DataFrame) -> list[dict[str, str]]:
    """The view's columns as the query service types them (the marker carries them)."""
    return [{"name": f.name, "type": _TYPES.get(type(f.dataType), "string")} for f in df.schema.fields]


def enriched_stream(spark: SparkSession, settings: ViewsSettings) -> DataFrame:
    """The enriched topic, committed records only, parsed (`dlq_reason` null = readable)."""
    raw = (
        spark.readStream.format("kafka")
        .options(**settings.kafka_options())
        .option("subscribe", settings.enriched_topic)
        .option("startingOffsets", settings.starting_offsets)
        .option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
        .load()
    )
    return parse_enriched(raw)


class _Sink:
    """foreachBatch handler: a batch's records plus a marker, in one Kafka transaction."""

    def __init__(self, settings: ViewsSettings, query: str, run: str) -> None:
        self.settings, self.query = settings, query
        self.out = TransactionalOutput(
            settings.producer_config(), f"{settings.name}-{query}", settings.commits_topic, run=run
        )
        self.offsets_dir = settings.checkpoint_dir / query / "offsets"

    def _write(self, batch_id: int, records: Records, marker: dict[str, Any]) -> None:
        if self.out.committed(batch_id):
            log.info("%s: batch %d is already in Kafka; not writing it again", self.query, batch_id)
            return
        ends = batch_ends(self.offsets_dir, batch_id, self.settings.enriched_topic)
        marker = {
            **marker,
            "enriched_to": {str(p): o for p, o in sorted(ends.items())},
            "rows": len(records),
            "written_at_ms": int(time.time() * 1000),
        }
        self.out.write(batch_id, [records], marker)


class ViewSink(_Sink):
    """Writes the rows a batch changed to the view's changelog topic: key = the key columns as
    JSON, value = the whole row as JSON."""

    def __init__(self, settings: ViewsSettings, view: View, run: str) -> None:
        super().__init__(settings, view.name, run)
        self.view = view
        previous = self.out.marker if self.out.committed(0) else None
        self.max_rating_time: int | None = previous.get("max_rating_time") if previous else None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        key = F.to_json(F.struct(*self.view.key))
        value = F.to_json(F.struct(*batch.columns), {"ignoreNullFields": "false"})
        # Run the batch even when it is committed already: that moves the state on.
        table = collect(
            batch.select(key.alias("key"), value.alias("value"), "last_rating_time"),
            extra=("last_rating_time",),
        )
        newest = pc.max(table.column("last_rating_time")).as_py() if table.num_rows else None
        if newest is not None and (self.max_rating_time is None or newest > self.max_rating_time):
            self.max_rating_time = newest
        marker = {
            "view": self.view.name,
            "key": list(self.view.key),
            "columns": column_types(batch),
            "max_rating_time": self.max_rating_time,
        }
        self._write(batch_id, to_records(table, self.settings.topic(self.view.name)), marker)
        if table.num_rows:
            log.info(
                "%s: batch %d: %d rows changed, %.2f s",
                self.view.name,
                batch_id,
                table.num_rows,
                time.monotonic() - started,
            )


class DeadLetterSink(_Sink):
    """Records no view can count, and records one view refuses (the others count them), with
    the reason: original key and bytes, dlq.* headers, stage "views"."""

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        records = kafka_records(
            dead_letters(batch, "views", keep=("partition", "offset")),
            self.settings.dlq_topic,
            ("partition", "offset"),
        )
        self._write(batch_id, records, {"view": None})
        if len(records):
            log.warning("batch %d: %d records to %s", batch_id, len(records), self.settings.dlq_topic)


@dataclass(frozen=True)
class RunningViews:
    spark: SparkSession
    queries: tuple[StreamingQuery, ...]

    def stop(self) -> None:
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        for query in self.queries:
            query.stop()
        self.spark.stop()


def start(settings: ViewsSettings) -> RunningViews:
    """The views job as its own Spark application."""
    spark = build_session(settings, "ratings-views")
    spark.streams.addListener(ProgressListener(Metrics(settings.metrics_file)))
    return RunningViews(spark, start_queries(spark, settings))


def start_queries(spark: SparkSession, settings: ViewsSettings) -> tuple[StreamingQuery, ...]:
    """One query per view and the dead-letter query, in `spark` (its own application, or the
    enrichment job's when ENRICH_VIEWS_IN_JOB is on)."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    run = run_id(settings.checkpoint_dir)
    queries = []
    for view in VIEWS:
        rows = enriched_stream(spark, settings).where(F.col("dlq_reason").isNull())
        if view.refuses is not None:
            rows = rows.where(view.refuses(settings).isNull())
        queries.append(
            view.aggregate(rows, settings)
            .writeStream.queryName(view.name)
            .outputMode("update")
            .foreachBatch(ViewSink(settings, view, run))
            .option("checkpointLocation", str(settings.checkpoint_dir / view.name))
            .trigger(processingTime=settings.trigger_interval)
            .start()
        )
    queries.append(_dead_letter_query(spark, settings, run))
    log.info("views running (run %s): %s", run, ", ".join(settings.topic(v.name) for v in VIEWS))
    return tuple(queries)


def _dead_letter_query(spark: SparkSession, settings: ViewsSettings, run: str) -> StreamingQuery:
    parsed = enriched_stream(spark, settings)
    reason = F.col("dlq_reason")
    for view in VIEWS:
        if view.refuses is not None:
            refused = F.concat(F.lit(f"{view.name}: "), view.refuses(settings))
            reason = F.coalesce(reason, F.when(F.col("dlq_reason").isNull(), refused))
    return (
        parsed.withColumn("dlq_reason", reason)
        .where(F.col("dlq_reason").isNotNull())
        .writeStream.queryName(DLQ_QUERY)
        .foreachBatch(DeadLetterSink(settings, DLQ_QUERY, run))
        .option("checkpointLocation", str(settings.checkpoint_dir / DLQ_QUERY))
        .trigger(processingTime=settings.dlq_trigger_interval)
        .start()
    )
