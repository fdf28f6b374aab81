"""The driver's side of the join in tasks: one Spark job per batch, a task per ratings partition
that has new ratings or ratings waiting, each committing on its own (see `partition`)."""

import functools
import logging
import re
import time
from collections.abc import Iterable

import pyarrow as pa
from confluent_kafka import KafkaError
from py4j.protocol import Py4JJavaError
from pyspark import RDD
from pyspark.errors import PythonException
from pyspark.sql import SparkSession

from enrichment_job.customers.versions import VersionStore
from enrichment_job.kafka.reader import RecordsDeleted
from enrichment_job.kafka.transactions import Fenced
from enrichment_job.marker import BatchMarker
from enrichment_job.runtime.spark_internals import live_executors, placed_rdd
from enrichment_job.settings import JobSettings
from enrichment_job.tasks.partition import run_plans
from enrichment_job.tasks.plan import PartitionPlan, TaskOutcome
from enrichment_job.tasks.tables import TableShipper

__all__ = ["EXECUTORS_WAIT_S", "TaskJoin", "sticky_placement"]

log = logging.getLogger("enrichment_job")
EXECUTORS_WAIT_S = 120.0  # at most, for ENRICH_MIN_EXECUTORS


def sticky_placement(
    placement: dict[int, str], executors: Iterable[str], partitions: list[int]
) -> dict[int, str]:
    """Where each ratings partition's tasks should run: where they ran before, while that
    executor lives; a partition new here, or whose executor is gone, goes to the executor with
    the fewest. An executor that registered after the others (the first batches of a start, a
    replacement) then takes partitions over until no executor has two more than another."""
    load = {executor: 0 for executor in executors}
    placed = {p: e for p, e in placement.items() if e in load}
    for executor in placed.values():
        load[executor] += 1
    for p in partitions:
        if p not in placed:
            executor = min(load, key=lambda e: (load[e], e))
            placed[p] = executor
            load[executor] += 1
    while load:
        most = max(load, key=lambda e: (load[e], e))
        least = min(load, key=lambda e: (load[e], e))
        if load[most] - load[least] <= 1:
            break
        moved = max(p for p, e in placed.items() if e == most)
        placed[moved] = least
        load[most] -= 1
        load[least] += 1
    return placed


class TaskJoin:
    """Plans and runs each batch's tasks. `first_starts`: per ratings partition, where its
    ratings start when no task has committed it; `cut_over`: the last commit of the join on the
    driver, when this job name ran it before (its ratings' offsets and the waiting ones)."""

    def __init__(
        self,
        spark: SparkSession,
        settings: JobSettings,
        run: str,
        first_starts: dict[int, int],
        cut_over: BatchMarker | None = None,
    ) -> None:
        self.sc = spark.sparkContext
        self.settings = settings
        self.run_id = run
        self.first_starts = first_starts
        self.cut_over = cut_over
        self.tables = TableShipper(self.sc)
        self.known: dict[int, TaskOutcome] = {}  # partition -> what its last task said
        self.placement: dict[int, str] = {}  # partition -> the executor its tasks prefer
        if settings.min_executors and (self.sc.master or "").startswith("local"):
            log.warning(
                "ENRICH_MIN_EXECUTORS=%d ignored: in local mode (%s) the driver runs every task",
                settings.min_executors,
                self.sc.master,
            )
        elif settings.min_executors:
            self._wait_for_executors(settings.min_executors)

    def _wait_for_executors(self, count: int, timeout_s: float = EXECUTORS_WAIT_S) -> None:
        """Until `count` executors have registered, or the time is up (logged either way)."""
        started = time.monotonic()
        while (found := len(live_executors(self.sc))) < count and time.monotonic() - started < timeout_s:
            time.sleep(0.5)
        waited = time.monotonic() - started
        if found < count:
            log.warning(
                "%d of ENRICH_MIN_EXECUTORS=%d executors after %.0f s: starting with those",
                found,
                count,
                waited,
            )
        else:
            log.info("%d executors registered after %.1f s", found, waited)

    def waiting(self) -> int:
        return sum(o.waiting for o in self.known.values())

    def plans(
        self, batch_id: int, watermark_ms: int | None, ends: dict[int, int], limit: int, cdc_moved: bool
    ) -> list[PartitionPlan]:
        """A plan per partition with something to do: new ratings, or ratings waiting for a
        watermark that moved; every partition in the first batch of a start."""
        settings = self.settings
        share = max(1, limit // max(1, len(ends)))
        waiting_cap = max(1, settings.max_waiting_ratings // max(1, len(ends)))
        waiting_bytes = max(1, settings.max_waiting_bytes // max(1, len(ends)))
        batch_bytes = max(1, settings.max_batch_bytes // max(1, len(ends)))
        cut = self.cut_over
        cut_consumed = cut.consumed_to if cut is not None else {}
        cut_waiting = cut.waiting_from if cut is not None else {}
        plans = []
        for p, end in sorted(ends.items()):
            last = self.known.get(p)
            if last is not None and last.consumed_to >= end and not (last.waiting and cdc_moved):
                continue
            plans.append(
                PartitionPlan(
                    settings,
                    self.run_id,
                    batch_id,
                    p,
                    start=cut_consumed.get(p, self.first_starts.get(p, end)),
                    end=end,
                    share=share,
                    max_waiting=waiting_cap,
                    max_waiting_bytes=waiting_bytes,
                    max_bytes=batch_bytes,
                    watermark_ms=watermark_ms,
                    waiting_from=cut_waiting.get(p),
                    start_watermark_ms=cut.watermark_ms if cut is not None else None,
                )
            )
        return plans

    def run(
        self,
        batch_id: int,
        watermark_ms: int | None,
        ends: dict[int, int],
        store: VersionStore,
        new_versions: pa.Table | None,
        *,
        limit: int,
        cdc_moved: bool,
    ) -> list[TaskOutcome]:
        """The batch's tasks, each committed on its own when this returns."""
        plans = self.plans(batch_id, watermark_ms, ends, limit, cdc_moved)
        table = self.tables.plan(store, new_versions)
        if not plans:
            return []
        self.sc.setJobDescription(f"batch {batch_id}: the join, {len(plans)} ratings partitions")
        try:
            outcomes = self._placed(plans).mapPartitions(functools.partial(run_plans, table)).collect()
        except (Py4JJavaError, PythonException) as err:
            # A task's error reaches the driver as text: PySpark raises PythonException for an
            # error in a Python worker (Py4JJavaError for one it did not capture).
            if "enrichment_job.kafka.transactions.Fenced" in str(err) or "Fenced: another producer" in str(
                err
            ):
                raise Fenced(
                    f"a task of batch {batch_id} was fenced: another instance of the job took over"
                ) from None
            deleted = re.search(r"RecordsDeleted: (.+)", str(err))
            if deleted:  # a ratings range gone before the task read it: the job stops, and says so
                raise RecordsDeleted(KafkaError(KafkaError.OFFSET_OUT_OF_RANGE, deleted.group(1))) from None
            raise
        for outcome in outcomes:
            self.known[outcome.partition] = outcome
        return outcomes

    def _placed(self, plans: list[PartitionPlan]) -> RDD[PartitionPlan]:
        """The plans as an RDD of a partition each, every one preferring the executor that ran
        that ratings partition before, as long as the executor lives (Kafka Streams' sticky
        assignment): a task that moves must fence the last producer and read the marker back
        (about 1 s), one that stays goes on with its producer and its waiting ratings. With one
        executor (local mode) there is nothing to choose. The preference is Spark's locality:
        the scheduler waits up to `spark.locality.wait` for that executor before it runs the
        task elsewhere, which is correct too, only slower."""
        executors = live_executors(self.sc)
        if len(executors) < 2:
            return self.sc.parallelize(plans, len(plans))
        self.placement = sticky_placement(self.placement, executors, [plan.partition for plan in plans])
        return placed_rdd(
            self.sc,
            [
                (plan, self.placement[plan.partition], executors[self.placement[plan.partition]])
                for plan in plans
            ],
        )

    def close(self) -> None:
        self.tables.close()
