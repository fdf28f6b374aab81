"""The customer table on the executors: each task's Python worker keeps it between batches.

The driver folds the CDC and holds every version (`versions.VersionStore`). It broadcasts them
once as a base, and after that only each batch's new versions, each broadcast once. A worker
builds its store from the base once and adds the new versions it has not seen; the driver
broadcasts a new base when the new versions since the last reach a tenth of it (or
`REBASE_ROWS`), so a worker that starts late reads a bounded list. Spark's broadcast reaches
each executor once, whatever the number of its tasks.
"""

import logging
import threading

import pyarrow as pa
from pyspark import Broadcast, SparkContext

from enrichment_job.customers.versions import VersionStore
from enrichment_job.tasks.plan import TablePlan

__all__ = ["REBASE_ROWS", "TableShipper", "from_ipc", "to_ipc", "worker_store"]

log = logging.getLogger("enrichment_job")
REBASE_ROWS = 100_000


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


class TableShipper:
    """The driver's side: the broadcasts that make up the table a batch's tasks join with."""

    def __init__(self, sc: SparkContext) -> None:
        self.sc = sc
        self.base_id = -1
        self.base: Broadcast[bytes] | None = None
        self.base_rows = 0
        self.deltas: list[tuple[int, Broadcast[bytes]]] = []
        self.delta_rows = 0
        self.next_delta = 0
        self._old: list[Broadcast[bytes]] = []  # released once no running batch can use them

    def plan(self, store: VersionStore, new: pa.Table | None) -> TablePlan:
        """The table for a batch whose new versions (`new`, already in `store`) are given."""
        self._release()
        rows = new.num_rows if new is not None else 0
        if self.base is None or self.delta_rows + rows >= max(REBASE_ROWS, self.base_rows // 10):
            self._retire()
            table = store.table()
            self.base = self.sc.broadcast(to_ipc(table))
            self.base_id, self.base_rows = self.base_id + 1, table.num_rows
            self.deltas, self.delta_rows = [], 0
            log.info("customer table broadcast to the executors: %d versions", table.num_rows)
        elif new is not None and rows:
            self.deltas.append((self.next_delta, self.sc.broadcast(to_ipc(new))))
            self.next_delta += 1
            self.delta_rows += rows
        return TablePlan(self.base_id, self.base, tuple(self.deltas))

    def _retire(self) -> None:
        """The base and deltas of now, released at the next `_release`."""
        self._old += [b for _, b in self.deltas] + ([self.base] if self.base is not None else [])

    def _release(self) -> None:
        old, self._old = self._old, []
        for broadcast in old:
            broadcast.destroy(blocking=False)

    def close(self) -> None:
        self._retire()
        self._release()


_lock = threading.Lock()
_held: dict[str, tuple[int, int, VersionStore]] = {}  # job name -> base id, last delta id, store


def worker_store(job_name: str, plan: TablePlan) -> VersionStore:
    """The task's side: the store this worker keeps for the job, brought up to `plan`."""
    with _lock:
        held = _held.get(job_name)
        if held is None or held[0] != plan.base_id:
            store, last = VersionStore(from_ipc(plan.base.value)), -1
        else:
            _, last, store = held
        for delta_id, delta in plan.deltas:
            if delta_id > last:
                store.add(from_ipc(delta.value))
                last = delta_id
        _held[job_name] = (plan.base_id, last, store)
        return store
