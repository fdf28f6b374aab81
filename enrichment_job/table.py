"""The versioned customer table (Delta Lake) and the CDC watermark, shared by both queries.

Both queries run in one driver process: the CDC query appends versions and advances the
watermark; the enrichment query reads a consistent (table version, watermark) pair. Each Delta
commit carries its watermark in commitInfo.userMetadata, so a restart resumes from the table.
"""

import json
import logging
import threading
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from enrichment_job.schemas import VERSION_FIELDS
from enrichment_job.transforms import with_validity

log = logging.getLogger("enrichment_job")


@dataclass(frozen=True)
class TableState:
    data_version: int  # the last Delta version that added customer versions
    watermark_ms: int | None  # the table holds every change up to (excluding) this database time


class CustomerTable:
    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark = spark
        self.path = path
        self._lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self._cached: tuple[int, DataFrame] | None = None
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
        """Appends a batch's versions (if any) with the watermark in the same commit, idempotently
        per batch (Delta txnAppId/txnVersion). A batch of heartbeats only moves the watermark in
        memory: after a restart the table's older watermark just makes ratings wait a moment."""
        current = self.state
        known = [w for w in (watermark_ms, current.watermark_ms) if w is not None]
        watermark = max(known) if known else None
        data_version = current.data_version
        if versions is not None:
            (
                versions.write.format("delta")
                .mode("append")
                .option("txnAppId", app_id)
                .option("txnVersion", batch_id)
                .option("userMetadata", json.dumps({"watermark_ms": watermark, "batch_id": batch_id}))
                .save(self.path)
            )
            data_version = self._latest_version()
        with self._lock:
            self._state = TableState(data_version, watermark)

    def snapshot(self) -> tuple[DataFrame, TableState]:
        """The versions with validity intervals, cached until the table's data changes. The newest
        table is read (time travel rebuilds the log and costs seconds); rows newer than the
        state's watermark start after it, so they cannot change a released rating's join."""
        state = self.state
        with self._cache_lock:
            if self._cached is None or self._cached[0] != state.data_version:
                fresh = with_validity(self.spark.read.format("delta").load(self.path)).cache()
                fresh.count()
                if self._cached is not None:
                    self._cached[1].unpersist()
                self._cached = (state.data_version, fresh)
            return self._cached[1], state

    def maintain(self, retain_hours: float = 168) -> None:
        """Compact small files and remove ones no longer referenced (older than retain_hours)."""
        from delta.tables import DeltaTable  # noqa: PLC0415

        table = DeltaTable.forPath(self.spark, self.path)
        table.optimize().executeCompaction()
        table.vacuum(retain_hours)
        log.info("customer table compacted and vacuumed")
