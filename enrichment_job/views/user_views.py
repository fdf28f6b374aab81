"""The views declared in SQL, kept by the views job beside the built-in ones: each in a streaming
query of its own, created and dropped while the job runs as the catalog says (`catalog.Follower`),
without touching the other views' queries or state.

A created view reads the enriched topic from its earliest offset (a backfill), keeps its groups
in Spark's RocksDB state, and writes each batch's changed rows to its compacted changelog topic
(made through the admin API) with its marker, in one Kafka transaction, as the built-in views do
(`app.ViewsSink`). A dropped view's query stops, and its checkpoint and topic are deleted; a
marker tells the query service to forget its rows. A view the job cannot keep (it refuses what
`definition.compile_view` refuses, or its query fails) is logged and marked refused; the other
views go on.
"""

import json
import logging
import threading
import time
from collections import defaultdict
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from enrichment_job.batch_io import collect
from enrichment_job.kafka_out import Records, last_marker
from enrichment_job.recovery import CHECKPOINTS
from enrichment_job.views.app import BatchSink, column_types, enriched_stream
from enrichment_job.views.catalog import (
    BUILT_IN_NAMES,
    CatalogError,
    Entry,
    Follower,
    delete_topic,
    ensure_topic,
)
from enrichment_job.views.definition import CompiledView, ViewRefused, compile_view, enriched_columns, parse
from enrichment_job.views.settings import ViewsSettings

log = logging.getLogger("enrichment_job.views")

# A changelog record at most: Kafka's default largest record is 1 MiB (message.max.bytes).
MAX_RECORD_BYTES = 1_000_000
_DEAD_LETTER_VALUE_BYTES = 65_536  # the start of a row too large to write, kept in its dead letter
_WINDOW_MS = "__window_start_ms"  # a retention's extra column: the row's window start, in ms


def marker_key(settings: ViewsSettings, name: str) -> str:
    """The key of a SQL view's marker in the commits topic: the same for every creation of a name,
    so that the compacted topic keeps the newest word on it (rows, or dropped)."""
    return f"{settings.name}-sql:{name}"


class SqlViewSink:
    """foreachBatch handler of a SQL view: its changed rows (key: the key columns as JSON; value:
    the row as JSON, nulls kept) and its marker, in one transaction. A row whose key is over
    VIEWS_JOB_MAX_KEY_BYTES, or whose record would be over Kafka's limit, goes to the views'
    dead-letter topic with the reason instead (a record too large would stop the view on every
    retry)."""

    def __init__(
        self, settings: ViewsSettings, query: str, view: CompiledView, entry: Entry, run: str
    ) -> None:
        self.sink = BatchSink(settings, query, run)
        self.settings, self.view, self.entry = settings, view, entry
        self.columns = column_types(view.rows)
        names = [c["name"] for c in self.columns]
        self.select = [
            F.to_json(F.struct(*[F.col(k) for k in view.key])).alias("key"),
            F.to_json(F.struct(*[F.col(n) for n in names]), {"ignoreNullFields": "false"}).alias("value"),
        ]
        self.newest = "last_rating_time" if "last_rating_time" in names else None
        # With a retention: each window's keys in the changelog, to write their tombstones once
        # a window `retention_ms` newer has come (read back from the topic after a restart).
        self.windows: dict[int, set[bytes]] = defaultdict(set)
        if view.retention_ms is not None and view.window_start is not None:
            self.select.append(F.unix_millis(F.col(view.window_start)).alias(_WINDOW_MS))
            self.windows.update(_windows_in_topic(settings, settings.topic(view.name), view.window_start))
        previous = self.sink.out.marker if self.sink.out.committed(0) else None
        self.max_rating_time: int | None = previous.get("max_rating_time") if previous else None
        self.backfill_to = _ends_now(settings)
        # A restart of a view that was live stays live (its marker says so); a new one backfills.
        said = last_marker(
            settings.producer_config(), settings.commits_topic, marker_key(settings, view.name)
        )
        self.live = bool(
            previous
            and said
            and said.get("state") == "live"
            and said.get("created_at_ms") == entry.created_at_ms
        )

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        extra = (self.newest,) if self.newest else ()
        windowed = (_WINDOW_MS,) if self.view.retention_ms is not None else ()
        table = collect(batch.select(*self.select, *extra), extra=(*extra, *windowed))
        if self.newest and table.num_rows:
            newest = pc.max(table.column(self.newest)).as_py()
            if newest is not None and (self.max_rating_time is None or newest > self.max_rating_time):
                self.max_rating_time = newest
        rows, dead = self._split(table)
        written = {k for k in rows.keys if k is not None}
        expired = self._expire(table, written) if self.view.retention_ms is not None else []
        tombstones = Records(rows.topic, expired, [None] * len(expired))
        self.sink.write(
            batch_id, [rows, tombstones, dead], {"max_rating_time": self.max_rating_time}, self._marker
        )
        if expired:
            log.info(
                "view %s, batch %d: %d rows of windows past the retention removed",
                self.view.name,
                batch_id,
                len(expired),
            )
        if table.num_rows:
            log.info(
                "view %s, batch %d: %d rows changed (%d dead letters), %.2f s",
                self.view.name,
                batch_id,
                len(rows),
                len(dead),
                time.monotonic() - started,
            )

    def abort(self) -> None:
        """After its query stopped: a transaction a batch left open is aborted now, rather than
        holding back read_committed readers of the commits topic until the broker's timeout."""
        try:
            self.sink.out.producer.abort_transaction(10)
        except KafkaException:
            pass  # none was open

    def _expire(self, table: pa.Table, written: set[bytes]) -> list[bytes]:
        """Adds the batch's written rows to their windows; returns the keys of the windows that
        are now older than the newest one's start minus the retention (their tombstones)."""
        for key, start in zip(
            table.column("key").to_pylist(), table.column(_WINDOW_MS).to_pylist(), strict=True
        ):
            if key in written and start is not None:
                self.windows[int(start)].add(key)
        if not self.windows:
            return []
        assert self.view.retention_ms is not None
        oldest_kept = max(self.windows) - self.view.retention_ms
        expired = [start for start in self.windows if start < oldest_kept]
        return [key for start in sorted(expired) for key in sorted(self.windows.pop(start))]

    def _split(self, table: pa.Table) -> tuple[Records, Records]:
        keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
        good_k, good_v, bad_k, bad_v = [], [], [], []
        bad_h: list[list[tuple[str, str | bytes | None]] | None] = []
        for key, value in zip(keys, values, strict=True):
            reason = None
            if len(key) > self.settings.max_key_bytes:
                reason = (
                    f"key of {len(key)} bytes, over VIEWS_JOB_MAX_KEY_BYTES ({self.settings.max_key_bytes})"
                )
            elif len(key) + len(value or b"") > MAX_RECORD_BYTES:
                reason = (
                    f"row of {len(key) + len(value or b'')} bytes, over a Kafka record's {MAX_RECORD_BYTES}"
                )
            if reason is None:
                good_k.append(key)
                good_v.append(value)
                continue
            bad_k.append(key[: self.settings.max_key_bytes])
            bad_v.append((value or b"")[:_DEAD_LETTER_VALUE_BYTES])
            bad_h.append(
                [
                    ("dlq.reason", f"view {self.view.name}: {reason}".encode()),
                    ("dlq.stage", b"views"),
                    ("dlq.view", self.view.name.encode()),
                ]
            )
        return (
            Records(self.settings.topic(self.view.name), good_k, good_v),
            Records(self.settings.dlq_topic, bad_k, bad_v, bad_h),
        )

    def _marker(self, marker: dict[str, Any]) -> Records:
        ends = {int(p): int(o) for p, o in marker["enriched_to"].items()}
        if not self.live and all(ends.get(p, 0) >= o for p, o in self.backfill_to.items()):
            self.live = True
            log.info("view %s: backfilled; live", self.view.name)
        body = {
            "view": self.view.name,
            "key": list(self.view.key),
            "columns": self.columns,
            "state": "live" if self.live else "backfilling",
            "sql": self.entry.sql,
            "created_at_ms": self.entry.created_at_ms,
            "batch_id": marker["batch_id"],
            "enriched_to": marker["enriched_to"],
            "max_rating_time": self.max_rating_time,
            "written_at_ms": marker["written_at_ms"],
        }
        key = marker_key(self.settings, self.view.name).encode()
        return Records(self.settings.commits_topic, [key], [json.dumps(body).encode()])


class SqlViews:
    """The running SQL views of a views job, by name."""

    def __init__(self, spark: SparkSession, settings: ViewsSettings, run: str) -> None:
        self.spark, self.settings, self.run = spark, settings, run
        self.queries: dict[str, tuple[StreamingQuery, str, SqlViewSink]] = {}  # name -> query, folder, sink
        self._lock = threading.Lock()
        self.follower: Follower | None = None

    @classmethod
    def follow(cls, spark: SparkSession, settings: ViewsSettings, run: str) -> "SqlViews":
        """The SQL views, created and dropped as the catalog (VIEWS_JOB_CATALOG_TOPIC) says."""
        views = cls(spark, settings, run)
        views.follower = Follower(
            settings.producer_config(), settings.catalog_topic, views.create, views.drop
        )
        views.follower.start()
        return views

    def create(self, entry: Entry) -> None:
        with self._lock:
            try:
                self._create(entry)
            except ViewRefused as err:
                log.error("view %s refused: %s", entry.name, err)
                self._announce(entry.name, {"state": "refused", "error": str(err), "sql": entry.sql})
            except CatalogError as err:
                log.error("view %s cannot start: %s", entry.name, err)
                self._announce(entry.name, {"state": "failed", "error": str(err), "sql": entry.sql})

    def _create(self, entry: Entry) -> None:
        if entry.name in BUILT_IN_NAMES:
            raise ViewRefused(f"{entry.name}: a built-in view has that name")
        view = parse(entry.name, entry.sql)
        readable = enriched_stream(self.spark, self.settings).where(F.col("dlq_reason").isNull())
        compiled = compile_view(self.spark, view, enriched_columns(readable))
        topic = self.settings.topic(entry.name)
        if ensure_topic(self.settings.producer_config(), topic, 1):
            log.info("view %s: created its changelog topic %s", entry.name, topic)
        folder = f"sql-{entry.name}-{entry.created_at_ms}"
        sink = SqlViewSink(self.settings, folder, compiled, entry, self.run)
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", "background")
        query = (
            compiled.rows.writeStream.queryName(f"sql-{entry.name}")
            .outputMode("update")
            .foreachBatch(sink)
            .option("checkpointLocation", self.settings.state.child(CHECKPOINTS, folder))
            .trigger(processingTime=view.trigger or self.settings.trigger_interval)
            .start()
        )
        self.queries[entry.name] = (query, folder, sink)
        reach = ", ".join(f"{p}: {o}" for p, o in sorted(sink.backfill_to.items()))
        log.info(
            "view %s: key (%s); backfilling from the enriched topic's earliest offsets to its end now (%s)",
            entry.name,
            ", ".join(compiled.key),
            reach,
        )

    def drop(self, name: str) -> None:
        with self._lock:
            running = self.queries.pop(name, None)
            if running is not None:
                query, folder, sink = running
                query.stop()
                sink.abort()
                self.settings.state.remove(f"{CHECKPOINTS}/{folder}")
            try:
                delete_topic(self.settings.producer_config(), self.settings.topic(name))
            except CatalogError as err:
                log.error("view %s: %s", name, err)
            self._announce(name, {"state": "dropped", "dropped": True})
            log.info("view %s dropped: its query, checkpoint and topic are gone", name)

    def healthy(self) -> bool:
        """Whether every running SQL view's query is active; a failed one is marked and forgotten
        (the others, and the built-in views, go on)."""
        with self._lock:
            for name, (query, _folder, _sink) in list(self.queries.items()):
                if query.isActive:
                    continue
                error = query.exception()
                log.error("view %s: its query stopped: %s", name, error)
                self._announce(name, {"state": "failed", "error": str(error)[:2000]})
                del self.queries[name]
        return True

    def stop(self) -> None:
        if self.follower is not None:
            self.follower.stop()
        with self._lock:
            for query, _folder, _sink in self.queries.values():
                query.stop()

    def _announce(self, name: str, body: dict[str, Any]) -> None:
        """A marker for the query service that is not a batch's: refused, failed or dropped."""
        value = {"view": name, **body, "written_at_ms": int(time.time() * 1000)}
        producer = Producer({**self.settings.producer_config(), "enable.idempotence": True})
        producer.produce(
            self.settings.commits_topic,
            key=marker_key(self.settings, name).encode(),
            value=json.dumps(value).encode(),
            partition=0,
        )
        if producer.flush(30):
            log.error(
                "view %s: the marker %s did not reach %s", name, body["state"], self.settings.commits_topic
            )


def _windows_in_topic(settings: ViewsSettings, topic: str, window_start: str) -> dict[int, set[bytes]]:
    """The keys a view's changelog topic holds now, by the start of their window (ms), read from
    its start (committed records; a tombstone takes its key out)."""
    consumer = Consumer(
        {
            **settings.producer_config(),
            "group.id": "views-backfill-probe",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    kept: dict[bytes, int] = {}
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        if meta.error is not None:
            return {}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
        pending = set(meta.partitions)
        while pending:
            msg = consumer.poll(5)
            if msg is None:
                raise KafkaException(f"{topic}: no record within 5 s before its end")
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                pending.discard(int(msg.partition() or 0))
                continue
            key, value = msg.key(), msg.value()
            if key is None:
                continue
            if value is None:
                kept.pop(key, None)
                continue
            start = json.loads(value).get(window_start)  # the row holds it, key column or not
            if isinstance(start, str):
                kept[key] = int(datetime.fromisoformat(start).timestamp() * 1000)
    finally:
        consumer.close()
    windows: dict[int, set[bytes]] = defaultdict(set)
    for key, start in kept.items():
        windows[start].add(key)
    return windows


def _ends_now(settings: ViewsSettings) -> dict[int, int]:
    """The enriched topic's end offsets now (committed records), per partition."""
    consumer = Consumer(
        {
            **settings.producer_config(),
            "group.id": "views-backfill-probe",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        meta = consumer.list_topics(settings.enriched_topic, timeout=30).topics[settings.enriched_topic]
        ends = {}
        for part in meta.partitions:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(settings.enriched_topic, part), timeout=30, cached=False
            )
            ends[part] = high
        return ends
    finally:
        consumer.close()
