"""The views declared in SQL, kept by the views job beside the built-in ones: each in a streaming
query of its own, created and dropped while the job runs as the catalog says (`catalog.Follower`),
without touching the other views' queries or state.

A created view reads the enriched topic from its earliest offset (a backfill), keeps its groups
in Spark's RocksDB state, and writes each batch's changed rows to its compacted changelog topic
(made through the admin API) with its marker, in one Kafka transaction, as the built-in views do
(`app.ViewsSink`). A dropped view's query stops, and its checkpoint and topic are deleted; a
marker tells the query service to forget its rows. A view the job cannot keep (it refuses what
`definition.compile_view` refuses, or its query fails) is logged and marked refused or failed;
the other views go on.

A replacement (blue/green) is a new version of a view: a query, checkpoint and topic of its own,
backfilling while the version it replaces goes on serving. Its markers say `backfilling`, then
`live` once it has read the enriched topic to where it ended at its start; the query service
then serves it, and the job stops the old version and deletes its checkpoint and topic.
"""

import hashlib
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from enrichment_job.kafka.batches import Slices
from enrichment_job.kafka.claim_check import ClaimCheck
from enrichment_job.kafka.transactions import Records
from enrichment_job.runtime.checkpoints import CHECKPOINTS
from enrichment_job.runtime.state_dir import StateDir
from enrichment_job.views.app import BatchSink, column_types, enriched_stream, open_output
from enrichment_job.views.catalog import (
    BUILT_IN_NAMES,
    CatalogError,
    Entry,
    Follower,
    committed_reader,
    delete_topic,
    ensure_topic,
    marker_key,
)
from enrichment_job.views.definition import (
    VISIBLE,
    CompiledView,
    ViewRefused,
    compile_view,
    enriched_columns,
    fields_read,
    parse,
)
from enrichment_job.views.query_marker import QueryMarker
from enrichment_job.views.settings import DLQ_STAGE, ViewsSettings
from foundation.kafka_record import MAX_RECORD_BYTES
from foundation.view_marker import ViewMarker

__all__ = ["Leftovers", "SqlViewSink", "SqlViews"]

log = logging.getLogger("enrichment_job.views")

_DEAD_LETTER_VALUE_BYTES = 65_536  # the start of a row too large to write, kept in its dead letter
# How long a deleted checkpoint folder is watched for files written after its query stopped: the
# RocksDB state store uploads its snapshots in a maintenance thread, every
# spark.sql.streaming.stateStore.maintenanceInterval (60 s by default), and one that was under
# way as the query stopped wrote its snapshot into the folder after it was deleted.
_LINGER_S = 150.0
_WINDOW_MS = "__window_start_ms"  # a retention's extra column: the row's window start, in ms


class SqlViewSink:
    """foreachBatch handler of a SQL view: its changed rows (key: the key columns as JSON; value:
    the row as JSON, nulls kept) and its marker, in one transaction. A row that does not match
    the view's HAVING is a tombstone: it leaves the view (a group that never matched gets one
    too, as a filtered KTable's does). A row whose key is over VIEWS_JOB_MAX_KEY_BYTES, or whose
    record would be over Kafka's limit, goes to the views' dead-letter topic with the reason
    instead (a record too large would stop the view on every retry)."""

    def __init__(  # noqa: PLR0917 - what `open` made and read, handed over
        self,
        settings: ViewsSettings,
        view: CompiledView,
        entry: Entry,
        sink: BatchSink,
        windows: dict[int, set[bytes]],
        backfill_to: dict[int, int],
    ) -> None:
        """Takes what `open` made and read; does no I/O of its own."""
        self.sink = sink
        self.settings, self.view, self.entry = settings, view, entry
        self.topic = entry.changelog(settings.topic_prefix)
        self.claim_check = ClaimCheck.of(settings, DLQ_STAGE)
        shown = {name for name, _ in view.columns}  # not VISIBLE
        self.columns = [c for c in column_types(view.rows) if c["name"] in shown]
        names = [c["name"] for c in self.columns]
        value = F.to_json(F.struct(*[F.col(n) for n in names]), {"ignoreNullFields": "false"})
        self.select = [
            F.to_json(F.struct(*[F.col(k) for k in view.key])).alias("key"),
            (F.when(F.col(VISIBLE), value) if view.having else value).alias("value"),
        ]
        self.newest = "last_rating_time" if "last_rating_time" in names else None
        self.fanout = view.rows_per_record
        # With a retention: each window's keys in the changelog, to write their tombstones once
        # a window `retention_ms` newer has come (read back from the topic after a restart).
        self.windows: dict[int, set[bytes]] = defaultdict(set, windows)
        if view.retention_ms is not None and view.window_start is not None:
            self.select.append(F.unix_millis(F.col(view.window_start)).alias(_WINDOW_MS))
        self.said: ViewMarker | None = None  # the last marker of this version
        previous = self.sink.last()
        newest = previous.max_rating_time if previous is not None else None
        self.max_rating_time: int | None = newest if isinstance(newest, int) else None
        self.backfill_to = backfill_to  # where the enriched topic ended as the view was opened
        # A restart of a view that was live stays live (its marker says so); a new one backfills.
        found = self.sink.out.others[marker_key(settings, view.name)]
        said = ViewMarker.decode(found) if found is not None else None
        self.live = bool(
            previous and said and said.state == "live" and said.created_at_ms == entry.created_at_ms
        )

    @classmethod
    def open(
        cls, settings: ViewsSettings, query: str, view: CompiledView, entry: Entry, run: str
    ) -> "SqlViewSink":
        """The view's sink: its output opened (`open_output`) and, with a retention, the keys of
        each window read back from its changelog topic."""
        out = open_output(settings, query, run, other_markers=(marker_key(settings, view.name),))
        windows = {}
        if view.retention_ms is not None and view.window_start is not None:
            windows = _windows_in_topic(settings, entry.changelog(settings.topic_prefix), view.window_start)
        return cls(settings, view, entry, BatchSink(settings, query, out), windows, _ends_now(settings))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        extra = (self.newest,) if self.newest else ()
        windowed = (_WINDOW_MS,) if self.view.retention_ms is not None else ()
        written = dead = 0
        expired: list[bytes] = []
        # A record changes as many rows as the view's plan makes of it (None: no bound known).
        most = None if self.fanout is None else self.sink.records_in(batch_id) * self.fanout
        # Entering runs the batch, even when it is committed already: that moves the state on.
        with Slices(
            batch.select(*self.select, *extra), self.settings.max_batch_bytes, most, extra=(*extra, *windowed)
        ) as slices:
            if self.newest and slices.rows:
                newest = pc.max(slices.extras.column(self.newest)).as_py()
                if newest is not None and (self.max_rating_time is None or newest > self.max_rating_time):
                    self.max_rating_time = newest

            def outputs() -> Iterator[Records]:
                nonlocal written, dead
                for table in slices:
                    rows, letters = self._split(table, batch_id)
                    written, dead = written + len(rows), dead + len(letters)
                    if self.view.retention_ms is not None:
                        self._remember(table, rows)
                    yield rows
                    yield letters
                if self.view.retention_ms is not None:
                    expired.extend(self._expired())
                    yield Records(self.topic, expired, [None] * len(expired))

            self.sink.write(batch_id, outputs(), self.max_rating_time, self._marker)
        if expired:
            log.info(
                "view %s, batch %d: %d rows of windows past the retention removed",
                self.view.name,
                batch_id,
                len(expired),
            )
        if slices.plan:
            log.info(
                "view %s, batch %d: %s (VIEWS_JOB_MAX_BATCH_BYTES)",
                self.view.name,
                batch_id,
                slices.describe(),
            )
        if written or dead:
            log.info(
                "view %s, batch %d: %d rows changed (%d dead letters), %.2f s",
                self.view.name,
                batch_id,
                written,
                dead,
                time.monotonic() - started,
            )

    def abort(self) -> None:
        """After its query stopped: a transaction a batch left open is aborted now, rather than
        holding back read_committed readers of the commits topic until the broker's timeout."""
        try:
            self.sink.out.producer.abort_transaction(10)
        except KafkaException:
            pass  # none was open

    def _remember(self, table: pa.Table, rows: Records) -> None:
        """Adds the rows written (not tombstones, not dead letters) to their windows."""
        written = {k for k, v in zip(rows.keys, rows.values, strict=True) if k is not None and v is not None}
        for key, start in zip(
            table.column("key").to_pylist(), table.column(_WINDOW_MS).to_pylist(), strict=True
        ):
            if key in written and start is not None:
                self.windows[int(start)].add(key)

    def _expired(self) -> list[bytes]:
        """The keys of the windows that are now older than the newest one's start minus the
        retention (their tombstones), forgotten."""
        if not self.windows:
            return []
        assert self.view.retention_ms is not None
        oldest_kept = max(self.windows) - self.view.retention_ms
        expired = [start for start in self.windows if start < oldest_kept]
        return [key for start in sorted(expired) for key in sorted(self.windows.pop(start))]

    def _split(self, table: pa.Table, batch_id: int) -> tuple[Records, Records]:
        """The rows to write, and the dead letters of those over a bound: sizes compared in
        Arrow's kernels, a row at a time in Python only for the (rare) rows over one. A dead
        letter carries the first `_DEAD_LETTER_VALUE_BYTES` of its row; a longer row is kept
        whole in the claim-check store (VIEWS_JOB_DEAD_LETTER_STORE), where its headers say."""
        key_bytes = pc.binary_length(table.column("key"))
        record_bytes = pc.add(key_bytes, pc.coalesce(pc.binary_length(table.column("value")), 0))
        too_long_key = pc.greater(key_bytes, self.settings.max_key_bytes)
        bad = pc.or_(too_long_key, pc.greater(record_bytes, MAX_RECORD_BYTES))
        good = table.filter(pc.invert(bad)) if pc.any(bad).as_py() else table
        rows = Records(self.topic, good.column("key").to_pylist(), good.column("value").to_pylist())
        over = table.filter(bad)
        dead: list[tuple[bytes, bytes, str, list[tuple[str, bytes]]]] = []
        for key, value, size in zip(
            over.column("key").to_pylist(),
            over.column("value").to_pylist(),
            record_bytes.filter(bad).to_pylist(),
            strict=True,
        ):
            reason = (
                f"key of {len(key)} bytes, over VIEWS_JOB_MAX_KEY_BYTES ({self.settings.max_key_bytes})"
                if len(key) > self.settings.max_key_bytes
                else f"row of {size} bytes, over a Kafka record's {MAX_RECORD_BYTES}"
            )
            kept: list[tuple[str, bytes]] = []
            if value is not None and len(value) > _DEAD_LETTER_VALUE_BYTES:
                where = f"views/{self.view.name}/{batch_id}/{hashlib.sha256(key).hexdigest()[:32]}"
                kept = self.claim_check.keep(where, value).headers()
            dead.append(
                (key[: self.settings.max_key_bytes], (value or b"")[:_DEAD_LETTER_VALUE_BYTES], reason, kept)
            )
        headers: list[list[tuple[str, str | bytes | None]] | None] = [
            [
                ("dlq.reason", f"view {self.view.name}: {reason}".encode()),
                ("dlq.stage", DLQ_STAGE.encode()),
                ("dlq.view", self.view.name.encode()),
                *kept,
            ]
            for _, _, reason, kept in dead
        ]
        return rows, Records(
            self.settings.dlq_topic, [k for k, _, _, _ in dead], [v for _, v, _, _ in dead], headers
        )

    def _marker(self, marker: QueryMarker) -> Records:
        ends = marker.enriched_to
        if not self.live and all(ends.get(p, 0) >= o for p, o in self.backfill_to.items()):
            self.live = True
            log.info("view %s: backfilled; live", self.view.name)
        said = ViewMarker(
            self.view.name,
            tuple(self.view.key),
            self.columns,
            state="live" if self.live else "backfilling",
            sql=self.entry.sql,
            created_at_ms=self.entry.created_at_ms,
            topic=self.topic,
            batch_id=marker.batch_id,
            enriched_to=marker.enriched_to_json,
            max_rating_time=self.max_rating_time,
            written_at_ms=marker.written_at_ms,
        )
        self.said = said
        key = marker_key(self.settings, self.view.name).encode()
        return Records(self.settings.commits_topic, [key], [json.dumps(said.as_json()).encode()])


@dataclass
class _Version:
    """A running version of a view declared in SQL: its catalog entry, query, checkpoint folder
    and sink."""

    entry: Entry
    query: StreamingQuery
    folder: str
    sink: SqlViewSink


class Leftovers:
    """Checkpoint folders deleted with their query, deleted again when they come back within
    `linger_s` (a snapshot the state store was still uploading), then forgotten."""

    def __init__(self, state: StateDir, linger_s: float = _LINGER_S) -> None:
        self.state, self.linger_s = state, linger_s
        self.watched: dict[str, float] = {}  # folder -> until when (monotonic)

    def remove(self, relative: str) -> None:
        self.state.remove(relative)
        self.watched[relative] = time.monotonic() + self.linger_s

    def sweep(self) -> None:
        now = time.monotonic()
        for relative, until in list(self.watched.items()):
            if self.state.exists(relative):
                log.info(
                    "%s was written after its query stopped (a state store snapshot): deleted again", relative
                )
                self.state.remove(relative)
            if now > until:
                del self.watched[relative]


class SqlViews:
    """The running SQL views of a views job, by name, each with its running versions (by creation
    time): one, or two while a replacement backfills beside the version it replaces (blue/green).
    Once the newest has caught up (`live`), the others stop and their checkpoints and topics
    are deleted (`healthy`, called every few seconds)."""

    def __init__(self, spark: SparkSession, settings: ViewsSettings, run: str) -> None:
        self.spark, self.settings, self.run = spark, settings, run
        self.versions: dict[str, dict[int, _Version]] = {}
        self._lock = threading.Lock()
        self.follower: Follower | None = None
        self._leftovers = Leftovers(settings.state)

    @classmethod
    def follow(cls, spark: SparkSession, settings: ViewsSettings, run: str) -> "SqlViews":
        """The SQL views, created, replaced and dropped as the catalog (VIEWS_JOB_CATALOG_TOPIC)
        says."""
        views = cls(spark, settings, run)
        views.follower = Follower(
            settings.producer_config(), settings.catalog_topic, views.create, views.drop
        )
        views.follower.start()
        return views

    def topic(self, entry: Entry) -> str:
        return entry.changelog(self.settings.topic_prefix)

    def create(self, entry: Entry) -> None:
        """Starts `entry`'s version of its view. A new version of a running view (a replacement)
        backfills while the running one serves. After a restart during a replacement, the
        version it replaces goes on from its checkpoint until the new one has caught up; after a
        restart past that point, what is left of it is deleted."""
        with self._lock:
            running = self.versions.setdefault(entry.name, {})
            if entry.created_at_ms in running:
                return
            try:
                version = self._start(entry)
            except (ViewRefused, CatalogError) as err:
                state = "refused" if isinstance(err, ViewRefused) else "failed"
                log.error("view %s (version of %d) %s: %s", entry.name, entry.created_at_ms, state, err)
                self._announce(entry, ViewMarker(entry.name, state=state, error=str(err), sql=entry.sql))
                if not running and entry.previous is not None:
                    self._resume(entry.previous)
                return
            running[entry.created_at_ms] = version
            previous = entry.previous
            if previous is None or previous.created_at_ms in running:
                return
            if version.sink.live:
                self._remove(previous, None)  # replaced before a restart; its remnants go
            else:
                self._resume(previous)

    def _resume(self, entry: Entry) -> None:
        """`entry`'s version from its checkpoint, to serve meanwhile; nothing if it has none."""
        if not self.settings.state.exists(f"{CHECKPOINTS}/{_folder(entry)}"):
            return
        try:
            self.versions.setdefault(entry.name, {})[entry.created_at_ms] = self._start(entry)
        except (ViewRefused, CatalogError) as err:
            log.error("view %s: its version of %d cannot go on: %s", entry.name, entry.created_at_ms, err)

    def _start(self, entry: Entry) -> _Version:
        if entry.name in BUILT_IN_NAMES:
            raise ViewRefused(f"{entry.name}: a built-in view has that name")
        view = parse(entry.name, entry.sql)
        # As the customer_ratings query: a batch's records in VIEWS_JOB_SOURCE_TASKS tasks (one by
        # default), since a task's fixed cost a batch outweighs its share of a live view's records.
        tasks = self.settings.source_tasks
        parsed = enriched_stream(self.spark, self.settings, tasks=tasks, fields=fields_read(view.sql))
        readable = parsed.where(F.col("dlq_reason").isNull())
        compiled = compile_view(self.spark, view, enriched_columns(readable))
        topic = self.topic(entry)
        if ensure_topic(self.settings.producer_config(), topic, 1):
            log.info("view %s: created its changelog topic %s", entry.name, topic)
        folder = _folder(entry)
        sink = SqlViewSink.open(self.settings, folder, compiled, entry, self.run)
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", "background")
        query = (
            compiled.rows.writeStream.queryName(f"sql-{entry.name}-{entry.created_at_ms}")
            .outputMode("update")
            .foreachBatch(sink)
            .option("checkpointLocation", self.settings.state.child(CHECKPOINTS, folder))
            .trigger(processingTime=self.settings.sql_trigger(view.trigger))
            .start()
        )
        reach = ", ".join(f"{p}: {o}" for p, o in sorted(sink.backfill_to.items()))
        log.info(
            "view %s (version of %d): key (%s), topic %s; %s",
            entry.name,
            entry.created_at_ms,
            ", ".join(compiled.key),
            topic,
            "live" if sink.live else f"backfilling from the enriched topic's start to its end now ({reach})",
        )
        return _Version(entry, query, folder, sink)

    def drop(self, name: str) -> None:
        with self._lock:
            for version in self.versions.pop(name, {}).values():
                self._remove(version.entry, version)
            try:
                delete_topic(self.settings.producer_config(), self.settings.topic(name))
            except CatalogError as err:
                log.error("view %s: %s", name, err)
            self._announce(Entry(name, "", 0), ViewMarker(name, state="dropped", dropped=True))
            log.info("view %s dropped: its queries, checkpoints and topics are gone", name)

    def _remove(self, entry: Entry, version: _Version | None) -> None:
        """Stops a version's query (when it runs), deletes its checkpoint and its topic."""
        if version is not None:
            version.query.stop()
            version.sink.abort()
        self._leftovers.remove(f"{CHECKPOINTS}/{_folder(entry)}")
        try:
            delete_topic(self.settings.producer_config(), self.topic(entry))
        except CatalogError as err:
            log.error("view %s: %s", entry.name, err)

    def healthy(self) -> None:
        """Called every second or so: a SQL view's query that failed is marked and forgotten
        (the others, and the built-in views, go on), and a view's newest version that has caught
        up takes over from the older ones: they stop, and their checkpoints and topics go."""
        with self._lock:
            self._leftovers.sweep()
            for name, running in self.versions.items():
                for created, version in list(running.items()):
                    if version.query.isActive:
                        continue
                    error = version.query.exception()
                    log.error("view %s (version of %d): its query stopped: %s", name, created, error)
                    failed = ViewMarker(name, state="failed", error=str(error)[:2000])
                    self._announce(version.entry, failed)
                    del running[created]
                newest = max(running, default=None)
                if newest is None or len(running) == 1 or not running[newest].sink.live:
                    continue
                for created in [c for c in running if c != newest]:
                    old = running.pop(created)
                    self._remove(old.entry, old)
                    log.info(
                        "view %s: its version of %d has caught up and serves; the version of %d is gone",
                        name,
                        newest,
                        created,
                    )
                said = running[newest].sink.said
                if said is not None:  # the last word on the view is the new version's, not the old's
                    self._say(marker_key(self.settings, name), said.as_json())

    def stop(self) -> None:
        if self.follower is not None:
            self.follower.stop()
        with self._lock:
            for running in self.versions.values():
                for version in running.values():
                    version.query.stop()

    def _announce(self, entry: Entry, said: ViewMarker) -> None:
        """A marker for the query service that is not a batch's: refused, failed or dropped."""
        said = replace(said, written_at_ms=int(time.time() * 1000))
        problem_of = None
        if entry.created_at_ms:
            said = replace(said, created_at_ms=entry.created_at_ms, topic=self.topic(entry))
            problem_of = entry.created_at_ms
        self._say(marker_key(self.settings, entry.name, problem_of), said.as_json())

    def _say(self, key: str, value: dict[str, Any]) -> None:
        """A marker on the commits topic, outside any transaction."""
        producer = Producer({**self.settings.producer_config(), "enable.idempotence": True})
        producer.produce(
            self.settings.commits_topic,
            key=key.encode(),
            value=json.dumps(value).encode(),
            partition=0,
        )
        if producer.flush(30):
            log.error("the marker %s did not reach %s", key, self.settings.commits_topic)


def _folder(entry: Entry) -> str:
    """A version's checkpoint folder, under the state's checkpoints."""
    return f"sql-{entry.name}-{entry.created_at_ms}"


def _windows_in_topic(settings: ViewsSettings, topic: str, window_start: str) -> dict[int, set[bytes]]:
    """The keys a view's changelog topic holds now, by the start of their window (ms), read from
    its start (committed records; a tombstone takes its key out)."""
    consumer = committed_reader(settings.producer_config(), "views-backfill-probe")
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
    consumer = committed_reader(settings.producer_config(), "views-backfill-probe")
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
