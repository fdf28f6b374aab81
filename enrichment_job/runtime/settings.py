"""What the two Spark jobs' settings share, declared once: Kafka's address and the clients'
extra options, the state folder (a local path, or a file:// or s3a:// URI), the metrics, and the
Spark session's. Each job's settings subclass it with their own prefix (ENRICH_, VIEWS_JOB_),
their own fields, and their own defaults where they differ (the state folder, the trigger)."""

from pathlib import Path

from pydantic import Field, field_validator

from enrichment_job.runtime.state_dir import ObjectStoreSettings, StateDir, check_uri, metrics_path
from foundation.settings import Settings

__all__ = ["SparkJobSettings"]


class SparkJobSettings(Settings, ObjectStoreSettings):
    # Kafka
    bootstrap_servers: str = "127.0.0.1:9092"
    kafka_extra: dict[str, str] = Field(
        default_factory=dict,
        description="extra options of the job's own producers and consumers (librdkafka's names), JSON",
    )
    spark_kafka_extra: dict[str, str] = Field(
        default_factory=dict,
        description="extra options of Spark's Kafka source (the Java client's names), JSON",
    )
    # Spark's Kafka source reads each partition's range with a consumer kept between batches,
    # which can have a fetch in flight that the broker holds open until new records come or
    # this wait ends (Kafka's default: 500 ms). Where records stop coming (the end of a burst),
    # the read tasks of the last batches each idled out that hold, and those batches took that
    # much longer. A short hold costs an empty fetch per wait while a task reads.
    source_fetch_max_wait_ms: int = Field(20, ge=0, description="fetch.max.wait.ms of Spark's Kafka source")

    # State and figures
    state_dir: str = Field(
        ".state/job",
        validate_default=True,
        description="the checkpoints and the job's state: a local path (relative: to the working"
        " directory at start), or a file:// or s3a://<bucket>/<prefix> URI",
    )
    dead_letter_store: str = Field(
        "",
        description="where a dead letter too large for Kafka keeps its bytes (the claim-check): its"
        " record in the dead-letter topic says where (dlq.value.location). A local path, or a file://"
        " or s3a://<bucket>/<prefix> URI (the S3 settings); empty: the dead-letters folder of the"
        " state folder. On a cluster every executor must reach it",
    )
    dead_letter_store_timeout_s: float = Field(
        300,
        gt=0,
        description="how long a batch retries writing to the dead-letter store before the job stops"
        " with the store's error (nothing of the batch is committed; a restart writes it again)",
    )
    dead_letter_store_retention_ms: int = Field(
        0,
        ge=-1,
        description="how long the dead-letter store keeps a dead letter's bytes. 0: as long as the"
        " dead-letter topic may keep the record that points at them (its retention.ms plus segment.ms"
        " and an hour, read from the broker; for ever when retention.ms is -1 or cannot be read);"
        " -1: for ever; more: that many ms (bytes may then go before their dead letter)",
    )
    metrics_file: Path | None = Field(
        None,
        description="JSON file of the job's figures, rewritten each batch (default: metrics.json in "
        "a local state folder; none for state in S3)",
    )
    metrics_port: int = Field(
        0, ge=0, le=65535, description="serve Prometheus metrics at http://<host>:<port>/metrics (0: off)"
    )
    metrics_host: str = Field("127.0.0.1", description="address of the Prometheus endpoint")

    # Spark
    master: str = "local[2]"
    spark_jars: str = Field("", description="comma-separated jars (the stack's SPARK_JARS)")
    shuffle_partitions: int = Field(2, gt=0, description="spark.sql.shuffle.partitions")
    driver_memory: str = "2g"
    driver_java_options: str = Field(
        "-XX:+UseParallelGC",
        description="spark.driver.extraJavaOptions (only with python -m); -XX:TieredStopAtLevel=1 is "
        "added unless they choose a JIT, where the driver JVM runs no task that handles records (a "
        "cluster's master; the enrichment job's join on the driver)",
    )
    class_archive_dir: str = Field(
        "~/.cache/ratings-enrichment",
        description="keep the driver JVM's class data sharing archive here: the first clean stop "
        "writes it, later starts map it and start faster (empty: off)",
    )
    ui_enabled: bool = Field(True, description="Spark's web UI (its kill links off)")
    executor_python: str = Field(
        "",
        description="the interpreter the executors' Python workers run (PYSPARK_PYTHON): on a cluster,"
        " one every executor has, with the product's dependencies (the job ships its own code; the"
        " local stack's SPARK_EXECUTOR_PYTHON); empty: the driver's own",
    )

    @field_validator("state_dir", mode="before")
    @classmethod
    def _location(cls, value: object) -> str:
        if not isinstance(value, str | Path):
            raise ValueError(f"a path or URI, not {value!r}")
        return check_uri(str(value))

    @field_validator("dead_letter_store", mode="before")
    @classmethod
    def _store(cls, value: object) -> str:
        if not isinstance(value, str):
            raise ValueError(f"a path or URI, not {value!r}")
        return check_uri(value) if value else ""

    @property
    def state(self) -> StateDir:
        return StateDir(self.state_dir, self)

    @property
    def driver_handles_records(self) -> bool:
        """Whether, in local mode, the driver JVM runs Spark tasks that handle records (and so
        keeps the optimising compiler): a Spark job's does."""
        return True

    @property
    def dead_letters(self) -> StateDir:
        """Where dead letters too large for Kafka keep their bytes."""
        return StateDir(self.dead_letter_store or self.state.child("dead-letters"), self)

    @property
    def dead_letter_store_setting(self) -> str:
        """The variable that sets `dead_letter_store`, with this job's prefix (for messages)."""
        return f"{self.model_config.get('env_prefix', '')}DEAD_LETTER_STORE"

    @property
    def metrics_path(self) -> Path | None:
        return metrics_path(self.metrics_file, self.state)

    def kafka_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source ("kafka." + the client's own dotted names): committed
        records only, as every topic the jobs read is written in transactions (a rating of an
        aborted producer transaction is never enriched, nor counted)."""
        return {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "kafka.isolation.level": "read_committed",
            "kafka.fetch.max.wait.ms": str(self.source_fetch_max_wait_ms),
        } | {f"kafka.{k}": v for k, v in self.spark_kafka_extra.items()}

    def producer_config(self) -> dict[str, str]:
        """librdkafka settings of the job's own transactional producers."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka_extra}
