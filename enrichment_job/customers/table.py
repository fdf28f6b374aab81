"""The versioned customer table: in memory for the join, in Delta Lake for people and restarts.

The enrichment join reads the versions from memory, on the driver (`versions.VersionStore`). A
background thread appends the versions that batches added to the Delta table, idempotently per
batch (an app transaction: the run's id and the batch id), with the CDC position and clock in
the commit's userMetadata. It writes with delta-rs (the `deltalake` package) straight from
Arrow, not through Spark: an append costs milliseconds of CPU where Spark's cost seconds, and
none of it sits in a micro-batch's path. A restart reads the Delta table back into memory.

After a crash the Delta table may be behind what the job had already committed to Kafka (its
appends are asynchronous); `catch_up` re-reads that stretch of the CDC topic and appends it, so
table and Kafka markers agree again before the first batch runs.
"""

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from enrichment_job.customers.versions import VERSIONS, VersionStore
from enrichment_job.kafka.batches import concat
from enrichment_job.runtime.offsets import partition_offsets

__all__ = ["CdcState", "CustomerTable", "DeltaLog", "VersionLog", "lacks"]

log = logging.getLogger("enrichment_job")
WRITER_THREAD = "delta-writer"  # the writer's thread


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


def lacks(since: CdcState, until: CdcState) -> bool:
    """Whether a table at `since` lacks CDC offsets that `until` (a later commit) covered."""
    return any(since.cdc_to.get(p, -1) < o for p, o in until.cdc_to.items())


class DeltaLog:
    """The customer table's copy in Delta Lake: read back at start, and appended to by a
    background thread with what committed batches added (`queue`), or at once (`append`)."""

    def __init__(
        self,
        path: str,
        app_id: str,
        *,
        storage_options: dict[str, str] | None = None,
        maintain_every: int = 100,
        commit_interval_s: float = 30,
    ) -> None:
        """`path`: a local path or an s3:// URI, reached with `storage_options` (delta-rs's:
        AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...; `StateDir.table_location` makes both).
        `app_id`: the app transaction's id; a batch id appended under it once is not again."""
        self.path = path
        self.app_id = app_id
        self.storage_options = dict(storage_options or {})
        self.maintain_every = maintain_every
        self.commit_interval_s = commit_interval_s
        self._writes: queue.Queue[tuple[int, pa.Table, CdcState] | None] = queue.Queue()
        self._failure: BaseException | None = None
        self._table = self._open()
        self.batch, self.state = self._load()
        self._writer = threading.Thread(target=self._write_loop, name=WRITER_THREAD, daemon=True)
        self._writer.start()

    # ---- reading -------------------------------------------------------------------------
    def _open(self) -> DeltaTable | None:
        """The table at `path`; None when none is there yet (the first append creates it)."""
        try:
            return DeltaTable(self.path, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def _load(self) -> tuple[int | None, CdcState]:
        """The newest commit's batch and CDC state; none for a table not written yet."""
        if self._table is None:
            log.info("customer table %s: not written yet; the first commit creates it", self.path)
            return None, CdcState()
        # The newest commit that carries CDC state (maintenance commits carry none).
        for entry in self._table.history(100):
            meta = json.loads(entry["userMetadata"]) if entry.get("userMetadata") else {}
            if "cdc_to" in meta:
                state = CdcState.from_json(meta)
                log.info("customer table %s: batch %s, CDC %s", self.path, meta.get("batch_id"), state)
                return meta.get("batch_id"), state
        return None, CdcState()

    def read_all(self) -> pa.Table | None:
        """Every version in the Delta table (None before the first commit)."""
        if self._table is None:
            return None
        started = time.monotonic()
        versions = self._table.to_pyarrow_table(columns=VERSIONS.names)
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
        """Appends now, as one commit. `batch_id` None: the catch-up of a run that goes on from
        another run's commit. Its batch ids are not this run's, and as this run's transaction
        version they would make this run's own appends up to them look done; the table's CDC
        offsets say afterwards that it was made.

        A batch id the log took before is skipped (a batch run again), unless `state` goes
        further than the log's CDC offsets: a batch's second transaction (the release of its
        waiting ratings) moved them after the log took the batch, and a restart re-read what
        it added. That is appended without the batch id, told by its offsets."""
        meta = {"batch_id": batch_id, **state.as_json()}
        transactions = None
        if batch_id is not None:
            done = self._appended(batch_id)
            if done is not None and not lacks(self.state, state):
                log.info("customer table: batch %d was appended before (up to %d); skipped", batch_id, done)
                self.batch, self.state = batch_id, state
                return
            transactions = [Transaction(self.app_id, batch_id)] if done is None else None
        write_deltalake(
            self._table if self._table is not None else self.path,
            versions.cast(VERSIONS),
            mode="append",
            storage_options=None if self._table is not None else self.storage_options,
            commit_properties=CommitProperties(
                custom_metadata={"userMetadata": json.dumps(meta)}, app_transactions=transactions
            ),
        )
        if self._table is None:
            self._table = self._open()
            log.info("customer table %s created", self.path)
        self.batch, self.state = batch_id, state

    def _appended(self, batch_id: int) -> int | None:
        """The app transaction's version in the table when it covers `batch_id`, else None."""
        if self._table is None:
            return None
        self._table.update_incremental()  # what another writer committed meanwhile
        done = self._table.transaction_version(self.app_id)
        return done if done is not None and done >= batch_id else None

    def _write_loop(self) -> None:
        """Appends what batches queued, at most once per `commit_interval_s`: each commit adds
        a file and a log entry, which readers and compaction pay for."""
        commits, stopping = 0, False
        last: float | None = None
        while not stopping:
            items: list[tuple[int, pa.Table, CdcState]] = []
            first = self._writes.get()
            if first is None:
                return
            items.append(first)
            # The first append waits an interval too: a start's first batches go in one commit.
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

    def maintain(self, retain_hours: int = 168) -> None:
        """Compacts small files and removes unreferenced ones older than retain_hours. Runs on the
        writer thread, between appends."""
        if self._table is None:
            return
        try:
            started = time.monotonic()
            compacted = self._table.optimize.compact()
            removed = self._table.vacuum(retain_hours, dry_run=False)
            log.info(
                "customer table compacted (%s files into %s) and vacuumed (%d files) in %.1f s",
                compacted.get("numFilesRemoved"),
                compacted.get("numFilesAdded"),
                len(removed),
                time.monotonic() - started,
            )
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
