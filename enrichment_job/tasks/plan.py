"""The contracts between the driver and its tasks: a task's plan, the marker it commits with its
output, and what it tells the driver back. Each is frozen, and the marker has one encoding."""

import json
from dataclasses import asdict, dataclass

from pyspark import Broadcast

from enrichment_job.customers.table import CdcState
from enrichment_job.marker import BatchMarker
from enrichment_job.settings import JobSettings

__all__ = ["PartitionMarker", "PartitionPlan", "TablePlan", "TaskOutcome"]


@dataclass(frozen=True)
class TablePlan:
    """Where a task finds the batch's customer table: every version at `base_id` (Arrow IPC
    bytes, broadcast once), then the batches' new versions since, in order, each broadcast once
    with an id that only grows."""

    base_id: int
    base: Broadcast[bytes]
    deltas: tuple[tuple[int, Broadcast[bytes]], ...]


@dataclass(frozen=True)
class PartitionPlan:
    """One task's work in a batch: the ratings of `partition` from where its last commit left
    them (`start` and `waiting_from` when it has none: the job's first start, or the cut-over
    from the join on the driver) up to `end`, at most `share` of them, joined at `watermark_ms`
    with the batch's table (`TablePlan`, given to the batch's tasks beside their plans)."""

    settings: JobSettings
    run: str
    batch_id: int
    partition: int
    start: int
    end: int
    share: int
    max_waiting: int
    max_waiting_bytes: int  # the partition's share of ENRICH_MAX_WAITING_BYTES
    max_bytes: int  # the partition's share of ENRICH_MAX_BATCH_BYTES: what its read takes at most
    watermark_ms: int | None
    waiting_from: int | None = None  # with `start`: the driver's last commit, before the cut-over
    start_watermark_ms: int | None = None  # the watermark those waiting ratings were decided at


@dataclass(frozen=True)
class PartitionMarker:
    """What a task commits in its transaction, keyed by job name and partition: which batch, how
    far the ratings were read and where the ones still waiting start. It goes to the commits
    topic's partition `partition % its partitions`; should their number change, a task that
    takes a partition over reads them all and goes on from the marker with the highest `seq`."""

    run: str
    batch_id: int
    partition: int
    seq: int  # one more than the partition's marker before: the last is the one with the most
    consumed_to: int
    waiting_from: int | None
    watermark_ms: int | None
    enriched: int = 0
    alerts: int = 0
    dlq: int = 0
    waiting: int = 0

    @staticmethod
    def key(job_name: str, partition: int) -> bytes:
        return f"{job_name}/ratings/{partition}".encode()

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @staticmethod
    def decode(value: bytes) -> "PartitionMarker":
        return PartitionMarker(**json.loads(value))

    def as_recovery(self) -> BatchMarker:
        """The partition's part of a batch marker, as `enrich.Ratings.recover` reads one."""
        waiting = {} if self.waiting_from is None else {self.partition: self.waiting_from}
        return BatchMarker(
            self.batch_id,
            self.run,
            CdcState(self.watermark_ms),
            join_in="tasks",
            consumed_to={self.partition: self.consumed_to},
            waiting_from=waiting,
        )


@dataclass(frozen=True)
class TaskOutcome:
    """What a task tells the driver: what it wrote, or that the batch was already committed."""

    partition: int
    done_before: bool  # the partition's marker already had this batch: nothing written
    consumed_to: int
    waiting: int
    new: int = 0
    enriched: int = 0
    alerts: int = 0
    dlq: int = 0
    seconds: float = 0.0
    steps: tuple[tuple[str, float], ...] = ()  # where the task's time went
