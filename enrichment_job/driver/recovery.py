"""What a start of the enrichment job does before its first batch.

- `claim_state`: the state folder's run, once the folder is known to continue the job name's
  last commit (its marker in Kafka), or rebuilt when another run committed after it.
- `Recovery.resume`: where the last commit left the job (the CDC state, the ratings' offsets),
  the customer table caught up with it, and the ratings that were waiting rebuilt.
- `Recovery.query_start`: where the streaming query starts when its checkpoint is new.
"""

import json
import logging
from dataclasses import dataclass

from pyspark.sql import SparkSession

from enrichment_job.customers.table import CdcState, CustomerTable, lacks
from enrichment_job.driver.cdc import CdcReader, fill_unavailable, ingest_ranges
from enrichment_job.kafka.reader import TopicReader
from enrichment_job.marker import BatchMarker
from enrichment_job.runtime.checkpoints import CHECKPOINTS, check_planned, run_id
from enrichment_job.runtime.offsets import partition_offsets
from enrichment_job.settings import TABLE, JobSettings
from enrichment_job.tasks.enrich import Ratings, Reader

__all__ = [
    "PIPELINE_CHECKPOINT",
    "QUERY_START",
    "Recovery",
    "Start",
    "TopicsChanged",
    "claim_state",
    "starting_offsets",
]

log = logging.getLogger("enrichment_job")

PIPELINE_CHECKPOINT = f"{CHECKPOINTS}/pipeline"  # the enrichment query's
QUERY_START = f"{CHECKPOINTS}/query-start.json"


class TopicsChanged(ValueError):
    """The job name's last commit was made reading other topics: a name per set of topics."""


def claim_state(settings: JobSettings, marker: BatchMarker | None) -> str:
    """This state folder's run id, once the folder is known to continue the job's last commit.

    The job's last commit (`marker`, by job name) may come from another run: another state
    folder or host, or this folder before it was wiped. That run's commit is the truth. A fresh
    folder starts from it; a folder whose checkpoint and customer table stopped before it is out
    of date, and is rebuilt the same way (a re-run of its batches would write them twice)."""
    state = settings.state
    run = run_id(state)
    if marker is not None and marker.run == run and not state.exists(PIPELINE_CHECKPOINT):
        # The query's checkpoint was deleted under a run that committed: its batch ids would
        # start again at 0 and be taken for batches already written. A new run it is.
        state.remove(f"{CHECKPOINTS}/run_id")
        run = run_id(state)
    if marker is not None:
        check_planned(
            marker.run,
            marker.batch_id,
            run,
            state,
            PIPELINE_CHECKPOINT,
            key=settings.job_name,
            topic=settings.commits_topic,
        )
    if marker is None or marker.run == run:
        return run
    for name, read, topic in (
        ("ratings_topic", marker.ratings_topic, settings.ratings_topic),
        ("cdc_topic", marker.cdc_topic, settings.cdc_topic),
    ):
        if read is not None and read != topic:
            raise TopicsChanged(
                f"setting ENRICH_JOB_NAME: job {settings.job_name!r} last committed reading "
                f"{name} {read!r}, not {topic!r}; give a job over other topics its own name"
            )
    if any(state.exists(p) for p in (PIPELINE_CHECKPOINT, TABLE)):
        log.warning(
            "job %s was last committed by another run (%s, batch %s), not by this state folder's (%s): "
            "its checkpoint and customer table are out of date; rebuilding them from the last commit",
            settings.job_name,
            marker.run,
            marker.batch_id,
            run,
        )
        state.remove(CHECKPOINTS)
        state.remove(TABLE)
    else:
        log.info(
            "a fresh state folder: job %s goes on from its last commit (run %s, batch %s)",
            settings.job_name,
            marker.run,
            marker.batch_id,
        )
    return run_id(state)


def starting_offsets(
    settings: JobSettings,
    marker: BatchMarker | None,
    ratings: dict[int, tuple[int, int]],
    cdc_partitions: list[int],
) -> dict[str, dict[str, int]]:
    """Where the query starts when its checkpoint is new (Spark ignores it otherwise): the job's
    first run with the ratings at ENRICH_STARTING_OFFSETS and the CDC topic from its beginning,
    a later one where the job's last commit left both topics (partitions it never read from
    their start). `ratings`: partition -> its first and
    next offset now. The ratings' offsets are numbers, never "earliest" or "latest": the job
    reads each batch's ratings itself, from where the batch before ended, and the first batch
    from here."""
    earliest = settings.starting_offsets == "earliest"
    if marker is None:
        ratings_from = {p: low if earliest else high for p, (low, high) in ratings.items()}
        # The customer table is the CDC topic's whole history, whichever end the ratings
        # start at: from its latest end, every customer would be unknown until it changed.
        cdc_from = dict.fromkeys(cdc_partitions, -2)
    else:
        ratings_from = {p: marker.consumed_to.get(p, low) for p, (low, _) in ratings.items()}
        cdc_from = {p: marker.state.cdc_to.get(p, -2) for p in cdc_partitions}  # -2: Spark's "earliest"
    return {
        settings.ratings_topic: {str(p): o for p, o in sorted(ratings_from.items())},
        settings.cdc_topic: {str(p): o for p, o in sorted(cdc_from.items())},
    }


@dataclass(frozen=True)
class Start:
    """Where the first batch goes on from: the CDC state, and per ratings partition where the
    last commit's ratings ended and where the waiting ones start."""

    state: CdcState
    consumed_to: dict[int, int]
    waiting_from: dict[int, int]


class Recovery:
    """A start of the job, from its last commit's `marker` (None: the job name's first run)."""

    def __init__(
        self,
        spark: SparkSession,
        settings: JobSettings,
        table: CustomerTable,
        marker: BatchMarker | None,
        run: str | None,
    ) -> None:
        self.spark, self.settings, self.table, self.marker, self.run = spark, settings, table, marker, run

    def resume(self, ratings: Ratings, read: Reader) -> Start:
        """The last commit's state; the table caught up with it and the waiting ratings rebuilt."""
        marker = self.marker
        if marker is None:
            return Start(self.table.delta_state, {}, {})
        own = marker.run == self.run
        self._catch_up_table(marker.state, marker.batch_id if own else None)
        ratings.recover(marker, self.table.versions(), read)
        return Start(marker.state, dict(marker.consumed_to), dict(marker.waiting_from))

    def query_start(self, ratings_in: TopicReader) -> tuple[str, dict[int, int]]:
        """The query's starting offsets (JSON) and, per ratings partition, where the ratings
        start without a commit. Kept beside the checkpoint: a first batch run again after a
        crash reads its ratings from where its first run did (with
        ENRICH_STARTING_OFFSETS=latest, "latest" would have moved)."""
        state = self.settings.state
        kept = state.read_text(QUERY_START) if state.exists(PIPELINE_CHECKPOINT) else None
        if kept is not None:
            starting = json.loads(kept)
        else:
            cdc_partitions = ratings_in.partitions(self.settings.cdc_topic)  # the CDC reader may be busy
            starting = starting_offsets(self.settings, self.marker, ratings_in.bounds(), cdc_partitions)
            state.write_text(QUERY_START, json.dumps(starting))
        return json.dumps(starting), partition_offsets(starting, self.settings.ratings_topic)

    def _catch_up_table(self, until: CdcState, batch_id: int | None) -> None:
        """Appends to Delta what Kafka has committed but the table has not (see table.py).
        Told by CDC offsets, not batch ids: the commit may be another run's (`batch_id` None),
        whose batch ids mean nothing to this table."""
        since = self.table.delta_state
        if not lacks(since, until):
            return
        settings = self.settings
        reader = CdcReader(settings, f"{settings.job_name}-catch-up")
        try:
            # Where the table stands (a partition it never read: from its start) to the commit.
            ranges = reader.ranges(since.cdc_to, until.cdc_to, whole=True)
            topics = (settings.customers_topic, settings.dlq_topic)
            result = ingest_ranges(reader, ranges, since, self.spark, topics=topics)
        finally:
            reader.close()
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
