"""Wiring: the Spark session, the two streaming queries, their checkpoints and outputs."""

import logging
import uuid
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from enrichment_job.cdc import CdcIngestion
from enrichment_job.enrich import TICK_TOPIC, Enrichment
from enrichment_job.kafka_out import TransactionalOutput
from enrichment_job.metrics import Metrics, ProgressListener
from enrichment_job.settings import JobSettings
from enrichment_job.table import CustomerTable

log = logging.getLogger("enrichment_job")


def build_session(settings: JobSettings) -> SparkSession:
    builder = (
        SparkSession.builder.appName("ratings-enrichment")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.ui.enabled", str(settings.ui_enabled).lower())
    )
    if settings.master:
        builder = builder.master(settings.master)
    if settings.spark_jars:
        builder = builder.config("spark.jars", settings.spark_jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run_id(checkpoint_dir: Path) -> str:
    """Identifies this checkpoint's run: a new checkpoint is a new run with its own markers."""
    path = checkpoint_dir / "run_id"
    if not path.exists():
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(uuid.uuid4().hex[:16])
    return path.read_text().strip()


def _kafka_stream(spark: SparkSession, settings: JobSettings, topic: str) -> DataFrame:
    return (
        spark.readStream.format("kafka")
        .options(**settings.kafka_options())
        .option("subscribe", topic)
        .option("startingOffsets", settings.starting_offsets)
        .option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
        .load()
        .select("key", "value", "topic", "partition", "offset", "timestamp")
    )


def _ticks(spark: SparkSession) -> DataFrame:
    """One empty row per micro-batch, so waiting ratings are released while no new rating comes."""
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 1)
        .load()
        .select(
            F.lit(None).cast("binary").alias("key"),
            F.lit(None).cast("binary").alias("value"),
            F.lit(TICK_TOPIC).alias("topic"),
            F.lit(-1).alias("partition"),
            F.col("value").alias("offset"),
            F.col("timestamp"),
        )
    )


def start(settings: JobSettings) -> tuple[SparkSession, list[StreamingQuery]]:
    spark = build_session(settings)
    metrics = Metrics(settings.metrics_file)
    spark.streams.addListener(ProgressListener(metrics))
    run = run_id(settings.checkpoint_dir)
    table = CustomerTable(spark, str(settings.table_path), settings.shuffle_partitions)
    producer = settings.producer_config()
    cdc_out = TransactionalOutput(producer, f"enrichment-{run}-cdc", settings.commits_topic)
    enrich_out = TransactionalOutput(producer, f"enrichment-{run}-ratings", settings.commits_topic)

    cdc = (
        _kafka_stream(spark, settings, settings.cdc_topic)
        .writeStream.queryName("cdc")
        .foreachBatch(CdcIngestion(settings, table, cdc_out, f"{run}-cdc", metrics))
        .option("checkpointLocation", str(settings.checkpoint_dir / "cdc"))
        .trigger(processingTime=settings.trigger_interval)
        .start()
    )
    ratings = _kafka_stream(spark, settings, settings.ratings_topic).unionByName(_ticks(spark))
    enrichment = (
        ratings.writeStream.queryName("enrichment")
        .foreachBatch(Enrichment(spark, settings, table, enrich_out, metrics))
        .option("checkpointLocation", str(settings.checkpoint_dir / "enrichment"))
        .trigger(processingTime=settings.trigger_interval)
        .start()
    )
    log.info("enrichment job running (run %s); metrics in %s", run, settings.metrics_file)
    return spark, [cdc, enrichment]
