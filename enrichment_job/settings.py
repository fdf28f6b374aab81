"""Settings of the enrichment job: read once at start, frozen.

From the environment with the prefix ENRICH_ (ENRICH_GRACE_MS=5000), or from a file named by
ENRICH_ENV_FILE (lines NAME=value, the same names). A bad value stops the job with a message
that names the setting.
"""

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from enrichment_job.runtime.intervals import Interval, interval_ms
from enrichment_job.runtime.settings import SparkJobSettings

__all__ = ["TABLE", "JobSettings"]

TABLE = "customer_versions"  # the customer table, in the state folder


class JobSettings(SparkJobSettings):
    model_config = SettingsConfigDict(env_prefix="ENRICH_")

    # Kafka
    ratings_topic: str = "ratings"
    cdc_topic: str = "asgard.demo.customers"
    customers_topic: str = "customers"
    enriched_topic: str = "ratings-with-customer-data"
    alerts_topic: str = "unhappy-platinum-customers"
    dlq_topic: str = "enrichment-dlq"
    commits_topic: str = Field(
        "enrichment-commits",
        description="compacted: the marker of the last batch the job committed (exactly once)",
    )
    job_name: str = Field(
        "enrichment",
        pattern=r"^[A-Za-z0-9._-]{1,200}$",
        description="the job's identity in Kafka: its transactional id and the key of its commit "
        "markers. An instance started later under the same name fences the earlier one, whatever "
        "its state folder or host; one name per set of input and output topics",
    )
    starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest",
        description="where a job name's very first run starts reading ratings (the customer table "
        "is always read from the CDC topic's beginning); later runs go on from its last commit",
    )
    join_in: Literal["auto", "driver", "tasks"] = Field(
        "auto",
        description="where the join runs: tasks (a Spark task per ratings partition on the executors, "
        "each writing its output and marker in its own Kafka transaction; the driver folds the CDC "
        "only), driver (the driver reads, joins and writes every rating), or auto: tasks with a "
        "cluster's master, the driver in local mode (one machine's cores, where the driver's join is "
        "the quicker). Once a job name ran in tasks it stays there (auto follows it)",
    )
    min_executors: int = Field(
        0,
        ge=0,
        description="with the join in tasks: the executors to wait for (up to 120 s) before the "
        "first batch, so that its partitions spread over all of them rather than move as the "
        "later ones register; 0 does not wait (nor does local mode, whose driver runs every task)",
    )
    max_offsets_per_trigger: int = Field(
        200_000, gt=0, description="records per micro-batch, both topics (the first batch: a quarter)"
    )
    max_batch_bytes: int = Field(
        67_108_864,
        ge=1_000_000,
        description="bytes of ratings (keys and values) a micro-batch reads at most, with the join on "
        "the driver (in tasks: each partition's task its share); the rest stays in Kafka for the next "
        "batches. The same bounds each read of CDC events. ENRICH_MAX_OFFSETS_PER_TRIGGER counts records: "
        "200,000 ratings near the size limit would not fit in memory. A record larger than this alone is "
        "still read, on its own",
    )
    accept_partial_cdc_history: bool = Field(
        False,
        description="a fresh state (no CDC offsets yet) on a CDC topic whose head was deleted: false stops"
        " the job (it would not know the customers created there); true reads what is left, logged",
    )
    accept_deleted_ratings: bool = Field(
        False,
        description="ratings deleted from Kafka before the job read them (retention, delete-records):"
        " false stops the job with the partitions and offsets lost; true reads on after them, logged",
    )

    state_dir: str = Field(
        ".state/enrichment",
        validate_default=True,
        description="the checkpoints and the customer table: a local path (relative: to the working"
        " directory at start), or a file:// or s3a://<bucket>/<prefix> URI (ENRICH_S3_*)",
    )

    # Join and alert rule
    grace_ms: int = Field(
        5_000, ge=0, description="a rating may join a customer row created this long after it"
    )
    max_future_ms: int = Field(
        300_000,
        ge=0,
        le=10 * 365 * 86_400_000,
        description="a rating_time further ahead of its Kafka record's timestamp, or of the job's "
        "clock when that is earlier (a producer sets CreateTime), goes to the DLQ",
    )
    max_waiting_ratings: int = Field(
        500_000,
        gt=0,
        description="ratings held in memory waiting for the CDC watermark; at this many, new "
        "ratings stay in Kafka until fewer wait (memory: about this plus one batch)",
    )
    max_waiting_bytes: int = Field(
        268_435_456,
        ge=1_000_000,
        description="bytes of ratings held in memory waiting for the CDC watermark (their fields as "
        "the join holds them); at this many, as at ENRICH_MAX_WAITING_RATINGS, new ratings stay in "
        "Kafka until fewer wait: a few large ratings held back count as what they weigh",
    )
    max_rating_bytes: int = Field(
        900_000,
        ge=1_000,
        le=100_000_000,
        description="a rating value larger than this goes to the DLQ (its bytes in "
        "ENRICH_DEAD_LETTER_STORE), as its enriched copy would be over Kafka's record limit, and so "
        "does a rating whose enriched record (with its customer's columns) is larger; keep it some kB under "
        "the producers' message.max.bytes and the topics' max.message.bytes",
    )
    alert_stars_below: int = Field(3, ge=1, le=6)
    alert_club_status: Literal["bronze", "silver", "gold", "platinum"] = "platinum"

    release_wait_ms: int = Field(
        250,
        ge=0,
        le=60_000,
        description="after its commit, a batch whose ratings wait only for the CDC clock (they came "
        "after the newest heartbeat it read) waits up to this long from its start for the heartbeat "
        "that releases them, and writes them in a second transaction instead of a trigger later; "
        "0: they wait for the next batch. At most half the trigger interval is used: the rest is "
        "the next batch's",
    )

    # Spark
    trigger_interval: Interval = Field(
        "500 milliseconds",
        description="how often a batch starts (Spark's processingTime trigger), e.g. '1 second'",
    )
    table_commit_interval_s: float = Field(
        30,
        ge=0,
        description="append new customer versions to Delta at most this often (each append adds a file)",
    )
    maintenance_every_commits: int = Field(
        100, gt=0, description="compact and vacuum the table every this many Delta appends"
    )

    views_in_job: bool = Field(
        False, description="also run the materialized views' queries in this application (VIEWS_JOB_*)"
    )

    @property
    def driver_handles_records(self) -> bool:
        """The join on the driver (`auto` in local mode) runs no Spark task over the ratings: the
        driver JVM only plans the query, and the Python side reads, joins and writes. The join in
        tasks, or the views in this application, run tasks over records in a local driver's JVM.
        (`auto` goes to tasks in local mode only after a commit in tasks, which the JVM's start
        does not know yet: such a run's JVM compiles with C1 alone, which is slower, not wrong.)"""
        return self.join_in == "tasks" or self.views_in_job

    @property
    def release_wait_s(self) -> float:
        """How long a batch waits for the heartbeat that releases its waiting ratings, counted
        from its start: ENRICH_RELEASE_WAIT_MS, at most half the trigger interval (a longer
        wait would make every batch late for the next trigger)."""
        return min(self.release_wait_ms, interval_ms(self.trigger_interval) // 2) / 1000
