"""Wiring: the Spark session, the streaming query, its checkpoint, outputs and customer table."""

import json
import logging
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from enrichment_job.cdc import CdcReader, CdcResult, Prefetch, fill_unavailable, ingest
from enrichment_job.enrich import Ratings
from enrichment_job.jvm import ClassArchive, class_archive
from enrichment_job.kafka_in import KAFKA, TopicReader
from enrichment_job.kafka_out import Fenced, TransactionalOutput
from enrichment_job.metrics import JobCollector, Metrics, ProgressListener, Steps
from enrichment_job.settings import JobSettings
from enrichment_job.table import CdcState, CustomerTable
from enrichment_job.transforms import KAFKA_META
from services.core.logs import log_format
from services.core.prometheus import MetricsServer, serve

if TYPE_CHECKING:
    from enrichment_job.views.settings import ViewsSettings

log = logging.getLogger("enrichment_job")

# Spark 4.1 moved it into the `checkpointing` package (4.0: org.apache.spark.sql.execution.streaming).
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
SCHEDULER_POOLS = Path(__file__).with_name("scheduler_pools.xml")
LOG4J_CONFIG = "log4j2.configurationFile"


class SparkSettings(Protocol):
    """What the session needs of a job's settings (the enrichment job's and the views job's)."""

    @property
    def shuffle_partitions(self) -> int: ...
    @property
    def driver_memory(self) -> str: ...
    @property
    def driver_java_options(self) -> str: ...
    @property
    def ui_enabled(self) -> bool: ...
    @property
    def master(self) -> str: ...
    @property
    def spark_jars(self) -> str: ...
    @property
    def class_archive_dir(self) -> str: ...


def driver_archive(settings: SparkSettings, app_name: str) -> ClassArchive | None:
    """The class archive the driver JVM maps, or writes at a clean stop; None when off."""
    # Only a JVM the job starts itself takes the options (not one spark-submit started).
    if not settings.class_archive_dir or "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    directory = Path(settings.class_archive_dir).expanduser()
    archive = class_archive(directory, app_name, settings.spark_jars, settings.driver_java_options)
    log.info("driver class archive: %s", archive.path if archive.writing is None else "written at the stop")
    return archive


def build_session(
    settings: SparkSettings, app_name: str = "ratings-enrichment", archive: ClassArchive | None = None
) -> SparkSession:
    java_options = _java_options(settings.driver_java_options)
    if archive is not None:
        java_options = f"{java_options} {archive.java_options}".strip()
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        # Delta rebuilds its table state with 50 tasks by default: on a small machine that made
        # each append of a few versions cost about 2 s of CPU beside the stream, 0.6 s this way.
        .config("spark.databricks.delta.snapshotPartitions", str(settings.shuffle_partitions))
        # Micro-batches are small and planned anew each time: adaptive re-planning per stage
        # costs more than it saves here.
        .config("spark.sql.adaptive.enabled", "false")
        # Every batch runs the same plans: their generated classes are kept, not compiled again
        # (a batch uses a few dozen; with the default 100 they evicted each other).
        .config("spark.sql.codegen.cache.maxEntries", "1000")
        # No join broadcasts a side it did not ask to broadcast, whatever its size.
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        # Background Spark jobs (Delta appends; see table.py) take a task slot only
        # when no micro-batch task waits for one. Under FIFO a Delta append's job, once
        # submitted, took every free slot before the next batch's tasks.
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.scheduler.allocation.file", str(SCHEDULER_POOLS))
        .config("spark.driver.memory", settings.driver_memory)
        # In local mode the driver JVM runs the tasks too. G1's concurrent marking cost about
        # 10 % of a core at 5,000 ratings/s here; the parallel collector's young collections of
        # short-lived batch data cost a quarter of that, with pauses well under a batch.
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.ui.enabled", str(settings.ui_enabled).lower())
        # The UI shows the job's settings and data; its kill links would stop a query by a click.
        .config("spark.ui.killEnabled", "false")
        # Each batch writes two small checkpoint files (offsets, commit) into the local state
        # folder. Spark's default manager (Hadoop FileContext) forks `readlink` four times and
        # `chmod` twice per file where Hadoop's native library is absent, as it is on a pip
        # install: 33 ms a file here, on the query thread. Renames through the FileSystem API
        # are plain Java: 11 ms a file, 7 ms without the .crc side file (see below).
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_FILE_MANAGER)
    )
    if settings.master:
        builder = builder.master(settings.master)
    if settings.master.startswith("local"):
        # Spark binds its UI and the driver to SPARK_LOCAL_IP, to every interface without it.
        # On one machine nothing needs more than the loopback; set SPARK_LOCAL_IP to open it.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if settings.spark_jars:
        builder = builder.config("spark.jars", settings.spark_jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _skip_driver_checksums(spark)
    return spark


def _java_options(options: str) -> str:
    """The driver's JVM options; with LOG_FORMAT=json its log4j writes Spark's own JSON lines
    (its structured logging layout), like the job's Python side. The layout is chosen as the
    JVM starts, so it takes effect where the job starts the JVM (python -m); under
    spark-submit, log4j's configuration is the cluster's."""
    if log_format() != "json":
        return options
    return f"{options} -D{LOG4J_CONFIG}=org/apache/spark/log4j2-json-layout.properties".strip()


def _skip_driver_checksums(spark: SparkSession) -> None:
    """The driver's local file system writes no .crc beside the files it writes (checkpoint
    offsets and commits, the customer table's log): one `chmod` fork less per file.

    It stays Hadoop's checksummed LocalFileSystem, the instance FileSystem.get caches for this
    user, with checksums turned off. Swapping in RawLocalFileSystem for the `file` scheme instead
    broke the RocksDB state store, which copies its snapshots through FileSystem.getLocal and
    casts what it gets to LocalFileSystem: every snapshot upload failed, so the store's changelog
    grew without end and a restart replayed all of it. Tasks and any other instance keep
    writing checksums, as they do by default."""
    jvm: Any = spark.sparkContext._jvm
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    local.setWriteChecksum(False)


def query_checkpoint(settings: JobSettings) -> Path:
    """The streaming query's checkpoint folder."""
    return settings.checkpoint_dir / "pipeline"


def batch_ends(offsets_dir: Path, batch_id: int, topic: str) -> dict[int, int]:
    """partition -> the offset where the batch's records of `topic` end, from the query's offset
    log (its file for the batch: a version line, a metadata line, then a line per source).
    Empty when the topic is not in the batch (it does not exist yet)."""
    path = offsets_dir / str(batch_id)
    try:
        lines = path.read_text().splitlines()
        if not lines or lines[0] != "v1":
            raise ValueError(f"not an offset log file of a known version: {lines[:1]}")
        for line in lines[2:]:
            if line == "-":  # a source without offsets
                continue
            ends = json.loads(line).get(topic)
            if ends is not None:
                return {int(p): int(o) for p, o in ends.items()}
    except (OSError, ValueError) as err:
        raise RuntimeError(f"cannot read batch {batch_id}'s offsets from {path}: {err}") from err
    return {}


def run_id(checkpoint_dir: Path) -> str:
    """Identifies this checkpoint's run: a new checkpoint is a new run with its own markers."""
    path = checkpoint_dir / "run_id"
    if not path.exists():
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(uuid.uuid4().hex[:16])
    return path.read_text().strip()


class TopicsChanged(ValueError):
    """The job name's last commit was made reading other topics: a name per set of topics."""


def claim_state(settings: JobSettings, marker: dict[str, Any] | None) -> str:
    """This state folder's run id, once the folder is known to continue the job's last commit.

    The job's last commit (`marker`, by job name) may come from another run: another state
    folder or host, or this folder before it was wiped. That run's commit is the truth. A fresh
    folder starts from it; a folder whose checkpoint and customer table stopped before it is out
    of date, and is rebuilt the same way (a re-run of its batches would write them twice)."""
    run = run_id(settings.checkpoint_dir)
    if marker is not None and marker.get("run") == run and not query_checkpoint(settings).exists():
        # The query's checkpoint was deleted under a run that committed: its batch ids would
        # start again at 0 and be taken for batches already written. A new run it is.
        (settings.checkpoint_dir / "run_id").unlink()
        run = run_id(settings.checkpoint_dir)
    if marker is None or marker.get("run") == run:
        return run
    for name, topic in (("ratings_topic", settings.ratings_topic), ("cdc_topic", settings.cdc_topic)):
        if marker.get(name, topic) != topic:
            raise TopicsChanged(
                f"setting ENRICH_JOB_NAME: job {settings.job_name!r} last committed reading "
                f"{name} {marker[name]!r}, not {topic!r}; give a job over other topics its own name"
            )
    stale = [p for p in (query_checkpoint(settings), settings.table_path) if p.exists()]
    if stale:
        log.warning(
            "job %s was last committed by another run (%s, batch %s), not by this state folder's (%s): "
            "its checkpoint and customer table are out of date; rebuilding them from the last commit",
            settings.job_name,
            marker.get("run"),
            marker.get("batch_id"),
            run,
        )
        shutil.rmtree(settings.checkpoint_dir)
        shutil.rmtree(settings.table_path, ignore_errors=True)
    else:
        log.info(
            "a fresh state folder: job %s goes on from its last commit (run %s, batch %s)",
            settings.job_name,
            marker.get("run"),
            marker.get("batch_id"),
        )
    return run_id(settings.checkpoint_dir)


def starting_offsets(
    settings: JobSettings,
    marker: dict[str, Any] | None,
    ratings: dict[int, tuple[int, int]],
    cdc_partitions: list[int],
) -> dict[str, dict[str, int]]:
    """Where the query starts when its checkpoint is new (Spark ignores it otherwise): the job's
    first run at ENRICH_STARTING_OFFSETS, a later one where the job's last commit left both
    topics (partitions it never read from their start). `ratings`: partition -> its first and
    next offset now. The ratings' offsets are numbers, never "earliest" or "latest": the job
    reads each batch's ratings itself, from where the batch before ended, and the first batch
    from here."""
    earliest = settings.starting_offsets == "earliest"
    if marker is None:
        ratings_from = {p: low if earliest else high for p, (low, high) in ratings.items()}
        cdc_from = {p: -2 if earliest else -1 for p in cdc_partitions}
    else:
        consumed = {int(p): int(o) for p, o in marker.get("consumed_to", {}).items()}
        cdc_to = {int(p): int(o) for p, o in marker.get("cdc_to", {}).items()}
        ratings_from = {p: consumed.get(p, low) for p, (low, _) in ratings.items()}
        cdc_from = {p: cdc_to.get(p, -2) for p in cdc_partitions}  # -2: Spark's "earliest"
    return {
        settings.ratings_topic: {str(p): o for p, o in sorted(ratings_from.items())},
        settings.cdc_topic: {str(p): o for p, o in sorted(cdc_from.items())},
    }


class Pipeline:
    """foreachBatch handler of the one streaming query, which reads the CDC topic and the ratings
    topic together. Per micro-batch: CDC first (new versions, the watermark), then the ratings
    released by that watermark, then one Kafka transaction with every output and the marker
    that makes a re-run of the batch a no-op. The Delta table follows asynchronously.

    The CDC events come from a read of the CDC topic from where the last committed batch left
    it (the marker's `cdc_to`) to its end as the batch starts, not from the micro-batch's own CDC
    rows: Spark fixes both topics' end offsets at the same instant, so the heartbeat that
    covers the batch's last ratings is not in it yet, and those ratings would wait a whole
    batch. Read a moment later, it is. The query still subscribes to the CDC topic, so that
    heartbeats start batches while no ratings come."""

    def __init__(
        self,
        spark: SparkSession,
        settings: JobSettings,
        table: CustomerTable,
        out: TransactionalOutput,
        metrics: Metrics,
        *,
        group_id: str,
        prefetch: Prefetch | None = None,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.table = table
        self.out = out
        self.metrics = metrics
        self.ratings = Ratings(spark, settings)
        self.stopping = threading.Event()  # the job is stopping: a failing batch was cancelled
        self.fenced: Fenced | None = None  # another instance took over: stop, do not restart
        self.cdc = prefetch.reader if prefetch is not None else CdcReader(settings, group_id)
        self.ratings_in = TopicReader(settings, settings.ratings_topic, group_id)
        self.first_starts: dict[int, int] = {}  # where the query's first batch's ratings start
        self.offsets_dir = query_checkpoint(settings) / "offsets"
        marker = out.marker
        self.state = CdcState.from_json(marker) if marker else table.delta_state
        self.prefetch = prefetch if prefetch is not None and prefetch.state == self.state else None
        self.consumed_to, self.waiting_from = (
            {int(p): int(o) for p, o in (marker or {}).get(name, {}).items()}
            for name in ("consumed_to", "waiting_from")
        )
        if marker is not None:
            own = marker.get("run") == out.run
            self._catch_up_table(int(marker["batch_id"]) if own else None)
            self.ratings.recover(marker, self.table.versions(), self.ratings_in.read)

    def query_start(self) -> str:
        """The query's starting offsets (JSON), kept beside its checkpoint: a first batch run
        again after a crash reads its ratings from where its first run did."""
        path = self.settings.checkpoint_dir / "query-start.json"
        if query_checkpoint(self.settings).exists() and path.exists():
            starting = json.loads(path.read_text())
        else:
            cdc_partitions = self.ratings_in.partitions(self.settings.cdc_topic)  # the CDC reader may be busy
            starting = starting_offsets(
                self.settings, self.out.marker, self.ratings_in.bounds(), cdc_partitions
            )
            path.write_text(json.dumps(starting))
        ratings = starting.get(self.settings.ratings_topic, {})
        self.first_starts = {int(p): int(o) for p, o in ratings.items()}
        return json.dumps(starting)

    def _catch_up_table(self, batch_id: int | None) -> None:
        """Appends to Delta what Kafka has committed but the table has not (see table.py).
        Told by CDC offsets, not batch ids: the commit may be another run's (`batch_id` None),
        whose batch ids mean nothing to this table."""
        since, until = self.table.delta_state, self.state
        if all(since.cdc_to.get(p, -1) >= o for p, o in until.cdc_to.items()):
            return
        topic = self.settings.cdc_topic
        starts = {str(p): since.cdc_to.get(p, -2) for p in until.cdc_to}  # -2: earliest
        ends = {str(p): o for p, o in until.cdc_to.items()}
        if not ends:
            return
        raw = (
            self.spark.read.format("kafka")
            .options(**self.settings.kafka_options())
            .option("assign", json.dumps({topic: sorted(until.cdc_to)}))
            .option("startingOffsets", json.dumps({topic: starts}))
            .option("endingOffsets", json.dumps({topic: ends}))
            .load()
            .select(*KAFKA_META)
            .toArrow()
        )
        result = ingest(raw, since, self.settings.customers_topic, self.settings.dlq_topic, self.spark)
        if result.state.clock_ms != until.clock_ms:
            log.warning(
                "re-read CDC ends at clock %s, the marker says %s", result.state.clock_ms, until.clock_ms
            )
        result = fill_unavailable(result, self.table.versions())
        self.table.catch_up(batch_id, result.versions, until)
        log.info(
            "customer table caught up with batch %s: %d versions re-read from the CDC topic",
            batch_id if batch_id is not None else "(another run's)",
            result.changes,
        )

    def _cdc_events(self, state: CdcState, until: dict[int, int] | None = None) -> pa.Table:
        """The CDC topic from `state`'s offsets to its end now (or to `until`), as Kafka columns."""
        return self.cdc.read(self.cdc.ranges(state.cdc_to, until))

    def _prefetched(self) -> CdcResult | None:
        """The first batch's start of the CDC topic, when it was read ahead (`Prefetch`)."""
        prefetch, self.prefetch = self.prefetch, None
        taken = prefetch.take() if prefetch is not None else None
        if taken is None:
            return None
        raw, events = taken
        settings = self.settings
        return ingest(
            raw, self.state, settings.customers_topic, settings.dlq_topic, self.spark, events=events
        )

    def _cdc_catch_up(self, batch_id: int, cdc: CdcResult) -> CdcResult:
        """When the limit per read left CDC records that were in the topic as the batch
        started (a fresh job on a long CDC topic, or after a long stop), the batch reads on to
        them, one limited read after the other, before any rating is decided. Otherwise ratings
        would pile up waiting, batch after batch, for a watermark that moves one read a batch."""
        target = dict(self.cdc.short)
        if not target:
            return cdc
        while self.cdc.short:
            more = ingest(
                self._cdc_events(cdc.state, until=target),
                cdc.state,
                self.settings.customers_topic,
                self.settings.dlq_topic,
                self.spark,
            )
            cdc = cdc.then(more)
            left = sum(max(0, end - cdc.state.cdc_to.get(p, end)) for p, end in target.items())
            log.info(
                "batch %d: catching up with the CDC topic: %d events read, %d left",
                batch_id,
                cdc.events,
                left,
            )
        return cdc

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        try:
            self._run(batch, batch_id)
        except Fenced as err:
            self.fenced = err
            raise
        except Exception:
            if not self.stopping.is_set():
                raise
            # Cancelled by the stop. Spark tells that from a real failure by matching the error
            # text against a pattern that recurses once per character: the full traceback (the
            # JVM's stack in it) overflows the stream thread's stack. A short text of the form
            # it looks for lets the query end as stopped.
            raise InterruptedError(
                "py4j.protocol.Py4JJavaError: An error occurred while calling foreachBatch: "
                f"java.lang.InterruptedException: batch {batch_id} cancelled by the stop"
            ) from None

    def _ratings_input(self, batch_id: int, ends: dict[int, int]) -> tuple[pa.Table, dict[int, int]]:
        """The ratings this batch takes in (Kafka columns), and where they end per partition
        (`consumed_to`). Read from Kafka on the driver, like the CDC events: the micro-batch's
        rows only tell where the batch ends.

        Waiting ratings are held in memory. At ENRICH_MAX_WAITING_RATINGS (the CDC watermark
        stalled: Connect down, a failed Debezium task) the batch takes no new ones: they stay
        in Kafka, and `consumed_to` stays where it was. Once fewer wait, the batches read what
        was left, from `consumed_to` on, at most a batch's worth at a time, before the stream's
        own ratings. The same covers a restart with ratings left behind."""
        if self.ratings.waiting_count >= self.settings.max_waiting_ratings:
            return KAFKA.empty_table(), dict(self.consumed_to)
        topic = self.settings.ratings_topic
        starts = batch_ends(self.offsets_dir, batch_id - 1, topic) if batch_id > 0 else self.first_starts
        new = [p for p in ends if p not in self.consumed_to and p not in starts]
        lows = {p: low for p, (low, _) in self.ratings_in.bounds().items() if p in new} if new else {}
        froms = {p: self.consumed_to.get(p, starts.get(p, lows.get(p, 0))) for p in ends}
        upto = dict(ends)
        left = sum(max(0, starts.get(p, o) - o) for p, o in froms.items())
        if left:
            share = max(1, self.settings.max_offsets_per_trigger // max(1, len(ends)))
            upto = {p: min(end, froms[p] + share) for p, end in ends.items()}
            log.info("batch %d: reading %d ratings left in Kafka earlier", batch_id, left)
        ranges = {p: (froms[p], upto[p]) for p in ends if upto[p] > froms[p]}
        return self.ratings_in.read(ranges), {**self.consumed_to, **upto}

    def _run(self, batch: DataFrame, batch_id: int) -> None:
        if self.out.committed(batch_id):
            log.info("batch %d is already in Kafka; not writing it again", batch_id)
            return
        started, steps = time.monotonic(), Steps()
        settings = self.settings
        # Where this batch's ratings end, per partition: Spark wrote it before calling us.
        ends = batch_ends(self.offsets_dir, batch_id, settings.ratings_topic)
        with steps("cdc"):
            cdc = self._prefetched()
            more = ingest(
                self._cdc_events(cdc.state if cdc is not None else self.state),
                cdc.state if cdc is not None else self.state,
                settings.customers_topic,
                settings.dlq_topic,
                self.spark,
            )
            cdc = cdc.then(more) if cdc is not None else more
            cdc = fill_unavailable(self._cdc_catch_up(batch_id, cdc), self.table.versions())
        if cdc.changes:  # the join below needs them: the watermark counts them in
            with steps("table"):
                self.table.add(cdc.versions)
        watermark = cdc.state.clock_ms
        outputs = [cdc.customers, cdc.dead]
        result = None
        with steps("read"):
            ratings_raw, consumed_to = self._ratings_input(batch_id, ends)
        # Waiting ratings are decided again when the CDC side moved (a heartbeat, a change):
        # without it, nothing about them can have changed.
        if consumed_to != self.consumed_to or (self.ratings.waiting_count and cdc.events):
            with steps("ratings"):
                result = self.ratings.step(ratings_raw, self.table.versions(), watermark, steps)
            outputs += [result.enriched, result.alerts, result.dead]
        deferred = sum(max(0, end - consumed_to.get(p, end)) for p, end in ends.items())
        if deferred:
            log.warning(
                "batch %d: %d ratings left in Kafka for later: %d are waiting for the CDC watermark "
                "(ENRICH_MAX_WAITING_RATINGS %d)",
                batch_id,
                deferred,
                self.ratings.waiting_count,
                settings.max_waiting_ratings,
            )
        waiting_from = result.waiting_from if result is not None else self.waiting_from
        counts = {
            "new": result.new if result else 0,
            "enriched": len(result.enriched) if result else 0,
            "alerts": len(result.alerts) if result else 0,
            "dlq": len(cdc.dead) + (len(result.dead) if result else 0),
            "waiting": self.ratings.waiting_count if result is None else _rows(result.waiting),
            "cdc_events": cdc.events,
            "changes": cdc.changes,
            "duplicates": cdc.duplicates,
            "deferred": deferred,
        }
        marker = {
            "ratings_topic": settings.ratings_topic,
            "cdc_topic": settings.cdc_topic,
            **cdc.state.as_json(),
            "waiting_from": waiting_from,
            "consumed_to": consumed_to,
            **counts,
        }
        with steps("kafka"):
            self.out.write(batch_id, outputs, marker)
        # Committed: now the state moves on, and the table keeps the new versions.
        self.state, self.consumed_to, self.waiting_from = cdc.state, consumed_to, waiting_from
        if result is not None:
            self.ratings.waiting = result.waiting
        if cdc.changes:
            self.table.commit(batch_id, cdc.versions, cdc.state)
        self.metrics.batch(batch_id, counts, watermark, time.monotonic() - started, steps)


def _rows(table: "pa.Table | None") -> int:
    return 0 if table is None else table.num_rows


def _kafka_stream(spark: SparkSession, settings: JobSettings, starting: str) -> DataFrame:
    return (
        spark.readStream.format("kafka")
        .options(**settings.kafka_options())
        .option("subscribe", f"{settings.cdc_topic},{settings.ratings_topic}")
        .option("startingOffsets", starting)
        .option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
        .load()
        .select("key", "value", "topic", "partition", "offset", "timestamp")
    )


@dataclass(frozen=True)
class RunningJob:
    spark: SparkSession
    query: StreamingQuery
    table: CustomerTable
    pipeline: Pipeline
    views: tuple[StreamingQuery, ...] = ()
    endpoint: MetricsServer | None = None
    archive: ClassArchive | None = None

    def stop(self) -> None:
        """Stops the query (a batch in flight is cancelled: nothing of it is committed, and the
        next run does it again), writes what the Delta table has queued and stops Spark."""
        # The cancelled batch's Spark calls fail on the Python side, and py4j logs each failure
        # with a traceback: expected here, and not a fault to report.
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        self.pipeline.stopping.set()
        self.query.stop()
        for view in self.views:
            view.stop()
        self.pipeline.cdc.close()
        self.pipeline.ratings_in.close()
        self.table.close()
        gateway = self.spark.sparkContext._gateway
        self.spark.stop()
        if self.archive is not None:
            self.archive.finish(gateway)
        if self.endpoint is not None:
            self.endpoint.close()


def _prefetch(settings: JobSettings, marker: dict[str, Any] | None, group_id: str) -> Prefetch | None:
    """The CDC topic read ahead from where the job left it, when that is known without Spark:
    from the last commit, or from its start when there is no customer table either."""
    if marker is not None:
        state = CdcState.from_json(marker)
    elif not settings.table_path.exists():
        state = CdcState()
    else:
        return None
    return Prefetch(CdcReader(settings, group_id), state)


def start(settings: JobSettings, views_settings: "ViewsSettings | None" = None) -> RunningJob:
    """The job's query; with `views_settings`, the views' queries too, in the same application."""
    # First the job's identity in Kafka: it fences an earlier instance of the same name, and its
    # last commit says where this run starts.
    out = TransactionalOutput(settings.producer_config(), settings.job_name, settings.commits_topic)
    run = out.run = claim_state(settings, out.marker)
    metrics = Metrics(settings.metrics_file)
    endpoint = serve(JobCollector(metrics, settings.job_name), settings, "ENRICH_")
    archive = driver_archive(settings, "ratings-enrichment")
    prefetch = _prefetch(settings, out.marker, f"{settings.job_name}-{run}-cdc")
    spark = build_session(settings, archive=archive)
    spark.streams.addListener(ProgressListener(metrics))
    table = CustomerTable(
        spark,
        str(settings.table_path),
        f"{run}-cdc",
        maintain_every=settings.maintenance_every_commits,
        commit_interval_s=settings.table_commit_interval_s,
    )
    pipeline = Pipeline(
        spark, settings, table, out, metrics, group_id=f"{settings.job_name}-{run}-cdc", prefetch=prefetch
    )
    starting = pipeline.query_start()
    query = (
        _kafka_stream(spark, settings, starting)
        .writeStream.queryName("enrichment")
        .foreachBatch(pipeline)
        .option("checkpointLocation", str(query_checkpoint(settings)))
        .trigger(processingTime=settings.trigger_interval)
        .start()
    )
    log.info(
        "enrichment job %r running (run %s); metrics in %s", settings.job_name, run, settings.metrics_file
    )
    if spark.sparkContext.uiWebUrl:
        log.info("Spark UI at %s", spark.sparkContext.uiWebUrl)
    views: tuple[StreamingQuery, ...] = ()
    if views_settings is not None:
        from enrichment_job.views.app import start_queries  # noqa: PLC0415 (the views import this module)

        views = start_queries(spark, views_settings)
    return RunningJob(spark, query, table, pipeline, views, endpoint, archive)
