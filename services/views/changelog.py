"""The changelog process: reads the views' changelog topics and the views job's markers
(read_committed), applies them to the store with the offsets in one transaction, and sends each
batch's changes to the HTTP server's process. Starts from the store's offsets (the local copy),
or from the beginning when those do not fit the topics any more (a topic re-created, retention
past them).

Why a process of its own: applying 5,000 changelog records a second in the server's process
held its interpreter lock for most of each batch, and pull queries waited behind it (p99 2 ms
without the changelog, 36 ms with it, the service alone on the 2-core machine). The server's
process now only answers; the store (SQLite, WAL) is shared through its file.
"""

import asyncio
import json
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.sharedctypes
import multiprocessing.synchronize
import os
import pickle
import signal
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from foundation.changelog_record import BadChangelogRecord, ChangelogRecord
from foundation.logs import configure_or_exit
from foundation.view_marker import ViewMarker
from services.views.config import ViewsApiSettings
from services.views.hub import REPLACED, Event, Hub, events_of
from services.views.store import STAGED, Change, Store

__all__ = [
    "BATCH",
    "EVENTS_PER_MESSAGE",
    "PIPE_HIGH_WATER",
    "Changelog",
    "ChangelogProcess",
    "FrameReader",
    "fetched",
]

log = logging.getLogger("views")
# Bytes of the changelog process's frames the server's process holds before it stops reading
# the pipe: some dozens of subscribers' pages.
PIPE_HIGH_WATER = 8 << 20
_CONTEXT = multiprocessing.get_context("spawn")  # the server's process has threads by then
EVENTS_PER_MESSAGE = 500
BATCH = 2000  # changelog records applied in one transaction of the store, at most


def fetched(consumer: Consumer, wait_s: float = 0.2) -> list[Message]:
    """The records the consumer has fetched, up to BATCH, waiting up to `wait_s` only while it
    has none. A consume() for more records than are there waits its whole timeout for the rest:
    `consume(2000, 0.2)` held every batch short of 2,000 back for 0.2 s before it was applied."""
    first = consumer.consume(1, wait_s)
    return first + consumer.consume(BATCH - 1, 0) if first else first


class Changelog:
    """The reading and applying, in the changelog process. `send` takes each message for the
    server's process: ("batch", seq, records, descriptions or None, events or None), a batch's
    events in several such messages when they are many; ("caught_up", records); ("loading",
    views) whenever the views still loading change (`loading`)."""

    def __init__(
        self,
        settings: ViewsApiSettings,
        store: Store,
        send: Callable[[tuple[Any, ...]], None],
        subscribers: Callable[[], int] = lambda: 1,
    ) -> None:
        self.settings, self.store, self.send, self.subscribers = settings, store, send, subscribers
        self.views = {topic: settings.view_name(topic) for topic in settings.changelog_topics}
        self._configured = set(settings.changelog_topics)
        self.versions = dict.fromkeys(self.views.values(), 0)  # view -> the version served
        self.caught_up = False
        self.records = 0
        # The partitions not read to their end once since they were assigned: at the start, and
        # each topic a view's first marker starts reading later.
        self._pending: set[tuple[str, int]] = set()
        self._infos_sent: dict[str, dict[str, Any]] | None = None
        self._loading_sent: frozenset[str] | None = None

    def run(self, stopping: Callable[[], bool]) -> None:
        consumer = Consumer(self.settings.consumer_config())
        try:
            self._assign(consumer)
            reported = time.monotonic()
            while not stopping():
                self._step(consumer, fetched(consumer))
                if time.monotonic() - reported > 10:
                    log.info("%d changelog records applied; %d subscribers", self.records, self.subscribers())
                    reported = time.monotonic()
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer) -> None:
        topics = [*self.settings.changelog_topics, self.settings.commits_topic]
        stored = self.store.offsets()
        # the views declared in SQL that the local copy holds, while their topics exist
        declared = sorted({t for t, _ in stored} - set(topics))
        assignment, fits = [], True
        for topic in topics + declared:
            meta = consumer.list_topics(topic, timeout=30).topics[topic]
            if meta.error is not None and topic in declared:
                log.info("%s: gone (its view was dropped); its marker says so", topic)
                continue
            if meta.error is not None:
                raise KafkaException(meta.error)
            if topic in declared:
                self._declared(topic)
            for part in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=30)
                start = stored.get((topic, part))
                if start is not None and not low <= start <= high:
                    log.warning(
                        "%s[%d]: the local copy stops at offset %d, the topic now holds %d..%d: rebuilding",
                        topic,
                        part,
                        start,
                        low,
                        high,
                    )
                    fits = False
                assignment.append(TopicPartition(topic, part, OFFSET_BEGINNING if start is None else start))
        if not fits:
            self.store.reset()
            assignment = [TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in assignment]
        resumed = sum(1 for tp in assignment if tp.offset != OFFSET_BEGINNING)
        log.info(
            "reading %d partitions (%d resumed from the local copy %s)",
            len(assignment),
            resumed,
            self.store.path,
        )
        self._pending = {(tp.topic, tp.partition) for tp in assignment}
        consumer.assign(assignment)

    def _step(self, consumer: Consumer, messages: list[Message]) -> None:
        batch = _Batch()
        read = 0  # records, not the end-of-partition events that come with them
        for msg in messages:
            error = msg.error()
            topic, part = str(msg.topic()), int(msg.partition() or 0)
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self._pending.discard((topic, part))
                    continue
                if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and topic not in self._configured:
                    # A declared view's topic deleted (dropped, or a version replaced) before its
                    # marker came: the marker follows.
                    log.info("%s: deleted; its view's marker follows", topic)
                    continue
                raise KafkaException(error)
            if topic not in self.views and topic != self.settings.commits_topic:
                continue  # a topic let go in this batch (a view dropped or replaced)
            batch.offsets[(topic, part)] = int(msg.offset() or 0) + 1
            read += 1
            if topic == self.settings.commits_topic:
                marker = _json(msg.value())
                if isinstance(marker, dict) and marker.get("view"):
                    self._marker(consumer, ViewMarker.decode(marker), batch)
                    if batch.promoted:  # the rows after a version's takeover go in after it
                        self._apply(batch, read)
                        batch, read = _Batch(), 0
                continue
            change = self._change(topic, msg)
            if change is not None:
                batch.changes.append(change)
        self._apply(batch, read)
        if not self._pending and not self.caught_up:
            log.info("caught up with the changelog topics (%d records applied)", self.records)
            self.store.analyze()  # the planner's statistics of the views as they are now
            self.caught_up = True
            self.send(("caught_up", self.records))
        loading = self.loading()
        if loading != self._loading_sent:  # after the batch's commit: its rows are in the store
            for view in sorted((self._loading_sent or frozenset()) - loading):
                log.info("view %s: its changelog topic is read to its end; served", view)
            self._loading_sent = loading
            self.send(("loading", loading))

    def loading(self) -> frozenset[str]:
        """The served views (not a new version still staged) whose changelog topic has a
        partition not yet read to its end since it was assigned: the store holds part of their
        rows, so the server refuses their queries rather than answer from that part."""
        views = (self.views.get(topic) for topic, _ in self._pending)
        return frozenset(v for v in views if v is not None and STAGED not in v)

    def _apply(self, batch: "_Batch", read: int) -> None:
        offsets = batch.offsets
        gone = {*batch.dropped.values(), *batch.let_go}
        if gone:  # no longer read: neither stored nor waited for before health says caught up
            offsets = {tp: o for tp, o in offsets.items() if tp[0] not in gone}
            self._pending = {tp for tp in self._pending if tp[0] not in gone}
        if not offsets and not batch.promoted:
            return
        applied = self.store.apply(batch.changes, batch.markers, offsets, batch.dropped, batch.promoted)
        self.records += read
        infos = self.store.infos()
        fresh_infos = None if infos is self._infos_sent else infos
        self._infos_sent = infos
        # Read after the commit: a subscriber that came before it gets these changes.
        events: list[Event] = []
        if self.subscribers() > 0:
            events = events_of(applied) + [(view, "", REPLACED) for view, _ in batch.promoted.values()]
        # In pages: the server's event loop takes a message in one go, and pull queries wait
        # meanwhile.
        for start in range(0, max(len(events), 1), EVENTS_PER_MESSAGE):
            page = events[start : start + EVENTS_PER_MESSAGE] or None
            self.send(("batch", self.store.seq, self.records, fresh_infos if start == 0 else None, page))

    def _marker(self, consumer: Consumer, marker: ViewMarker, batch: "_Batch") -> None:
        """A view's marker: its key, columns and freshness (the first of a view declared in SQL
        starts the reading of its topic), that it was refused or failed, or dropped (its topic is
        no longer read, and the store forgets its rows). A marker of a newer version of a served
        view (a replacement) starts the reading of that version's topic into a staged view of its
        own; once it says `live`, the staged rows take the view's place."""
        name = marker.view
        if marker.dropped:
            self._drop(consumer, name, batch)
            return
        version = marker.version
        served = self.versions.get(name)
        if served is not None and version < served:
            return  # an older version's word, after the newer took over
        own = name if served is None or version == served else f"{name}{STAGED}{version}"
        if not marker.has_columns:  # refused or failed: kept with what the view has
            known = batch.markers.get(own) or (self.store.view_info(own) or {}).get("marker")
            batch.markers[own] = marker.over(known)
            if own == name:
                self.versions[name] = version
            return
        topic = str(
            marker.topic
            or next((t for t, v in self.views.items() if v == own), f"{self.settings.topic_prefix}{name}")
        )
        if self.views.get(topic) is None:
            meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
            if meta is None or meta.error is not None:
                # Its topic is gone: a marker from before a drop or a takeover, read again before
                # compaction left only the newer word (which follows). Nothing of it is kept.
                log.info("view %s: its topic %s does not exist (dropped since); marker skipped", name, topic)
                return
            consumer.incremental_assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
            self._pending |= {(topic, p) for p in meta.partitions}
            self.views[topic] = own
            self.versions.setdefault(name, version)
            which = "" if own == name else f" (its version of {version})"
            log.info("view %s%s: reading %s from its start", name, which, topic)
        batch.markers[own] = marker
        batch.dropped.pop(own, None)
        if own != name and marker.state == "live":
            self._take_over(consumer, own, topic, batch)

    def _take_over(self, consumer: Consumer, staged: str, topic: str, batch: "_Batch") -> None:
        """The staged version (`<view>@<version>`) has caught up: it is the view from now on; the
        old version's topic is let go."""
        name, version = staged.rsplit(STAGED, 1)[0], int(staged.rsplit(STAGED, 1)[1])
        old = [t for t, v in self.views.items() if v == name]
        if old:
            consumer.incremental_unassign([tp for tp in consumer.assignment() if tp.topic in old])
        for t in old:
            del self.views[t]
        batch.let_go.extend(old)
        self.views[topic] = name
        self.versions[name] = version
        batch.markers[name] = batch.markers.pop(staged)
        batch.promoted[staged] = (name, old[0] if old else None)
        for other, other_topic in self._staged_of(name).items():  # versions refused or failed before
            if other != staged:
                batch.markers.pop(other, None)
                batch.dropped[other] = other_topic
        log.info("view %s: its new version (%s) has caught up and serves from now on", name, topic)

    def _drop(self, consumer: Consumer, name: str, batch: "_Batch") -> None:
        batch.markers.pop(name, None)
        gone = {t: v for t, v in self.views.items() if v == name or v.startswith(f"{name}{STAGED}")}
        if any(t in self._configured for t in gone):
            return  # a configured view is never dropped
        batch.dropped[name] = f"{self.settings.topic_prefix}{name}"
        for staged, topic in self._staged_of(name).items():
            batch.markers.pop(staged, None)
            batch.dropped[staged] = topic
        for topic, view in gone.items():
            batch.markers.pop(view, None)
            batch.dropped[view] = topic
            del self.views[topic]
        self.versions.pop(name, None)
        if gone:
            consumer.incremental_unassign([tp for tp in consumer.assignment() if tp.topic in gone])
            log.info("view %s dropped: %s no longer read, its rows are forgotten", name, ", ".join(gone))

    def _staged_of(self, name: str) -> dict[str, str]:
        """The view's new versions the store or this batch knows, with their topics ("" for none)."""
        prefix = f"{name}{STAGED}"
        staged = dict.fromkeys((v for v in self.store.infos() if v.startswith(prefix)), "")
        staged |= {v: t for t, v in self.views.items() if v.startswith(prefix)}
        return staged

    def _declared(self, topic: str) -> None:
        """A declared view's topic that the local copy reads: its view (or staged version) and
        version, as its last marker says."""
        for view, info in self.store.infos().items():
            marker = info.get("marker")
            if marker is not None and marker.topic == topic:
                self.views[topic] = view
                if STAGED not in view:
                    self.versions[view] = marker.version
                return
        self.views[topic] = topic.removeprefix(self.settings.topic_prefix)

    def _change(self, topic: str, msg: Message) -> Change | None:
        try:
            record = ChangelogRecord.decode(msg.key(), msg.value())
        except BadChangelogRecord as err:
            log.warning("%s[%s]@%s: %s; skipped", topic, msg.partition(), msg.offset(), err)
            return None
        return Change(self.views[topic], record.key_values, record.key_columns, record.value)


@dataclass
class _Batch:
    """What a step applies to the store in one transaction."""

    changes: list[Change] = field(default_factory=list)
    markers: dict[str, ViewMarker] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)  # view -> its topic
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    promoted: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # see Store.apply
    let_go: list[str] = field(default_factory=list)  # topics no longer read (a version replaced)


def _json(raw: bytes | None) -> Any:
    try:
        return None if raw is None else json.loads(raw)
    except ValueError:
        return None


def _main(
    settings: ViewsApiSettings,
    path: Path,
    out: multiprocessing.connection.Connection,
    stopping: multiprocessing.synchronize.Event,
    subscribers: "multiprocessing.sharedctypes.Synchronized[int]",
) -> None:
    """The changelog process: until `stopping`, or the server's process is gone."""
    # Ctrl-C reaches the server's process, which stops this one. SIGTERM ends it at once: a
    # batch not committed is read again from the store's offsets.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_or_exit()
    logging.getLogger().setLevel(settings.log_level.upper())
    server = os.getppid()
    fd = out.fileno()

    def send(message: tuple[Any, ...]) -> None:
        """One frame: the pickled message's length (8 bytes, big-endian), then the message."""
        body = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        frame = memoryview(struct.pack("!Q", len(body)) + body)
        while frame:
            frame = frame[os.write(fd, frame) :]

    changelog = Changelog(settings, Store(path, settings.store_cache_kib()), send, lambda: subscribers.value)
    try:
        changelog.run(lambda: stopping.is_set() or os.getppid() != server)
    except Exception as err:  # the service stops, and says why
        log.exception("the changelog process failed")
        send(("failed", f"{type(err).__name__}: {err}"))
        raise SystemExit(1) from None


class FrameReader(asyncio.Protocol):
    """The changelog process's frames, as they arrive on the server's event loop (the pipe is
    read without blocking: a frame may come in several pieces). One frame a turn of the loop: a
    read holds several pages of a large batch, and pull queries are answered between them.

    Reading pauses while more than `high_water` bytes of whole frames wait: the pipe then
    fills, and the changelog process waits to write, and so to read Kafka. Without it a busy
    loop (subscribers' pages of every change, hostile clients) let the frames pile up in this
    process's memory."""

    def __init__(
        self,
        take: Callable[[tuple[Any, ...]], None],
        lost: Callable[[], None],
        high_water: int = PIPE_HIGH_WATER,
    ) -> None:
        self.take, self.lost, self.high_water = take, lost, high_water
        self.buffer = bytearray()
        self._scheduled = False
        self._transport: asyncio.ReadTransport | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A read transport (uvloop's is not a subclass of asyncio's, but has its methods).
        self._transport = cast(asyncio.ReadTransport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > self.high_water and self._whole() is not None:
            self._flow(pause=True)
        if not self._scheduled:
            self._next()

    def _flow(self, *, pause: bool) -> None:
        if self._transport is None or pause == self.paused:
            return
        self.paused = pause
        if pause:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()

    def _next(self) -> None:
        self._scheduled = False
        frame = self._frame()
        if frame is not None:
            self.take(frame)
        whole = self._whole() is not None
        # Read on once the frames waiting are down to half the mark, or none is whole (a frame
        # larger than the mark comes in whole only if the pipe is read).
        if len(self.buffer) <= self.high_water // 2 or not whole:
            self._flow(pause=False)
        if whole:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._next)

    def _whole(self) -> int | None:
        """The size of the first frame's body when the buffer holds all of it."""
        if len(self.buffer) < 8:
            return None
        size: int = struct.unpack_from("!Q", self.buffer)[0]
        return size if len(self.buffer) - 8 >= size else None

    def _frame(self) -> tuple[Any, ...] | None:
        size = self._whole()
        if size is None:
            return None
        body = bytes(self.buffer[8 : 8 + size])
        del self.buffer[: 8 + size]
        frame: tuple[Any, ...] = pickle.loads(body)  # noqa: S301 - written by our own child, over a pipe only it holds
        return frame

    def connection_lost(self, exc: Exception | None) -> None:
        while (frame := self._frame()) is not None:  # the last words (a failure) come first
            self.take(frame)
        self.lost()


class ChangelogProcess:
    """The server's side: starts the changelog process, and on the event loop takes its
    messages: batches for the hub, the store's view descriptions, caught up, the views still
    loading, failed."""

    def __init__(self, settings: ViewsApiSettings, store: Store, hub: Hub) -> None:
        self.settings, self.store, self.hub = settings, store, hub
        self.caught_up = threading.Event()
        self.failed: BaseException | None = None
        self.records = 0
        # The views whose changelog topic the process has not yet read to its end since it began
        # reading it; None until it says (at its start: every view).
        self.loading: frozenset[str] | None = None
        self.on_end: Callable[[], None] = lambda: None  # failed, or stopped by a signal
        self._stopping = _CONTEXT.Event()
        self._subscribers = _CONTEXT.Value("i", 0)
        self._in, out = _CONTEXT.Pipe(duplex=False)
        self._process = _CONTEXT.Process(
            target=_main,
            args=(settings, store.path, out, self._stopping, self._subscribers),
            name="views-changelog",
            daemon=True,
        )
        self._out = out
        hub.on_count = self._count

    def _count(self, n: int) -> None:
        self._subscribers.value = n

    def start(self) -> None:
        self._process.start()
        self._out.close()  # the child's end: its exit closes the pipe

    async def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take the process's messages on `loop` (the server's)."""
        await loop.connect_read_pipe(lambda: FrameReader(self._take, self._lost), self._in)

    def _lost(self) -> None:
        """The pipe closed: the changelog process ended."""
        if self.failed is None and not self._stopping.is_set():
            self._process.join(5)
            code = self._process.exitcode
            if code in (-signal.SIGTERM, -signal.SIGINT):
                # a stop request, most often for the whole service: a service manager signals
                # every process of the service's group, this one included
                log.info("the changelog process was stopped (%s): stopping", signal.Signals(-code).name)
                self.on_end()
            else:
                self._fail(RuntimeError(f"the changelog process ended (exit code {code})"))

    def _take(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "batch":
            _, seq, self.records, infos, events = message
            if infos is not None:
                self.store.learn_infos(infos)
            if events:
                self.hub.publish(seq, events)
        elif kind == "caught_up":
            self.records = message[1]
            self.caught_up.set()
        elif kind == "loading":
            self.loading = message[1]
        elif kind == "failed":
            self._fail(RuntimeError(message[1]))

    def _fail(self, err: BaseException) -> None:
        if self.failed is None:
            self.failed = err
            self.on_end()

    def stop(self, timeout_s: float = 5) -> None:
        """Asks the changelog process to stop after its batch; ends it when it does not within
        `timeout_s` (a failed server no longer reads the pipe, and a write to a full pipe
        waits for ever)."""
        self._stopping.set()
        self._process.join(timeout_s)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)
