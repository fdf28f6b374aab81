"""The versioned customer table: in memory for the join, in Delta Lake for people and restarts.

The enrichment join reads the versions from memory, on the driver (`versions.VersionStore`). A
background thread appends the versions that batches added to the Delta table, idempotently per
batch (txnAppId/txnVersion), with the CDC position and clock in the commit's userMetadata. It
does not sit in a micro-batch's path, and its Spark jobs run in the fair scheduler's background
pool. A restart reads the Delta table back into memory.

After a crash the Delta table may be behind what the job had already committed to Kafka (its
appends are asynchronous); `catch_up` re-reads that stretch of the CDC topic and appends it, so
table and Kafka markers agree again before the first batch runs.
"""

import json
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from enrichment_job.batch_io import concat
from enrichment_job.kafka_in import partition_offsets
from enrichment_job.schemas import VERSION_FIELDS
from enrichment_job.spark_internals import lower_thread_priority
from enrichment_job.state_dir import StateDir
from enrichment_job.versions import VERSIONS, VersionStore

log = logging.getLogger("enrichment_job")
# An append of more versions than this is staged as Parquet, in files of this many each.
STAGED_ROWS = 200_000
STAGING = "staging"  # in the state folder: large appends on their way to Delta
BACKGROUND_POOL = "background"  # the scheduler pool of the writer and folds (scheduler_pools.xml)
WRITER_THREAD = "delta-writer"  # the writer's thread, in Python and in the driver JVM


@dataclass(frozen=True)
class CdcState:
    """Where CDC ingestion stands: the database clock (the completeness watermark), the furthest
    position seen (`change_events.Position`: MariaDB's GTID sequence number, binlog file number,
    position and row, or PostgreSQL's LSNs), and the next CDC
    offset to read per partition."""

    clock_ms: int | None = None
    position: tuple[int, int, int, int] | None = None
    cdc_to: dict[int, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "watermark_ms": self.clock_ms,
            "position": list(self.position) if self.position else None,
            "cdc_to": {str(p): o for p, o in self.cdc_to.items()},
        }

    @staticmethod
    def from_json(meta: dict[str, Any]) -> "CdcState":
        position = [int(part) for part in meta.get("position") or []]
        if len(position) == 3:  # written before positions carried the GTID: none known
            position = [-1, *position]
        return CdcState(
            meta.get("watermark_ms"),
            (position[0], position[1], position[2], position[3]) if position else None,
            partition_offsets(meta, "cdc_to"),
        )


class DeltaLog:
    """The customer table's copy in Delta Lake: read back at start, and appended to by a
    background thread with what committed batches added (`queue`), or at once (`append`)."""

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        app_id: str,
        *,
        maintain_every: int = 200,
        commit_interval_s: float = 30,
        staging: StateDir | None = None,
        writer_nice: int = 0,
    ) -> None:
        """`staging`: where a large append is staged for the executors to read (the job's
        state folder); without, every append goes through the driver. `writer_nice`: added
        to the CPU priority of the writer's threads (0: none)."""
        self.spark = spark
        self.path = path
        self.staging = staging
        if staging is not None:
            staging.remove(STAGING)  # what an append killed on its way left
        self.app_id = app_id
        self.maintain_every = maintain_every
        self.commit_interval_s = commit_interval_s
        self.writer_nice = writer_nice
        self._writes: queue.Queue[tuple[int, pa.Table, CdcState] | None] = queue.Queue()
        self._failure: BaseException | None = None
        self._written = False  # a Delta table is at `path`
        self.batch, self.state = self._load()
        self._writer = threading.Thread(target=self._write_loop, name=WRITER_THREAD, daemon=True)
        self._writer.start()

    # ---- reading -------------------------------------------------------------------------
    def _load(self) -> tuple[int | None, CdcState]:
        """The newest commit's batch and CDC state; none for a table not written yet. The first
        append creates the table: creating it at start cost a fresh start 13 s here (Delta's
        first write in a JVM), and reading it back 6 s more, before the first batch."""
        from delta.tables import DeltaTable  # noqa: PLC0415 - needs the Delta jars on the session

        if not DeltaTable.isDeltaTable(self.spark, self.path):
            log.info("customer table %s: not written yet; the first commit creates it", self.path)
            return None, CdcState()
        self._written = True
        # The newest commit that carries CDC state (maintenance commits carry none).
        for entry in DeltaTable.forPath(self.spark, self.path).history(100).collect():
            meta = json.loads(entry["userMetadata"]) if entry["userMetadata"] else {}
            if "cdc_to" in meta:
                state = CdcState.from_json(meta)
                log.info("customer table %s: batch %s, CDC %s", self.path, meta.get("batch_id"), state)
                return meta.get("batch_id"), state
        return None, CdcState()

    def read_all(self) -> pa.Table | None:
        """Every version in the Delta table, onto the driver (None before the first commit)."""
        if not self._written:
            return None
        started = time.monotonic()
        versions = self.spark.read.format("delta").load(self.path).select(*VERSIONS.names).toArrow()
        log.info(
            "customer table: %d versions read from Delta in %.1f s",
            versions.num_rows,
            time.monotonic() - started,
        )
        return versions.cast(VERSIONS)

    # ---- writing -------------------------------------------------------------------------
    def queue(self, batch_id: int, versions: pa.Table, state: CdcState) -> None:
        """A committed batch's versions, for the background thread to append."""
        self._writes.put((batch_id, versions, state))

    def append(self, batch_id: int | None, versions: pa.Table, state: CdcState) -> None:
        """Appends now. `batch_id` None: the catch-up of a run that goes on from another run's
        commit. Its batch ids are not this run's, and as this run's txnVersion they would make
        Delta skip this run's own appends up to them; the append is one commit, and the table's
        CDC offsets say afterwards that it was made."""
        meta = {"batch_id": batch_id, **state.as_json()}
        staging = self.staging if versions.num_rows > STAGED_ROWS else None
        if staging is not None:
            staged = self._stage(staging, versions)
            frame = self.spark.read.schema(VERSION_FIELDS).parquet(staging.child(staged))
        else:
            frame = self.spark.createDataFrame(versions, schema=VERSION_FIELDS).coalesce(1)
        write = frame.write.format("delta").mode("append").option("userMetadata", json.dumps(meta))
        if batch_id is not None:
            write = write.option("txnAppId", self.app_id).option("txnVersion", batch_id)
        try:
            write.save(self.path)
        finally:
            if staging is not None:
                staging.remove(staged)
        self.batch, self.state, self._written = batch_id, state, True

    @staticmethod
    def _stage(staging: StateDir, versions: pa.Table) -> str:
        """A large append's versions as Parquet files in the state folder `staging`, for the
        executors to read; the folder in it. A direct append's rows travel from the driver
        inside the tasks that write them, through the driver's JVM: a fresh start's history of
        millions of versions exceeds a cluster's RPC message limit (128 MB) and a 2g driver's
        heap."""
        name = f"{STAGING}/{uuid.uuid4().hex}"
        fs, folder = staging.locate(name)
        fs.create_dir(folder, recursive=True)
        for n, start in enumerate(range(0, versions.num_rows, STAGED_ROWS)):
            part = versions.slice(start, STAGED_ROWS)
            pq.write_table(part, f"{folder}/part-{n:05d}.parquet", filesystem=fs)
        return name

    def _write_loop(self) -> None:
        """Appends what batches queued, at most once per `commit_interval_s`: a Delta commit
        costs seconds of CPU whatever its size, and this machine has two cores."""
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", BACKGROUND_POOL)
        # An append's planning and commit run on this thread's JVM thread: seconds of CPU that
        # came in bursts beside the micro-batches, which now go first.
        if self.writer_nice:
            if lower_thread_priority(self.spark, WRITER_THREAD, self.writer_nice):
                log.info("customer table: the Delta writer's threads run at nice +%d", self.writer_nice)
            else:
                log.warning("customer table: could not lower the Delta writer's CPU priority (not Linux?)")
        commits, stopping = 0, False
        last: float | None = None
        while not stopping:
            items: list[tuple[int, pa.Table, CdcState]] = []
            first = self._writes.get()
            if first is None:
                return
            items.append(first)
            # The first append waits an interval too: after a fresh start or a long stop the
            # first batches are the largest, and the append would take cores from them.
            last = last if last is not None else time.monotonic()
            deadline = last + self.commit_interval_s
            while not stopping and (time.monotonic() < deadline or not self._writes.empty()):
                try:
                    more = self._writes.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    continue
                if more is None:  # closing: write what is queued, then stop
                    stopping = True
                else:
                    items.append(more)
            try:
                started = last = time.monotonic()
                self.append(items[-1][0], concat([i[1] for i in items]), items[-1][2])
                log.info(
                    "customer table: batches %d..%d appended to Delta in %.2f s",
                    items[0][0],
                    items[-1][0],
                    time.monotonic() - started,
                )
                commits += 1
                if commits % self.maintain_every == 0:
                    self.maintain()
            except BaseException as err:  # surfaces in the next micro-batch: the job stops
                self._failure = err
                log.exception("appending customer versions to Delta failed")
                return

    def raise_failure(self) -> None:
        """The background append's failure, if one failed."""
        if self._failure is not None:
            raise RuntimeError("the customer table's Delta writer failed") from self._failure

    def close(self, timeout_s: float = 120) -> None:
        """Writes what is queued, then stops the writer."""
        self._writes.put(None)
        self._writer.join(timeout_s)

    def maintain(self, retain_hours: float = 168) -> None:
        """Compacts small files and removes unreferenced ones older than retain_hours. Runs on the
        writer thread, between appends (Delta lets blind appends commit while it runs)."""
        from delta.tables import DeltaTable  # noqa: PLC0415

        try:
            started = time.monotonic()
            table = DeltaTable.forPath(self.spark, self.path)
            table.optimize().executeCompaction()
            table.vacuum(retain_hours)
            log.info("customer table compacted and vacuumed in %.1f s", time.monotonic() - started)
        except Exception:  # a failed compaction leaves the table as it was; the next one retries
            log.exception("customer table maintenance failed; the table is unchanged")


class VersionLog(Protocol):
    """What the customer table needs of its durable copy (`DeltaLog`)."""

    path: str
    batch: int | None
    state: CdcState

    def read_all(self) -> pa.Table | None: ...
    def queue(self, batch_id: int, versions: pa.Table, state: CdcState) -> None: ...
    def append(self, batch_id: int | None, versions: pa.Table, state: CdcState) -> None: ...
    def raise_failure(self) -> None: ...
    def close(self, timeout_s: float = 120) -> None: ...


class CustomerTable:
    """Every customer version: in memory for the join (`VersionStore`), and in its log."""

    def __init__(self, log: VersionLog) -> None:
        self.log = log
        self.store = VersionStore(log.read_all())

    @property
    def path(self) -> str:
        return self.log.path

    @property
    def delta_batch(self) -> int | None:
        """The newest batch in the log."""
        return self.log.batch

    @property
    def delta_state(self) -> CdcState:
        """Where CDC ingestion stood at the newest batch in the log."""
        return self.log.state

    def versions(self) -> VersionStore:
        """Every version known to this process, for the join."""
        return self.store

    def add(self, versions: pa.Table) -> None:
        """New versions, visible to the join at once. If the batch then fails, the job stops
        and its next run rebuilds the table from the log and the CDC topic."""
        self.log.raise_failure()
        self.store.add(versions)

    def commit(self, batch_id: int, versions: pa.Table, state: CdcState) -> None:
        """A batch's versions, for the log, once the batch is committed to Kafka."""
        self.log.queue(batch_id, versions, state)

    def catch_up(self, batch_id: int | None, versions: pa.Table, state: CdcState) -> None:
        """What a restart re-read from the CDC topic (see the module doc): appended to the log
        at once, then joined."""
        self.log.append(batch_id, versions, state)
        self.add(versions)

    def close(self, timeout_s: float = 120) -> None:
        """Writes what is queued to the log, then stops its writer."""
        self.log.close(timeout_s)
