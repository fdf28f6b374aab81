"""Settings of the views job: read once at start, frozen.

From the environment with the prefix VIEWS_JOB_ (VIEWS_JOB_TRIGGER_INTERVAL=1 second), or from a
file named by VIEWS_JOB_ENV_FILE (lines NAME=value, the same names). A bad value stops the job
with a message that names the setting.
"""

from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from enrichment_job.runtime.intervals import Interval
from enrichment_job.runtime.settings import SparkJobSettings
from foundation.errors import ConfigError

__all__ = ["BACKGROUND", "DLQ_STAGE", "KEYED_QUERY", "ViewsSettings"]

KEYED_QUERY = "views"  # the query of the views without an event time
BACKGROUND = "background"  # in VIEWS_JOB_QUERIES: every query but KEYED_QUERY
DLQ_STAGE = "views"  # dlq.stage of the views' dead letters, and their claim-check folder


class ViewsSettings(SparkJobSettings):
    model_config = SettingsConfigDict(env_prefix="VIEWS_JOB_")

    # Kafka
    enriched_topic: str = Field("ratings-with-customer-data", description="enriched ratings in")
    topic_prefix: str = Field("view.", description="a view's changelog topic is this prefix + its name")
    commits_topic: str = Field("views-commits", description="compacted: each view's last committed batch")
    dlq_topic: str = Field("views-dlq", description="records a view cannot count, with the reason")
    catalog_topic: str = Field(
        "views-catalog",
        description="compacted: the views declared in SQL, which the job keeps beside the built-in ones"
        " (created when the first view is; empty: none)",
    )
    name: str = Field(
        "views",
        pattern=r"^[A-Za-z0-9._-]+$",
        description="the job's name: its transactional ids are <name>-<query> (views, view-segment_hourly)",
    )
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: int = Field(200_000, gt=0, description="enriched records per micro-batch")
    max_batch_bytes: int = Field(
        134_217_728,
        ge=1_000_000,
        description="the changed rows' keys and values a batch takes to the driver at once: a batch"
        " whose rows weigh more is taken and written in slices of at most this (the rows of a key"
        " in one slice), in the same transaction. A row keeps what its groups keep (a last message"
        " of up to 1 MB), whatever the rating that changed it",
    )

    # The views
    unhappy_stars_below: int = Field(3, ge=1, le=6, description="a rating is unhappy when stars < this")
    window_lateness_s: int = Field(
        3600,
        ge=0,
        description="segment_hourly: an hour's window closes this long after the hour ends",
    )
    max_key_bytes: int = Field(
        1024,
        ge=64,
        le=65_536,
        description="a rating whose row key in a view (its group columns as text) is longer is not"
        " counted in that view but dead-lettered: the key stands twice in a changelog record",
    )

    state_dir: str = Field(
        ".state/views",
        validate_default=True,
        description="the checkpoints and the views' state: a local path (relative: to the working"
        " directory at start), or a file:// or s3a://<bucket>/<prefix> URI (VIEWS_JOB_S3_*)",
    )

    # Spark
    trigger_interval: Interval = Field(
        "1 second", description="trigger of the query of the views without an event time (customer_ratings)"
    )
    sql_trigger_interval: Interval = Field(
        "2 seconds",
        description="trigger of each view declared in SQL whose file gives none (`-- trigger:`): a"
        " query's batch has a fixed cost, about a tenth of a core at a batch a second here; ksqlDB"
        " commits a persistent query every 2 s by default",
    )
    windowed_trigger_interval: Interval = Field(
        "5 seconds",
        description="trigger of each view with an event time (segment_hourly), a query of its own",
    )
    background_min_partitions: int = Field(
        16,
        ge=0,
        description="Spark tasks a batch, at least, of the windowed views' queries (0: one per topic"
        " partition); short tasks let a customer_ratings batch have a task slot sooner",
    )
    queries: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_,. -]*$",
        description="the queries this process runs, comma-separated (empty: all): views (the views"
        " without an event time), view-<name> (each view with one), or background (every query but"
        " views). Two processes with different state folders may share them out",
    )
    background_process: bool = Field(
        False,
        description="run every query but views (the windowed views, which find the dead letters) in a second"
        " process of its own, started and stopped with this one, with its state in <state dir>/"
        "background and a lower CPU weight (VIEWS_JOB_BACKGROUND_NICE); only with python -m",
    )
    background_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="the second process's nice with VIEWS_JOB_BACKGROUND_PROCESS (of its session too,"
        " where Linux groups processes by session)",
    )
    shuffle_partitions: int = Field(
        1,
        gt=0,
        description="state partitions of the views query (customer_ratings), fixed at a checkpoint's first"
        " start: each is a task a batch, and a task's fixed cost outweighs its share of the records",
    )
    source_tasks: int = Field(
        1,
        ge=0,
        description="Spark tasks that parse a batch of the views query (customer_ratings) and of each view"
        " declared in SQL (0: one per topic partition)",
    )
    windowed_shuffle_partitions: int = Field(
        2,
        gt=0,
        description="state partitions of each windowed view's query, fixed at a checkpoint's first start",
    )
    driver_memory: str = Field(
        "1g",
        pattern=r"^\s*\d+\s*([kKmMgGtT][bB]?)?\s*$",
        description="spark.driver.memory (only with python -m): a JVM size, 1g, 1536m (no unit: MiB)",
    )
    ui_enabled: bool = False
    nice: int = Field(
        0,
        ge=0,
        le=19,
        description="lowers the CPU priority (nice) of the job's process and its Spark JVM, only with"
        " python -m: on a host shared with the enrichment job, enrichment gets the CPU first",
    )

    @model_validator(mode="after")
    def _batch_fits_the_driver(self) -> "ViewsSettings":
        """A collect of VIEWS_JOB_MAX_BATCH_BYTES is an Arrow buffer in the driver JVM's direct
        memory (its heap's size), grown by doubling: with a bound over the memory, a backlog of
        large rows stopped the job (Arrow out of direct memory) as it did with no bound at all
        (`make bench-views-memory ARGS="--max-batch-bytes 2147483648"` before this check)."""
        memory = _jvm_bytes(self.driver_memory)
        if self.max_batch_bytes > memory // 4:
            raise ValueError(
                f"VIEWS_JOB_MAX_BATCH_BYTES ({self.max_batch_bytes}) must be at most a quarter of"
                f" VIEWS_JOB_DRIVER_MEMORY ({self.driver_memory}: {memory // 4} bytes): a batch's"
                " collect grows its buffer by doubling in the driver's direct memory; raise"
                " VIEWS_JOB_DRIVER_MEMORY with it"
            )
        return self

    @model_validator(mode="after")
    def _one_way_to_split(self) -> "ViewsSettings":
        if self.background_process and self.queries.strip():
            raise ValueError(
                "VIEWS_JOB_BACKGROUND_PROCESS shares the queries out itself: leave VIEWS_JOB_QUERIES empty"
            )
        return self

    def chosen_queries(self, known: tuple[str, ...]) -> tuple[str, ...]:
        """The queries of `known` this process runs; an unknown name is a settings error."""
        if not self.queries.strip():
            return known
        names = (q.strip() for q in self.queries.split(",") if q.strip())
        expanded = (
            q
            for name in names
            for q in ([k for k in known if k != KEYED_QUERY] if name == BACKGROUND else [name])
        )
        chosen = tuple(dict.fromkeys(expanded))
        if unknown := [q for q in chosen if q not in known]:
            raise ConfigError(
                f"VIEWS_JOB_QUERIES: unknown {', '.join(unknown)} (the queries: {', '.join(known)})"
            )
        return chosen

    def keeps_sql_views(self) -> bool:
        """Whether this process keeps the views declared in SQL: with a catalog, in the process
        that keeps customer_ratings."""
        names = [q.strip() for q in self.queries.split(",") if q.strip()]
        return bool(self.catalog_topic) and (not names or KEYED_QUERY in names)

    def sql_trigger(self, declared: str | None) -> str:
        """The trigger of a view declared in SQL: its file's `-- trigger:`, else the default."""
        return declared or self.sql_trigger_interval

    def topic(self, view: str) -> str:
        return f"{self.topic_prefix}{view}"


_JVM_UNITS = {"": 2**20, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}  # no unit: MiB, as Spark's


def _jvm_bytes(text: str) -> int:
    """A JVM size as spark.driver.memory reads it (`1g`, `1536m`, `1024`: MiB), in bytes."""
    value = text.strip().lower().removesuffix("b")
    digits = value.rstrip("kmgt")
    return int(digits) * _JVM_UNITS[value[len(digits) :]]
