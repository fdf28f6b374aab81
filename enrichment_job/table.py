"""The versioned customer table (Delta Lake) and the CDC watermark, shared by both queries.

Both queries run in one driver process: the CDC query appends versions and advances the
watermark; the enrichment query reads a consistent (table version, watermark) pair. Each Delta
commit carries its watermark in commitInfo.userMetadata, so a restart resumes from the table.
"""

import json
import logging
import threading
import time
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from enrichment_job.schemas import VERSION_FIELDS
from enrichment_job.transforms import with_validity

log = logging.getLogger("enrichment_job")


@dataclass(frozen=True)
class TableState:
    data_version: int  # the last Delta version that added customer versions
    watermark_ms: int | None  # the table holds every change up to (excluding) this database time


class CustomerTable:
    def __init__(self, spark: SparkSession, path: str, partitions: int = 2) -> None:
        self.spark = spark
        self.path = path
        self.partitions = partitions
        self._lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self._cached: DataFrame | None = None
        self._pending: list[DataFrame] = []
        self._maintaining = threading.Event()  # versions appended since the cache was last refreshed
        self._state = self._load_or_create()

    def _latest_version(self) -> int:
        """The newest table version this process knows; our own commits update it (no Spark job)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self.spark._jsparkSession, self.path)
        return int(delta_log.unsafeVolatileSnapshot().version())

    def _load_or_create(self) -> TableState:
        from delta.tables import DeltaTable  # noqa: PLC0415 - needs the Delta jars on the session

        if not DeltaTable.isDeltaTable(self.spark, self.path):
            empty = self.spark.createDataFrame([], VERSION_FIELDS)
            empty.write.format("delta").option("userMetadata", json.dumps({"watermark_ms": None})).save(
                self.path
            )
        # The newest commit that carries a watermark (maintenance commits carry none).
        history = DeltaTable.forPath(self.spark, self.path).history(50).collect()
        metas = [json.loads(h["userMetadata"]) for h in history if h["userMetadata"]]
        state = TableState(int(history[0]["version"]), metas[0].get("watermark_ms") if metas else None)
        log.info("customer table %s: data version %d, watermark %s", self.path, *vars(state).values())
        return state

    @property
    def state(self) -> TableState:
        with self._lock:
            return self._state

    def advance(
        self, versions: DataFrame | None, watermark_ms: int | None, app_id: str, batch_id: int
    ) -> None:
        """Publishes a batch's versions (if any) and the watermark to the enrichment query, then
        appends the versions to Delta with the watermark in the same commit, idempotently per
        batch (Delta txnAppId/txnVersion). A batch of heartbeats only moves the watermark in
        memory: after a restart the table's older watermark just makes ratings wait a moment.

        Publishing first takes the Delta commit (seconds here) out of the ratings' wait, and is
        safe: if the process dies before the commit, Spark runs this CDC batch again on restart
        and appends the same versions (same binlog positions), so every join made with them is
        made again the same way, and the Delta watermark it restarts from is only older."""
        current = self.state
        known = [w for w in (watermark_ms, current.watermark_ms) if w is not None]
        watermark = max(known) if known else None
        # Materialized once: kept for the enrichment query's cache after this micro-batch's
        # DataFrame is gone, and written to Delta from memory.
        added = versions.localCheckpoint() if versions is not None else None
        with self._lock:
            self._state = TableState(current.data_version, watermark)
            if added is not None:
                self._pending.append(added)
        if added is None:
            return
        (
            added.write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
            .option("userMetadata", json.dumps({"watermark_ms": watermark, "batch_id": batch_id}))
            .save(self.path)
        )
        data_version = self._latest_version()
        with self._lock:
            self._state = TableState(data_version, self._state.watermark_ms)

    def snapshot(self) -> tuple[DataFrame, TableState]:
        """The versions with validity intervals, in memory. The first call reads the whole Delta
        table; later calls fold in only the versions appended since (their customers' validity
        is recomputed, every other row is kept as it was), so a trickle of updates costs a small
        merge, not a re-read of the table. Rows newer than the state's watermark start after
        it, so they cannot change a released rating's join."""
        with self._lock:
            state, pending, self._pending = self._state, self._pending, []
        with self._cache_lock:
            if self._cached is None:
                fresh = with_validity(self.spark.read.format("delta").load(self.path))
            elif pending:
                fresh = self._merge(self._cached, reduce(DataFrame.unionByName, pending))
            else:
                return self._cached, state
            # Materialized, lineage cut; the previous one is freed once nothing refers to it.
            self._cached = fresh.coalesce(self.partitions).localCheckpoint()
            return self._cached, state

    @staticmethod
    def _merge(cached: DataFrame, added: DataFrame) -> DataFrame:
        """`cached` with `added` versions folded in: only the changed customers are recomputed."""
        ids = F.broadcast(added.select("id").distinct())
        raw = [f.name for f in VERSION_FIELDS.fields]
        changed = cached.select(*raw).join(ids, "id", "left_semi").unionByName(added.select(*raw))
        return cached.join(ids, "id", "left_anti").unionByName(with_validity(changed))

    def maintain(self, retain_hours: float = 168) -> bool:
        """Compact small files and remove ones no longer referenced (older than retain_hours), in
        a background thread: compaction takes minutes on a busy machine and must not hold back
        the CDC query (Delta lets blind appends commit while it runs). False if one is running."""
        if self._maintaining.is_set():
            return False
        self._maintaining.set()
        threading.Thread(
            target=self._maintain, args=(retain_hours,), name="delta-maintenance", daemon=True
        ).start()
        return True

    def _maintain(self, retain_hours: float) -> None:
        from delta.tables import DeltaTable  # noqa: PLC0415

        try:
            started = time.monotonic()
            table = DeltaTable.forPath(self.spark, self.path)
            table.optimize().executeCompaction()
            table.vacuum(retain_hours)
            log.info("customer table compacted and vacuumed in %.1f s", time.monotonic() - started)
        except Exception:  # a failed compaction leaves the table as it was; the next one retries
            log.exception("customer table maintenance failed; the table is unchanged")
        finally:
            self._maintaining.clear()
