"""Wiring: the Spark session, the streaming query, its checkpoint, outputs and customer table."""

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from enrichment_job.customers.table import CdcState, CustomerTable, DeltaLog
from enrichment_job.driver.cdc import CdcReader, CdcResult, Prefetch, fill_unavailable, ingest
from enrichment_job.driver.recovery import PIPELINE_CHECKPOINT, Recovery, Start, claim_state
from enrichment_job.kafka.claim_check import StorePruner
from enrichment_job.kafka.reader import KAFKA, RecordsDeleted, TopicReader
from enrichment_job.kafka.transactions import Fenced, TransactionalOutput
from enrichment_job.marker import BatchMarker
from enrichment_job.records import change_events
from enrichment_job.runtime.jvm import ClassArchive
from enrichment_job.runtime.metrics import JobCollector, Metrics, ProgressListener, Steps
from enrichment_job.runtime.session import APP_NAME, SessionStart, begin_session, on_cluster, query_conf
from enrichment_job.settings import TABLE, JobSettings
from enrichment_job.tasks import TaskJoin, enrich
from enrichment_job.tasks.enrich import Ratings, RatingsResult
from enrichment_job.views.app import start_queries
from enrichment_job.views.settings import DLQ_STAGE as VIEWS_STAGE
from enrichment_job.views.settings import ViewsSettings
from foundation.prometheus import MetricsServer, serve

__all__ = ["FIRST_BATCH_SHARE", "JoinMoved", "Pipeline", "RunningJob", "join_place", "start"]

log = logging.getLogger("enrichment_job")

# The first batch after a start takes this share of ENRICH_MAX_OFFSETS_PER_TRIGGER ratings. It
# is the batch that loads the table (the whole CDC topic on a fresh start), and its transaction
# carries the customers topic's records too: with a full share of a backlog besides, the first
# output comes noticeably later on a large table. The batches after it take full shares.
FIRST_BATCH_SHARE = 0.25

# The most threads that write a batch's enriched records as JSON, with the join on the driver.
JSON_THREADS = 4

# Spark's whole-stage code generation, off for the enrichment query (see `start`).
WHOLE_STAGE_CODEGEN = "spark.sql.codegen.wholeStage"

# While a batch waits for the heartbeat that releases its waiting ratings (ENRICH_RELEASE_WAIT_MS),
# it looks at the CDC topic this often (a ListOffsets request, and a read when it moved).
RELEASE_POLL_S = 0.01
# A CDC clock further behind the job's own than this is a stalled CDC side (Connect down, a
# failed task): the next heartbeat is not coming soon, and a batch does not wait for it.
RELEASE_STALLED_MS = 2_000


@dataclass
class _Inputs:
    """A batch's work before its transaction: what it read, and with the join on the driver
    the outcome of its ratings (`Pipeline._step`)."""

    started: float
    steps: Steps
    ends: dict[int, int]  # where each ratings partition ended as the batch began
    cdc: CdcResult
    ratings: tuple[pa.Table, dict[int, int]] | None  # the driver's: records, `consumed_to`
    result: RatingsResult | None = None


class JoinMoved(ValueError):
    """The job name's last commit was made by the join in tasks: a job in tasks cannot go back
    to the driver (the driver's commit would not know where each task left its partition)."""


def join_place(setting: str, master: str, marker: BatchMarker | None) -> str:
    """Where this run joins, `driver` or `tasks`: ENRICH_JOIN_IN as set; for `auto`, tasks when
    the session's master is a cluster's (the executors do the per-rating work, and it grows with
    them) or when the job name last committed in tasks (it cannot go back), else the driver."""
    if setting != "auto":
        return setting
    in_tasks = marker is not None and marker.join_in == "tasks"
    return "tasks" if on_cluster(master) or in_tasks else "driver"


class Pipeline:
    """foreachBatch handler of the one streaming query, which reads the CDC topic and the ratings
    topic together. Per micro-batch: CDC first (new versions, the watermark), then the ratings
    released by that watermark, then one Kafka transaction with every output and the marker
    that makes a re-run of the batch a no-op. The Delta table follows asynchronously.

    The micro-batch's own rows are not read: the query is the job's clock (a batch starts when
    either topic has new records, at most once a trigger interval) and its checkpoint. What a
    batch takes in is decided on the driver, from the data and the last commit's marker:
    - the ratings from where the last committed batch left them (the marker's `consumed_to`) to
      where each partition ends as the batch starts, at most ENRICH_MAX_OFFSETS_PER_TRIGGER;
    - then the CDC topic from the marker's `cdc_to` to its end a moment later, so that the
      heartbeat covering the batch's last ratings is in it (with both topics' ends fixed at one
      instant, those ratings would wait a whole batch).
    A batch that fails before its commit is run again from the same marker, so nothing is
    skipped or taken twice, whatever the re-run reads."""

    def __init__(
        self,
        spark: SparkSession,
        settings: JobSettings,
        table: CustomerTable,
        out: TransactionalOutput,
        metrics: Metrics,
        *,
        readers: tuple[CdcReader, TopicReader],
        ratings: Ratings,
        recovery: Recovery,
        start: Start,
        join_in: str,
        resumed_from: BatchMarker | None = None,
        prefetch: Prefetch | None = None,
    ) -> None:
        """Takes what `resume` opened and recovered; does no I/O of its own."""
        self.spark = spark
        self.settings = settings
        self.table = table
        self.out = out
        self.metrics = metrics
        self.ratings = ratings  # the waiting ratings, rebuilt by the recovery
        self.stopping = threading.Event()  # the job is stopping: a failing batch was cancelled
        self.fenced: Fenced | None = None  # another instance took over: stop, do not restart
        self.refused: RecordsDeleted | None = None  # records it had to read are gone: stop
        self.cdc, self.ratings_in = readers
        self.first_starts: dict[int, int] = {}  # where the ratings start without a commit
        self.first_read = True  # no batch of this process has read ratings yet
        self.state, self.consumed_to, self.waiting_from = start.state, start.consumed_to, start.waiting_from
        self.prefetch = prefetch if prefetch is not None and prefetch.state == self.state else None
        self._recovery = recovery
        self.tasks: TaskJoin | None = None  # the join in tasks (see `join_place`)
        self.join_in = join_in
        self.resumed_from = resumed_from  # the last commit's marker as this process started
        self.unlogged: list[pa.Table] = []  # versions a release added, for the next batch's log commit
        self._ahead: Future[_Inputs] | None = None  # the first batch's, taken while Spark plans it

    @classmethod
    def resume(
        cls,
        spark: SparkSession,
        settings: JobSettings,
        table: CustomerTable,
        out: TransactionalOutput,
        metrics: Metrics,
        *,
        last: BatchMarker | None,
        group_id: str,
        prefetch: Prefetch | None = None,
    ) -> "Pipeline":
        """The pipeline where the job name's last commit (`last`, read as `out` opened) left it:
        decides where the join runs, opens the readers of both topics, and brings the customer
        table and the waiting ratings to that commit (`Recovery.resume`, which may append to the
        Delta table)."""
        master = spark.sparkContext.master or ""
        join_in = join_place(settings.join_in, master, last)
        where = "in Spark tasks on the executors" if join_in == "tasks" else "on the driver"
        log.info("the join runs %s (ENRICH_JOIN_IN=%s, master %s)", where, settings.join_in, master)
        if settings.release_wait_s * 1000 < settings.release_wait_ms:
            log.warning(
                "ENRICH_RELEASE_WAIT_MS=%d is more than half of ENRICH_TRIGGER_INTERVAL=%r: a batch waits "
                "at most %.0f ms for the heartbeat that releases its waiting ratings",
                settings.release_wait_ms,
                settings.trigger_interval,
                settings.release_wait_s * 1000,
            )
        if join_in == "driver" and last is not None and last.join_in == "tasks":
            raise JoinMoved(
                f"setting ENRICH_JOIN_IN: job {settings.job_name!r} last committed with the join in "
                "tasks (ENRICH_JOIN_IN=tasks); it cannot go back to the driver under the same name"
            )
        cdc = prefetch.reader if prefetch is not None else CdcReader(settings, group_id)
        ratings_in = TopicReader(settings, settings.ratings_topic, group_id)
        # The join on the driver writes its records as JSON on as many of its cores as it has
        # (up to JSON_THREADS); in tasks each task has one.
        threads = min(JSON_THREADS, os.cpu_count() or 1) if join_in == "driver" else 1
        ratings, recovery = Ratings(settings, threads), Recovery(spark, settings, table, last, out.run)
        start = recovery.resume(ratings, ratings_in.read)
        return cls(
            spark,
            settings,
            table,
            out,
            metrics,
            readers=(cdc, ratings_in),
            ratings=ratings,
            recovery=recovery,
            start=start,
            join_in=join_in,
            resumed_from=last,
            prefetch=prefetch,
        )

    def query_start(self) -> str:
        """The query's starting offsets (JSON); see `Recovery.query_start`."""
        starting, self.first_starts = self._recovery.query_start(self.ratings_in)
        if self.join_in == "tasks":
            marker = self.resumed_from
            cut_over = marker if marker is not None and marker.join_in != "tasks" else None
            self.tasks = TaskJoin(self.spark, self.settings, str(self.out.run), self.first_starts, cut_over)
        return starting

    def _cdc_read(self, state: CdcState, ranges: dict[int, tuple[int, int]]) -> CdcResult:
        """The CDC records of `ranges` (from `state`'s offsets), ingested after `state` (not yet
        `_cdc_checked`)."""
        settings = self.settings
        raw = self.cdc.read(ranges, max_bytes=settings.max_batch_bytes)  # cut short: `cdc.short` says so
        return ingest(raw, state, settings.customers_topic, settings.dlq_topic, self.spark)

    def _cdc_checked(self, cdc: CdcResult) -> CdcResult:
        """`cdc` with the columns Debezium left out filled in, and a change event too large to
        go as a dead letter with its headers with its bytes in the claim-check store, as a
        rating's are."""
        cdc = fill_unavailable(cdc, self.table.versions())
        return replace(cdc, dead=self.ratings.claim_check.oversized(cdc.dead, self.settings.max_rating_bytes))

    def _prefetched(self) -> CdcResult | None:
        """The first batch's start of the CDC topic, when it was read ahead (`Prefetch`)."""
        prefetch, self.prefetch = self.prefetch, None
        return prefetch.take() if prefetch is not None else None

    def _cdc_catch_up(self, cdc: CdcResult) -> CdcResult:
        """When the limit per read left CDC records that were in the topic as the batch
        started (a fresh job on a long CDC topic, or after a long stop), the batch reads on to
        them, one limited read after the other, before any rating is decided. Otherwise ratings
        would pile up waiting, batch after batch, for a watermark that moves one read a batch."""
        target = dict(self.cdc.short)
        if not target:
            return cdc
        while self.cdc.short:
            more = self._cdc_read(cdc.state, self.cdc.ranges(cdc.state.cdc_to, target))
            cdc = cdc.then(more)
            left = sum(max(0, end - cdc.state.cdc_to.get(p, end)) for p, end in target.items())
            log.info("catching up with the CDC topic: %d events read, %d left", cdc.events, left)
        return cdc

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        try:
            self._run(batch, batch_id)
        except Fenced as err:
            self.fenced = err
            raise
        except RecordsDeleted as err:
            self.refused = err
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

    def _ratings_ends(self) -> dict[int, int]:
        """partition -> where each ratings partition ends now, for `read_committed` (the last
        stable offset: a producer's open transaction and what follows it are not readable yet)."""
        bounds = self.ratings_in.bounds()
        for p, (low, _) in bounds.items():
            self.first_starts.setdefault(p, low)  # a partition added after the query started
        return {p: high for p, (_, high) in bounds.items()}

    def _ratings_input(self, ends: dict[int, int]) -> tuple[pa.Table, dict[int, int]]:
        """The ratings this batch takes in (Kafka columns), and where they end per partition
        (`consumed_to`): from where the last committed batch left each partition to `ends`, at
        most ENRICH_MAX_OFFSETS_PER_TRIGGER in all (a quarter of it in the first batch after a
        start: FIRST_BATCH_SHARE) and ENRICH_MAX_BATCH_BYTES of keys and values. Read from Kafka
        on the driver, like the CDC events.

        Waiting ratings are held in memory. At ENRICH_MAX_WAITING_RATINGS or
        ENRICH_MAX_WAITING_BYTES (the CDC watermark stalled: Connect down, a failed Debezium
        task; or ratings held behind a customer's rating from the future) the batch takes no
        new ones: they stay in Kafka, and `consumed_to` stays where it was; once fewer wait,
        the batches read on from there. The same covers a restart with ratings left behind."""
        if self.ratings.full(self.settings.max_waiting_ratings, self.settings.max_waiting_bytes):
            return KAFKA.empty_table(), dict(self.consumed_to)
        froms = {p: self.consumed_to.get(p, self.first_starts.get(p, end)) for p, end in ends.items()}
        limit = self.settings.max_offsets_per_trigger
        if self.first_read:
            limit, self.first_read = int(limit * FIRST_BATCH_SHARE), False
        share = max(1, limit // max(1, len(ends)))
        upto = {p: max(froms[p], min(end, froms[p] + share)) for p, end in ends.items()}
        ranges = {p: (froms[p], upto[p]) for p in ends if upto[p] > froms[p]}
        raw = self.ratings_in.read(ranges, max_bytes=self.settings.max_batch_bytes)
        upto |= self.ratings_in.cut  # ENRICH_MAX_BATCH_BYTES stopped the read there
        return raw, {**self.consumed_to, **upto}

    def _run(self, batch: DataFrame, batch_id: int) -> None:
        if self.out.committed(batch_id) and self.tasks is not None:
            log.info(
                "batch %d: its CDC step is in Kafka; its tasks go on (each finds its own commit)", batch_id
            )
            self._in_tasks(batch_id, None, self._ratings_ends(), time.monotonic(), Steps())
            return
        if self.out.committed(batch_id):  # what was taken ahead stays for the next batch
            log.info("batch %d is already in Kafka; not writing it again", batch_id)
            return
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            # The batch counts from here (its time, its release's deadline); `ahead` is how
            # long it waited for the work begun ahead, whose steps it reports too.
            started = time.monotonic()
            inputs = ahead.result()  # what it raised, raised here
            inputs.steps.seconds["ahead"] = time.monotonic() - started
            inputs.started = started
        else:
            inputs = self._inputs()
        # The transaction opens now: the CDC step's records (millions in a catch-up) are
        # produced while the ratings are decided.
        self.out.begin(batch_id, [inputs.cdc.customers, inputs.cdc.dead])
        try:
            if ahead is None:
                self._step(inputs)
            self._decide(batch_id, inputs)
        except BaseException:
            self.out.abort(batch_id)
            raise

    def take_ahead(self) -> None:
        """Begins the first batch's inputs and step (`_inputs`, `_step`) now, in a thread of
        its own, with the join on the driver: they read and decide while Spark starts the query
        and plans its first micro-batch (half a second or more of a fresh start), and the first
        batch of this run that has work to do writes them under its own id and marker. Nothing
        is written ahead: a batch Kafka already has (Spark runs again a batch whose checkpoint
        commit was lost) leaves them to the next one, and an idle start's first batch writes
        what was there when it began, the next batch the rest."""
        if self.tasks is None and self._ahead is None:
            thread = ThreadPoolExecutor(1, thread_name_prefix="first-batch")
            self._ahead = thread.submit(lambda: self._step(self._inputs()))
            thread.shutdown(wait=False)  # once the work is done

    def settle(self) -> None:
        """Waits for the work `take_ahead` began, before the readers it uses are closed."""
        if self._ahead is not None:
            wait([self._ahead])

    def _inputs(self) -> _Inputs:
        """What the batch takes in: its ratings' ends and, with the join on the driver, their
        records; then the CDC records to where that topic ends a moment later, checked."""
        started, steps = time.monotonic(), Steps()
        with steps("read"):
            ends = self._ratings_ends()  # before the CDC read: see the class
            # The ratings' records too, before the CDC's: a first batch reads them while the
            # CDC read-ahead finishes, instead of after it.
            taken = self._ratings_input(ends) if self.tasks is None else None
        with steps("cdc"):
            cdc = self._prefetched()
            state = cdc.state if cdc is not None else self.state
            more = self._cdc_read(state, self.cdc.ranges(state.cdc_to))
            cdc = cdc.then(more) if cdc is not None else more
            cdc = self._cdc_catch_up(cdc)
            # The customers topic's records made here, ahead of the batch on a fresh start
            # (or by the read-ahead, while Spark started).
            cdc = self._cdc_checked(cdc).with_customers()
        return _Inputs(started, steps, ends, cdc, taken)

    def _step(self, inputs: _Inputs) -> _Inputs:
        """The table moved on to the batch's CDC versions and, with the join on the driver, its
        ratings decided against it (`Ratings.step`): nothing is written yet."""
        cdc, steps = inputs.cdc, inputs.steps
        if cdc.changes:  # the join needs them: the watermark counts them in
            with steps("table"):
                self.table.add(cdc.versions)
        if inputs.ratings is None:
            return inputs
        ratings_raw, consumed_to = inputs.ratings
        # Waiting ratings are decided again when the CDC side moved (a heartbeat, a change):
        # without it, nothing about them can have changed.
        if consumed_to != self.consumed_to or (self.ratings.waiting_count and cdc.events):
            with steps("ratings"):
                inputs.result = self.ratings.step(
                    ratings_raw, self.table.versions(), cdc.state.clock_ms, steps
                )
        return inputs

    def _decide(self, batch_id: int, inputs: _Inputs) -> None:
        """The batch's outcome (`_step`'s) written with the CDC step's records and its marker;
        with the join in tasks, the CDC step committed and the ratings left to the tasks."""
        settings = self.settings
        cdc, ends, started, steps, result = (
            inputs.cdc,
            inputs.ends,
            inputs.started,
            inputs.steps,
            inputs.result,
        )
        if self.tasks is not None:
            self._cdc_commit(batch_id, cdc, steps)
            self._in_tasks(batch_id, cdc, ends, started, steps)
            return
        watermark = cdc.state.clock_ms
        assert inputs.ratings is not None  # the join on the driver read them
        consumed_to = inputs.ratings[1]
        # After the CDC step's records, which are on their way.
        outputs = [result.enriched, result.alerts, result.dead] if result is not None else []
        deferred = sum(max(0, end - consumed_to.get(p, end)) for p, end in ends.items())
        if deferred and not self.ratings.full(settings.max_waiting_ratings, settings.max_waiting_bytes):
            log.info(  # a backlog: the batch took what its bounds allow of it
                "batch %d: %d ratings left for the next batches (ENRICH_MAX_OFFSETS_PER_TRIGGER %d,"
                " ENRICH_MAX_BATCH_BYTES %d)",
                batch_id,
                deferred,
                settings.max_offsets_per_trigger,
                settings.max_batch_bytes,
            )
        elif deferred:
            log.warning(
                "batch %d: %d ratings left in Kafka for later: %d are waiting for the CDC watermark, "
                "%d bytes (ENRICH_MAX_WAITING_RATINGS %d, ENRICH_MAX_WAITING_BYTES %d)",
                batch_id,
                deferred,
                self.ratings.waiting_count,
                self.ratings.waiting_bytes,
                settings.max_waiting_ratings,
                settings.max_waiting_bytes,
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
        marker = self._marker(
            batch_id,
            cdc.state,
            consumed_to=consumed_to,
            waiting_from=waiting_from,
            counts=counts,
        )
        with steps("kafka"):
            self.out.write(batch_id, outputs, marker.as_json())
        # Committed: now the state moves on, and the table keeps the new versions.
        self.state, self.consumed_to, self.waiting_from = cdc.state, consumed_to, waiting_from
        if result is not None:
            self.ratings.waiting = result.waiting
        if cdc.changes or self.unlogged:
            self.table.commit(batch_id, pa.concat_tables([*self.unlogged, cdc.versions]), cdc.state)
            self.unlogged = []
        release = self._release(batch_id, started, steps)
        if release is not None:  # the second transaction's figures count in the batch's
            released, watermark = release
            counts = {k: v + released.get(k, 0) for k, v in counts.items()} | {
                "waiting": released["waiting"],
                "released": released["enriched"],
            }
        self.metrics.batch(batch_id, counts, watermark, time.monotonic() - started, steps)

    def _release(
        self, batch_id: int, started: float, steps: Steps
    ) -> tuple[dict[str, int], int | None] | None:
        """Ratings left waiting only for the CDC clock, released in the batch's second
        transaction. A rating produced after the newest heartbeat the batch read waits for the
        next one (the database clock must pass its rating_time), and without this step it waited
        for the next trigger: half a second for a heartbeat that comes within a tenth of one.
        Here, after its commit, the batch reads the CDC topic on until its clock passes the
        newest such rating, up to ENRICH_RELEASE_WAIT_MS from the batch's start, then decides
        the waiting ratings against what it read, and commits the outcome with a marker of the
        same batch, as the next batch would with no new ratings. A re-run of the batch finds the
        batch committed either way. What it adds to the table goes to the Delta log with the next
        batch's versions (a log commit per batch id; the log's CDC offsets say where it is).
        Returns what it wrote and the watermark, or None when it wrote nothing."""
        waiting = self.ratings.waiting
        deadline = started + self.settings.release_wait_s
        if waiting is None or not waiting.num_rows or self.state.clock_ms is None:
            return None
        now_ms = time.time_ns() // 1_000_000
        if now_ms - self.state.clock_ms > RELEASE_STALLED_MS:
            return None
        # The newest rating the database clock passes within the first half of the wait left:
        # a heartbeat that late still reaches the topic before the deadline. Ratings further
        # ahead (or from the future) wait for a later batch.
        soon_ms = now_ms + int((deadline - time.monotonic()) * 500)
        times = waiting.column("rating_time")
        due = pc.max(times.filter(pc.fill_null(pc.less_equal(times, soon_ms), False))).as_py()
        if due is None:
            return None
        cdc: CdcResult | None = None
        with steps("release"):
            while time.monotonic() + RELEASE_POLL_S < deadline and not self.cdc.short:
                time.sleep(RELEASE_POLL_S)
                state = cdc.state if cdc is not None else self.state
                ranges = self.cdc.ranges(state.cdc_to)
                if not ranges:
                    continue
                more = self._cdc_read(state, ranges)
                cdc = cdc.then(more) if cdc is not None else more
                if (cdc.state.clock_ms or 0) > due:
                    break
            if cdc is None or cdc.state.clock_ms == self.state.clock_ms:
                return None
            cdc = self._cdc_checked(cdc)
            if cdc.changes:
                self.table.add(cdc.versions)
            watermark = cdc.state.clock_ms
            result = self.ratings.step(KAFKA.empty_table(), self.table.versions(), watermark)
            counts = {
                "enriched": len(result.enriched),
                "alerts": len(result.alerts),
                "dlq": len(cdc.dead) + len(result.dead),
                "cdc_events": cdc.events,
                "changes": cdc.changes,
                "duplicates": cdc.duplicates,
            }
            marker = self._marker(
                batch_id,
                cdc.state,
                consumed_to=self.consumed_to,
                waiting_from=result.waiting_from,
                counts=counts | {"waiting": _rows(result.waiting), "released": len(result.enriched)},
            )
            outputs = [cdc.customers, cdc.dead, result.enriched, result.alerts, result.dead]
            self.out.write(batch_id, outputs, marker.as_json())
        self.state, self.waiting_from, self.ratings.waiting = cdc.state, result.waiting_from, result.waiting
        if cdc.changes:
            self.unlogged.append(cdc.versions)
        return counts | {"waiting": _rows(result.waiting)}, watermark

    def _marker(self, batch_id: int, state: CdcState, **fields: Any) -> BatchMarker:
        """The marker of a batch of this run that leaves the CDC side at `state`."""
        settings = self.settings
        return BatchMarker(
            batch_id, self.out.run, state, settings.ratings_topic, settings.cdc_topic, **fields
        )

    def _cdc_commit(self, batch_id: int, cdc: CdcResult, steps: Steps) -> None:
        """The join in tasks: the batch's CDC outcome (the customers topic's records and the CDC
        dead letters, on their way since `begin`) and its marker, in the driver's transaction.
        A re-run of the batch finds it and goes straight to the tasks, with this watermark."""
        counts = {"cdc_events": cdc.events, "changes": cdc.changes, "duplicates": cdc.duplicates}
        marker = self._marker(
            batch_id,
            cdc.state,
            join_in="tasks",
            counts=counts | {"dlq": len(cdc.dead)},
        )
        with steps("kafka"):
            self.out.write(batch_id, [], marker.as_json())
        self.state = cdc.state
        if cdc.changes:
            self.table.commit(batch_id, cdc.versions, cdc.state)

    def _in_tasks(
        self, batch_id: int, cdc: CdcResult | None, ends: dict[int, int], started: float, steps: Steps
    ) -> None:
        """The batch's ratings, joined and written by its tasks (`tasks.TaskJoin`)."""
        assert self.tasks is not None
        limit = self.settings.max_offsets_per_trigger
        first, self.first_read = self.first_read, False
        if first:
            limit = int(limit * FIRST_BATCH_SHARE)
        with steps("tasks"):
            outcomes = self.tasks.run(
                batch_id,
                self.state.clock_ms,
                ends,
                self.table.versions(),
                cdc.versions if cdc is not None and cdc.changes else None,
                limit=limit,
                cdc_moved=first or (cdc is not None and cdc.events > 0),
            )
        for name in sorted({n for o in outcomes for n, _ in o.steps}):  # the slowest task's
            steps.seconds[f"task.{name}"] = max(dict(o.steps).get(name, 0.0) for o in outcomes)
        known = self.tasks.known
        counts = {
            "new": sum(o.new for o in outcomes),
            "enriched": sum(o.enriched for o in outcomes),
            "alerts": sum(o.alerts for o in outcomes),
            "dlq": (len(cdc.dead) if cdc is not None else 0) + sum(o.dlq for o in outcomes),
            "waiting": self.tasks.waiting(),
            "cdc_events": cdc.events if cdc is not None else 0,
            "changes": cdc.changes if cdc is not None else 0,
            "duplicates": cdc.duplicates if cdc is not None else 0,
            "deferred": sum(max(0, end - known[p].consumed_to) for p, end in ends.items() if p in known),
            "tasks": len(outcomes),
        }
        self.metrics.batch(batch_id, counts, self.state.clock_ms, time.monotonic() - started, steps)


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
    pruners: tuple[StorePruner, ...] = ()

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
        self.pipeline.settle()
        self.pipeline.cdc.close()
        self.pipeline.ratings_in.close()
        if self.pipeline.tasks is not None:
            self.pipeline.tasks.close()
        self.table.close()
        gateway = self.spark.sparkContext._gateway
        self.spark.stop()
        if self.archive is not None:
            self.archive.finish(gateway)
        if self.endpoint is not None:
            self.endpoint.close()
        for pruner in self.pruners:
            pruner.close()


def _prefetch(settings: JobSettings, marker: BatchMarker | None, group_id: str) -> Prefetch | None:
    """The CDC topic read ahead from where the job left it, when that is known without Spark:
    from the last commit, or from its start when there is no customer table either."""
    if marker is not None:
        state = marker.state
    elif not settings.state.exists(TABLE):
        state = CdcState()
    else:
        return None
    return Prefetch(CdcReader(settings, group_id), state, settings.customers_topic, settings.dlq_topic)


def start(
    settings: JobSettings,
    views_settings: ViewsSettings | None = None,
    session_start: SessionStart | None = None,
) -> RunningJob:
    """The job's query; with `views_settings`, the views' queries too, in the same application.
    `session_start`: the Spark session's start, when the caller began it (`begin_session`)."""
    # The driver JVM starts meanwhile: nothing of Spark reads or writes the state before the
    # query starts, below.
    if session_start is None:
        session_start = begin_session(settings, APP_NAME)
    archive = session_start.archive
    try:
        # The job's identity in Kafka: it fences an earlier instance of the same name, and its
        # last commit says where this run starts.
        out = TransactionalOutput.open(settings.producer_config(), settings.job_name, settings.commits_topic)
        last = BatchMarker.last(out.marker)  # for the state, the read-ahead, the recovery, the start
        run = out.run = claim_state(settings, last)
        metrics = Metrics(settings.metrics_path)
        endpoint = serve(JobCollector(metrics, settings.job_name), settings, "ENRICH_")
        metrics.driver({"class_archive": archive.state if archive is not None else "off"})
        prefetch = _prefetch(settings, last, f"{settings.job_name}-{run}-cdc")
    except BaseException:
        session_start.abandon()
        raise
    spark = session_start.session()
    spark.streams.addListener(ProgressListener(metrics))
    table_path, storage_options = settings.state.table_location(TABLE)
    table = CustomerTable(
        DeltaLog(
            table_path,
            f"{run}-cdc",
            storage_options=storage_options,
            maintain_every=settings.maintenance_every_commits,
            commit_interval_s=settings.table_commit_interval_s,
        )
    )
    pipeline = Pipeline.resume(
        spark,
        settings,
        table,
        out,
        metrics,
        last=last,
        group_id=f"{settings.job_name}-{run}-cdc",
        prefetch=prefetch,
    )
    starting = pipeline.query_start()
    pipeline.take_ahead()
    # The micro-batch's rows are never read (the handler reads Kafka itself), so its plan needs
    # no generated code: compiling it (whole-stage code generation) took 0.3 s of a fresh
    # start's first micro-batch. The views' queries in this application keep it.
    with query_conf(spark, {WHOLE_STAGE_CODEGEN: "false"}):
        query = (
            _kafka_stream(spark, settings, starting)
            .writeStream.queryName("enrichment")
            .foreachBatch(pipeline)
            .option("checkpointLocation", settings.state.child(PIPELINE_CHECKPOINT))
            .trigger(processingTime=settings.trigger_interval)
            .start()
        )
    log.info(
        "enrichment job %r running (run %s), its state in %s; metrics in %s",
        settings.job_name,
        run,
        settings.state_dir,
        settings.metrics_path or "the Prometheus endpoint only",
    )
    if spark.sparkContext.uiWebUrl:
        log.info("Spark UI at %s", spark.sparkContext.uiWebUrl)
    views: tuple[StreamingQuery, ...] = ()
    pruners = [StorePruner.of(settings, (enrich.STAGE, change_events.STAGE), settings.dlq_topic)]
    if views_settings is not None:
        views = start_queries(spark, views_settings)
        pruners.append(StorePruner.of(views_settings, (VIEWS_STAGE,), views_settings.dlq_topic))
    return RunningJob(spark, query, table, pipeline, views, endpoint, archive, tuple(pruners))
