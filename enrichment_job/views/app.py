"""Wiring of the views job: one Spark session and the stateful streaming queries that keep the
views (`aggregation.aggregate_views`).

Which query keeps which view (`queries_of`): every view without an event time in one query
("views"), and each view with one in a query of its own ("view-<name>"). Spark scans the whole
state of a query with a watermark in every batch, for the rows the watermark has passed: beside
the hourly windows, the per-customer rows made each batch read every customer's state.

A views' query reads the enriched topic (committed records only), keeps the aggregations in
Spark's RocksDB state store (changelog checkpointing: a batch writes only the rows it changed)
and, per micro-batch, writes every changed row to its view's compacted changelog topic, plus the
markers, in one Kafka transaction (`kafka.transactions.TransactionalOutput`). When Spark re-runs a batch
after a crash, its state starts again from the previous batch's version, so the rows come out
the same, and the committed marker keeps them from being written twice.

The last of the queries also finds the dead letters: the records no view can count, and those
one view refuses. It counts them in its state as it parses every record anyway, and a batch
that counted any reads its own offsets again for them and writes them in the same transaction
(a query of their own would read and parse every record once more).
"""

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from enrichment_job.kafka.batches import Slices, to_records
from enrichment_job.kafka.claim_check import MAX_VALUE_BYTES, ClaimCheck, StorePruner
from enrichment_job.kafka.transactions import Records, TransactionalOutput
from enrichment_job.records.transforms import dead_letters
from enrichment_job.runtime.checkpoints import CHECKPOINTS, check_planned, run_id
from enrichment_job.runtime.jvm import ClassArchive
from enrichment_job.runtime.metrics import JobCollector, Metrics, ProgressListener
from enrichment_job.runtime.session import build_session, driver_archive
from enrichment_job.runtime.spark_internals import batch_ends, batch_starts
from enrichment_job.views.aggregation import aggregate_views, changelog_columns, dead_letter_reason, view_rows
from enrichment_job.views.declarations import View, declared
from enrichment_job.views.definition import BUILT_IN
from enrichment_job.views.query_marker import NewestRating, QueryMarker
from enrichment_job.views.settings import DLQ_STAGE, KEYED_QUERY, ViewsSettings
from enrichment_job.views.transforms import ENRICHED_FIELDS, parse_enriched
from foundation.arrow_memory import choose_pool
from foundation.prometheus import MetricsServer, serve
from foundation.view_marker import ViewMarker

__all__ = [
    "BatchSink",
    "RunningViews",
    "ViewsSink",
    "column_types",
    "dead_letter_query",
    "enriched_stream",
    "open_output",
    "queries_of",
    "query_rows",
    "start",
    "start_queries",
    "use_rocksdb_state",
]

log = logging.getLogger("enrichment_job.views")

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# Scheduler pools (scheduler_pools.xml). In the views job's own application the
# customer_ratings query is first in line for a task slot ("default") and the windowed
# queries take one only when none of its tasks waits ("background"); inside the
# enrichment job's application every views query is behind the enrichment's batches ("views").
OWN_POOLS = ("default", "background")
IN_JOB_POOLS = ("views", "views")
_TYPES: dict[type[DataType], str] = {
    IntegerType: "int",
    LongType: "long",
    DoubleType: "double",
    StringType: "string",
    BooleanType: "boolean",
    # Spark's JSON writes them in ISO 8601 (the session is in UTC): the query service serves a
    # timestamp as PostgreSQL's timestamptz, a date as date. A timestamp without a zone
    # (`to_timestamp_ntz`) stays text, as it is written (`2026-12-07T05:00:00.000`).
    TimestampType: "timestamp",
    DateType: "date",
}


def column_types(df: DataFrame) -> list[dict[str, str]]:
    """The view's columns as the query service types them (the marker carries them)."""
    return [{"name": f.name, "type": _TYPES.get(type(f.dataType), "string")} for f in df.schema.fields]


def enriched_stream(
    spark: SparkSession,
    settings: ViewsSettings,
    min_partitions: int = 0,
    tasks: int = 0,
    fields: StructType = ENRICHED_FIELDS,
) -> DataFrame:
    """The enriched topic, committed records only, parsed (`dlq_reason` null = readable; the
    enriched `fields`), in at least `min_partitions` tasks a batch (0: one per topic partition),
    or in `tasks` tasks when it is set (the topic's partitions read together)."""
    reader = (
        spark.readStream.format("kafka")
        .options(**settings.kafka_options())
        .option("subscribe", settings.enriched_topic)
        .option("startingOffsets", settings.starting_offsets)
        .option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
    )
    if min_partitions:
        reader = reader.option("minPartitions", min_partitions)
    raw = reader.load()
    return parse_enriched(raw.coalesce(tasks) if tasks else raw, fields)


def open_output(
    settings: ViewsSettings, query: str, run: str, other_markers: Sequence[str] = ()
) -> TransactionalOutput:
    """The query's transactional output (its id `<name>-<query>`), its last marker read and
    checked against the query's checkpoint (`check_planned`)."""
    out = TransactionalOutput.open(
        settings.producer_config(),
        f"{settings.name}-{query}",
        settings.commits_topic,
        run=run,
        other_markers=other_markers,
        max_queued_bytes=settings.max_batch_bytes,
    )
    if (last := QueryMarker.last(out.marker)) is not None:
        check_planned(
            last.run,
            last.batch_id,
            run,
            settings.state,
            f"{CHECKPOINTS}/{query}",
            key=out.marker_key,
            topic=settings.commits_topic,
        )
    return out


class BatchSink:
    """foreachBatch handler: a batch's records plus a marker, in one Kafka transaction."""

    def __init__(self, settings: ViewsSettings, query: str, out: TransactionalOutput) -> None:
        """`out`: the query's output, from `open_output`. Does no I/O of its own."""
        self.settings, self.query, self.out = settings, query, out
        self.state, self.checkpoint = settings.state, f"{CHECKPOINTS}/{query}"
        self._ends: dict[int, dict[int, int]] = {}  # the last batches' ends, read once each

    def ends(self, batch_id: int) -> dict[int, int]:
        """Where batch `batch_id` ends in the enriched topic, by partition (its offset log)."""
        if batch_id not in self._ends:
            self._ends = {b: e for b, e in self._ends.items() if b >= batch_id - 1}
            self._ends[batch_id] = batch_ends(
                self.state, self.checkpoint, batch_id, self.settings.enriched_topic
            )
        return self._ends[batch_id]

    def starts(self, batch_id: int) -> dict[int, int]:
        """Where batch `batch_id` begins in the enriched topic: where the batch before it ended."""
        if batch_id > 0:
            return self.ends(batch_id - 1)
        return batch_starts(self.state, self.checkpoint, batch_id, self.settings.enriched_topic)

    def records_in(self, batch_id: int) -> int:
        """How many enriched records batch `batch_id` reads."""
        starts = self.starts(batch_id)
        return sum(max(0, end - starts.get(p, 0)) for p, end in self.ends(batch_id).items())

    def last(self) -> QueryMarker | None:
        """The query's last committed marker; None before its first commit, or when the
        checkpoint is new (a batch 0 to come: what was committed before belongs to no run that
        goes on)."""
        return QueryMarker.last(self.out.marker) if self.out.committed(0) else None

    def write(
        self,
        batch_id: int,
        outputs: Iterable[Records],
        newest: NewestRating,
        more: Callable[[QueryMarker], Records] | None = None,
        found: Callable[[dict[int, int]], Iterable[Records]] | None = None,
    ) -> None:
        """`outputs`, the records `found` finds (given where the batch ends), the batch's marker
        (with `newest`, the newest rating time) and the records `more` makes of it, in one
        transaction, unless the batch is in Kafka already. `outputs` may be a generator that
        reads them as they are written (a batch taken a slice at a time): `found` is then called
        after it ends. Neither should run Spark jobs: the transaction is open meanwhile."""
        if self.out.committed(batch_id):
            log.info("%s: batch %d is already in Kafka; not writing it again", self.query, batch_id)
            return
        ends = self.ends(batch_id)
        made: list[QueryMarker] = []

        def records() -> Iterator[Records]:
            rows = 0
            for r in outputs:
                rows += len(r)
                yield r
            for r in found(ends) if found is not None else ():
                rows += len(r)
                yield r
            marker = QueryMarker(
                batch_id,
                enriched_to=ends,
                written_at_ms=int(time.time() * 1000),
                rows=rows,
                max_rating_time=newest,
            )
            made.append(marker)
            if more is not None:
                yield more(marker)

        # made[0] once records() has ended: the marker counts what it wrote
        self.out.write(batch_id, records(), lambda: made[0].as_json())  # noqa: PLW0108


class ViewsSink(BatchSink):
    """Writes the rows a batch changed, each to its view's changelog topic (key = the key
    columns as JSON, value = the whole row as JSON), with one marker per view (its key, column
    types, enriched offsets and newest rating time) beside the batch's own. With `dead_letter`
    (the query counts the dead letters), also the batch's dead letters, when it counted any."""

    def __init__(
        self,
        settings: ViewsSettings,
        query: str,
        out: TransactionalOutput,
        views: tuple[View, ...],
        dead_letter: Column | None = None,
    ) -> None:
        super().__init__(settings, query, out)
        self.views, self.dead_letter = views, dead_letter
        self.claim_check = ClaimCheck.of(settings, DLQ_STAGE)
        previous = self.last()
        newest = previous.max_rating_time if previous is not None else None
        known = newest if isinstance(newest, Mapping) else {}
        self.max_rating_time: dict[str, int | None] = {v.name: known.get(v.name) for v in views}
        self.columns: dict[str, list[dict[str, str]]] = {}
        self.changelog = changelog_columns(views)
        # Each view's SQL, for its marker: the query service shows it (psql's \sv, SHOW CREATE VIEW)
        self.sql = {v.name: _read_if_any(BUILT_IN / f"{v.name}.sql") for v in views}

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        if not self.columns:
            self.columns = {v.name: column_types(view_rows(batch, self.views, v)) for v in self.views}
        # Entering runs the batch, even when it is committed already: that moves the state on.
        # A record changes a row of each view that counts it, or the dead letters' row.
        most = self.records_in(batch_id) * (len(self.views) + 1)
        with ExitStack() as stack:
            slices = stack.enter_context(
                Slices(
                    batch.select(*self.changelog),
                    self.settings.max_batch_bytes,
                    most,
                    extra=("view", "last_rating_time"),
                )
            )
            changed = self._changed(slices.extras)
            found = None
            # The dead letters' row (no view's) changed: the batch counted some. Read before the
            # transaction opens, as the rows are.
            if self.dead_letter is not None and slices.extras.column("view").null_count:
                if not self.out.committed(batch_id):
                    dead = stack.enter_context(self._dead_letters(batch.sparkSession, batch_id))
                    found = partial(self._dead_letter_records, batch_id, dead)

            def outputs() -> Iterator[Records]:
                for table in slices:
                    for view in self.views:
                        rows = table.filter(pc.equal(table.column("view"), view.name))
                        yield to_records(rows, self.settings.topic(view.name))

            self.write(batch_id, outputs(), dict(self.max_rating_time), self._view_markers, found)
        if slices.plan:
            log.info("batch %d: %s (VIEWS_JOB_MAX_BATCH_BYTES)", batch_id, slices.describe())
        if slices.rows:
            log.info(
                "batch %d: %s rows changed, %.2f s",
                batch_id,
                ", ".join(f"{name} {n}" for name, n in changed.items()),
                time.monotonic() - started,
            )

    def _changed(self, extras: pa.Table) -> dict[str, int]:
        """Each view's rows the batch changed; its newest rating time moved on."""
        changed = {}
        for view in self.views:
            mine = pc.equal(extras.column("view"), view.name)
            changed[view.name] = pc.sum(mine.cast("int64")).as_py() or 0
            newest = pc.max(extras.column("last_rating_time").filter(mine)).as_py()
            known = self.max_rating_time[view.name]
            if newest is not None and (known is None or newest > known):
                self.max_rating_time[view.name] = newest
        return changed

    def _dead_letters(self, spark: SparkSession, batch_id: int) -> Slices:
        """The batch's dead letters, read again from its offsets of the enriched topic: the
        original key and bytes, the reason and origin as headers, each key's in offset order,
        VIEWS_JOB_MAX_BATCH_BYTES of them at a time (to enter)."""
        assert self.dead_letter is not None
        topic = self.settings.enriched_topic
        starts, ends = self.starts(batch_id), self.ends(batch_id)
        ranges = {p: (starts.get(p, 0), end) for p, end in sorted(ends.items()) if starts.get(p, 0) < end}
        raw = (
            spark.read.format("kafka")
            .options(**self.settings.kafka_options())
            .option("assign", json.dumps({topic: list(ranges)}))
            .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in ranges.items()}}))
            .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in ranges.items()}}))
            .load()
        )
        dead = (
            parse_enriched(raw)
            .withColumn("dlq_reason", self.dead_letter)
            .where(F.col("dlq_reason").isNotNull())
        )
        order = ("partition", "offset")
        # No bound on the rows: each slice is whole keys, each key's records in offset order.
        return Slices(
            dead_letters(dead, DLQ_STAGE, keep=order), self.settings.max_batch_bytes, None, order_by=order
        )

    def _dead_letter_records(self, batch_id: int, dead: Slices, ends: dict[int, int]) -> Iterator[Records]:
        """`dead`'s records (`ends`: where the batch ends, which `dead` was read up to)."""
        for table in dead:
            # An enriched record near Kafka's limit would not fit with its headers: its bytes go
            # to the claim-check store (VIEWS_JOB_DEAD_LETTER_STORE) instead of failing every re-run.
            yield self.claim_check.oversized(to_records(table, self.settings.dlq_topic), MAX_VALUE_BYTES)
        log.warning("batch %d: %d records to %s", batch_id, dead.rows, self.settings.dlq_topic)

    def _view_markers(self, marker: QueryMarker) -> Records:
        """Per view, what the query service reads: key, column types and freshness."""
        keys, values = [], []
        for view in self.views:
            keys.append(f"{self.out.marker_key}:{view.name}".encode())
            said = ViewMarker(
                view.name,
                tuple(view.key),
                self.columns[view.name],
                batch_id=marker.batch_id,
                enriched_to=marker.enriched_to_json,
                max_rating_time=self.max_rating_time[view.name],
                written_at_ms=marker.written_at_ms,
                sql=self.sql[view.name],
            )
            values.append(json.dumps(said.as_json()).encode())
        return Records(self.settings.commits_topic, keys, values)


def _read_if_any(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class RunningViews:
    spark: SparkSession
    queries: tuple[StreamingQuery, ...]
    endpoint: MetricsServer | None = None
    archive: ClassArchive | None = None
    pruner: StorePruner | None = None

    def stop(self) -> None:
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        for query in self.queries:
            query.stop()
        gateway = self.spark.sparkContext._gateway
        self.spark.stop()
        if self.archive is not None:
            self.archive.finish(gateway)
        if self.endpoint is not None:
            self.endpoint.close()
        if self.pruner is not None:
            self.pruner.close()


def start(settings: ViewsSettings) -> RunningViews:
    """The views job as its own Spark application."""
    log.info("Arrow's memory pool: %s", choose_pool())
    metrics = Metrics(settings.metrics_path)
    endpoint = serve(JobCollector(metrics, "views"), settings, "VIEWS_JOB_")
    archive = driver_archive(settings, "ratings-views")
    metrics.driver({"class_archive": archive.state if archive is not None else "off"})
    spark = build_session(settings, "ratings-views", archive)
    spark.streams.addListener(ProgressListener(metrics))
    queries = start_queries(spark, settings, OWN_POOLS)
    pruner = StorePruner.of(settings, (DLQ_STAGE,), settings.dlq_topic)
    return RunningViews(spark, queries, endpoint, archive, pruner)


def use_rocksdb_state(spark: SparkSession) -> None:
    """Stateful queries started from now on in `spark` keep their state in RocksDB, checkpointed
    as a changelog per batch and a snapshot now and then (Spark's maintenance thread)."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    # Each updated group costs a RocksDB read to restore it and a write; counting the store's
    # rows would add a second read to every write.
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "false")


def queries_of(views: tuple[View, ...]) -> dict[str, tuple[View, ...]]:
    """The stateful queries by name, with the views each keeps: the views without an event time
    together, each view with one alone (its watermark would make every batch scan the others'
    state)."""
    keyed = tuple(v for v in views if v.event_time is None)
    windowed = {f"view-{v.name}": (v,) for v in views if v.event_time is not None}
    return ({KEYED_QUERY: keyed} if keyed else {}) | windowed


def dead_letter_query(stateful: dict[str, tuple[View, ...]]) -> str:
    """The query that finds the dead letters: the last, a windowed view's when there is one (its
    process has the lower CPU weight when the queries run in two)."""
    return list(stateful)[-1]


def query_rows(parsed: DataFrame, views: tuple[View, ...], query: str) -> tuple[DataFrame, Column | None]:
    """The rows `query` (of `queries_of(views)`) keeps, from `parsed`, and the reason of the
    dead letters when it is the query that finds them (`dead_letter_query`); the other
    queries count readable records only."""
    stateful = queries_of(views)
    reason = dead_letter_reason(views) if query == dead_letter_query(stateful) else None
    counted = parsed if reason is not None else parsed.where(F.col("dlq_reason").isNull())
    return aggregate_views(counted, stateful[query], reason), reason


def start_queries(
    spark: SparkSession, settings: ViewsSettings, pools: tuple[str, str] = IN_JOB_POOLS
) -> tuple[StreamingQuery, ...]:
    """The views' queries, in `spark` (its own application, or the enrichment job's when
    ENRICH_VIEWS_IN_JOB is on). `pools`: the scheduler pools of the customer_ratings query and
    of the others. The last query also finds the dead letters (`dead_letter_query`).

    The windowed queries read a batch in at least VIEWS_JOB_BACKGROUND_MIN_PARTITIONS tasks: a
    task runs to its end once started, so short ones free a slot for the next customer_ratings
    batch sooner."""
    use_rocksdb_state(spark)
    run = run_id(settings.state)
    views = declared(settings)
    keyed_pool, background_pool = pools
    stateful = queries_of(views)
    chosen = settings.chosen_queries(tuple(stateful))
    started, session_partitions = [], str(spark.conf.get("spark.sql.shuffle.partitions"))
    for query, kept in stateful.items():
        if query not in chosen:
            continue
        keyed = query == KEYED_QUERY
        # A query's thread takes the pool of the thread that starts it.
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", keyed_pool if keyed else background_pool)
        # A task costs about the same a batch whatever its share of the records (its projections
        # built, its state store opened and committed): the views query, a batch a second, runs
        # its few thousand records in as few tasks as it can; the windowed queries in many short
        # ones (VIEWS_JOB_BACKGROUND_MIN_PARTITIONS). The session's value is read at start().
        spark.conf.set(
            "spark.sql.shuffle.partitions",
            str(settings.shuffle_partitions if keyed else settings.windowed_shuffle_partitions),
        )
        if keyed:
            parsed = enriched_stream(spark, settings, tasks=settings.source_tasks)
        else:
            parsed = enriched_stream(spark, settings, settings.background_min_partitions)
        rows, reason = query_rows(parsed, views, query)
        trigger = settings.trigger_interval if keyed else settings.windowed_trigger_interval
        started.append(
            rows.writeStream.queryName(query)
            .outputMode("update")
            .foreachBatch(ViewsSink(settings, query, open_output(settings, query, run), kept, reason))
            .option("checkpointLocation", settings.state.child(CHECKPOINTS, query))
            .trigger(processingTime=trigger)
            .start()
        )
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
    spark.conf.set("spark.sql.shuffle.partitions", session_partitions)
    log.info("views queries running (run %s): %s", run, ", ".join(chosen))
    return tuple(started)
