"""Dead letters too large for Kafka keep their bytes in a store: the claim-check pattern.

A rating over ENRICH_MAX_RATING_BYTES cannot go to the dead-letter topic with its value and its
dlq.* headers (the record would be over Kafka's limit), and the ratings topic's retention would
take the original in the end. Its bytes are written to ENRICH_DEAD_LETTER_STORE (by default the
state folder's `dead-letters`) at a path made of the record's origin,
`<stage>/<topic>/<partition>/<offset>`, before the batch's transaction commits; the dead letter
then carries `dlq.value.location` (the file's URI) and `dlq.value.bytes`. A re-run of the batch
writes the same bytes to the same path, so the store holds one copy whatever the retries, and a
committed dead letter always points at a whole file. The views job keeps a view's row too large
for Kafka the same way (VIEWS_JOB_DEAD_LETTER_STORE), at `views/<view>/<batch>/<key digest>`.

The store keeps a file as long as the dead-letter topic may keep the record that points at it
(`StorePruner`): a topic that keeps records for ever (the stack's dead-letter topics) keeps the
files for ever; one with a retention has the files of its aged-out records removed, once an
hour, by the job's driver.
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

import pyarrow.fs as pafs
from confluent_kafka import KafkaException

from enrichment_job.kafka.transactions import Records
from enrichment_job.runtime.settings import SparkJobSettings
from enrichment_job.runtime.state_dir import StateDir
from foundation.errors import SinkUnavailable
from foundation.kafka_record import MAX_RECORD_BYTES, topic_configs

log = logging.getLogger("enrichment_job")

__all__ = [
    "MARGIN_MS",
    "MAX_VALUE_BYTES",
    "ClaimCheck",
    "Claimed",
    "StorePruner",
    "record_lifetime_ms",
    "topic_record_lifetime_ms",
]


# A dead letter's value at most, with room for its headers under the largest Kafka record: where
# no setting bounds it (the views job's dead letters).
MAX_VALUE_BYTES = MAX_RECORD_BYTES - 100_000


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else value or ""


@dataclass(frozen=True)
class Claimed:
    """Where a dead letter's bytes are, as its headers say it."""

    location: str
    size: int

    @classmethod
    def of(cls, headers: Mapping[str, bytes | None]) -> "Claimed | None":
        """What a dead letter's headers say of its bytes; None for one that carries them itself."""
        location = _text(headers.get("dlq.value.location"))
        if not location:
            return None
        return cls(location, int(_text(headers.get("dlq.value.bytes")) or -1))

    def headers(self) -> list[tuple[str, bytes]]:
        return [("dlq.value.location", self.location.encode()), ("dlq.value.bytes", str(self.size).encode())]

    def local_path(self) -> Path | None:
        """The file, where the store is a local folder (a file:// location); None in an object
        store (s3a://)."""
        where = urlsplit(self.location)
        return Path(url2pathname(where.path)) if where.scheme == "file" else None


@dataclass
class ClaimCheck:
    """Writes the bytes of dead letters too large for Kafka to `store`, retrying for up to
    `timeout_s` (an outage of the store pauses the batch) before SinkUnavailable, which stops
    the job with nothing of the batch committed."""

    store: StateDir
    stage: str
    timeout_s: float = 300.0
    setting: str = "ENRICH_DEAD_LETTER_STORE"
    _first_pause_s: float = field(default=0.5, repr=False)

    @classmethod
    def of(cls, settings: SparkJobSettings, stage: str) -> "ClaimCheck":
        """The store a job's settings name (*_DEAD_LETTER_STORE), for dead letters of `stage`."""
        return cls(
            settings.dead_letters,
            stage,
            settings.dead_letter_store_timeout_s,
            settings.dead_letter_store_setting,
        )

    def oversized(self, dead: Records, max_bytes: int) -> Records:
        """`dead` (dead letters whose dlq.topic, dlq.partition and dlq.offset headers say where
        each came from) with every value over `max_bytes` put in the store: its record goes
        without it, and with headers that say where it is."""
        large = [i for i, value in enumerate(dead.values) if value is not None and len(value) > max_bytes]
        if not large:
            return dead
        values = list(dead.values)
        headers = [list(h or []) for h in (dead.headers or [None] * len(values))]
        for i in large:
            origin = {name: _text(value) for name, value in headers[i]}
            stage, topic, partition, offset = (
                origin.get(f"dlq.{name}", "") for name in ("stage", "topic", "partition", "offset")
            )
            value = values[i]
            assert value is not None
            claimed = self.put(topic, int(partition or -1), int(offset or -1), value, stage=stage or None)
            headers[i] += claimed.headers()
            values[i] = None
        return Records(dead.topic, dead.keys, values, headers)

    def put(self, topic: str, partition: int, offset: int, value: bytes, stage: str | None = None) -> Claimed:
        """Writes `value` at `<stage>/<topic>/<partition>/<offset>` (`stage`: this one's by
        default) and says where."""
        return self.keep(f"{stage or self.stage}/{topic}/{partition}/{offset}", value)

    def keep(self, relative: str, value: bytes) -> Claimed:
        """Writes `value` at `relative` in the store (again, when a re-run writes it again) and
        says where."""
        deadline = time.monotonic() + self.timeout_s
        pause = self._first_pause_s
        while True:
            try:
                self.store.write_bytes(relative, value)
                break
            except OSError as err:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SinkUnavailable(
                        f"{self.setting} ({self.store.uri}): could not write a dead letter's "
                        f"{len(value)} bytes for {self.timeout_s:.0f} s: {err}"
                    ) from err
                log.warning(
                    "%s: writing %s failed (%s); retrying in %.1f s", self.setting, relative, err, pause
                )
                time.sleep(min(pause, left))
                pause = min(pause * 2, 30.0)
        location = self.store.child(relative)
        log.warning("a dead letter's %d bytes are at %s", len(value), location)
        return Claimed(location, len(value))


# Beyond the longest a dead-letter topic may keep a record, how long its bytes stay: the broker
# looks for segments to delete every 5 minutes (log.retention.check.interval.ms), and a batch
# writes a file before its dead letter commits, up to the store's own retries before.
MARGIN_MS = 3_600_000
KAFKA_DEFAULT_MS = 604_800_000  # a week: Kafka's retention.ms and segment.ms unless a topic sets them


def record_lifetime_ms(configs: Mapping[str, str | None]) -> int | None:
    """The longest a topic of these settings may keep a record, from the record's time: its
    retention.ms after the segment that holds it closes, which is at most segment.ms after it was
    written (Kafka deletes a whole segment once its newest record is older than retention.ms).
    None for a topic that keeps records for ever (retention.ms -1)."""
    retention = int(configs.get("retention.ms") or KAFKA_DEFAULT_MS)
    if retention < 0:
        return None
    return retention + int(configs.get("segment.ms") or KAFKA_DEFAULT_MS)


def topic_record_lifetime_ms(config: Mapping[str, str], topic: str, timeout_s: float = 30) -> int | None:
    """`record_lifetime_ms` of `topic`, as the broker has its settings. Errors (no right to read
    them, no such topic) are raised: the caller keeps everything then."""
    return record_lifetime_ms(topic_configs(config, topic, timeout_s))


@dataclass
class StorePruner:
    """Removes the files of the dead-letter store, under the folders of `stages` (the ones this
    job writes: a store shared by two jobs keeps the other's), that are older than `keep_ms`
    (None: keeps them all), every `every_s`, in a thread of its own. The age is decided in that
    thread too (for the default, a question to the broker), so that a job's start never waits
    for it."""

    store: StateDir
    stages: tuple[str, ...]
    keep_ms: int | None = None
    every_s: float = 3600.0
    setting: str = "ENRICH_DEAD_LETTER_STORE_RETENTION_MS"
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def of(
        cls, settings: SparkJobSettings, stages: tuple[str, ...], dlq_topic: str, first_after_s: float = 60.0
    ) -> "StorePruner":
        """The pruner of a job's store, by its *_DEAD_LETTER_STORE_RETENTION_MS, started (its first
        round `first_after_s` from now, off the job's start): with the default (0), the files last
        as long as `dlq_topic` may keep a record, and a margin."""
        prefix = settings.model_config.get("env_prefix", "")
        pruner = cls(settings.dead_letters, stages, setting=f"{prefix}DEAD_LETTER_STORE_RETENTION_MS")
        chosen = settings.dead_letter_store_retention_ms

        def keep_ms() -> int | None:
            if chosen != 0:
                return None if chosen < 0 else chosen
            try:
                lifetime = topic_record_lifetime_ms(settings.producer_config(), dlq_topic)
            except (KafkaException, FutureTimeout, KeyError, ValueError) as err:
                log.warning(
                    "%s: the dead-letter topic %s's retention could not be read (%s): the store %s "
                    "keeps every dead letter's bytes (set %s to remove them after a time)",
                    pruner.setting,
                    dlq_topic,
                    err,
                    settings.dead_letters.uri,
                    pruner.setting,
                )
                return None
            if lifetime is None:
                log.info(
                    "the dead-letter store %s keeps dead letters' bytes for ever, as %s keeps its records",
                    settings.dead_letters.uri,
                    dlq_topic,
                )
                return None
            return lifetime + MARGIN_MS

        pruner.start(keep_ms, first_after_s)
        return pruner

    def start(self, keep_ms: Callable[[], int | None], first_after_s: float = 60.0) -> None:
        """Prunes in a thread of its own, `first_after_s` after now and then every `every_s`, with
        the age `keep_ms()` gives (asked once, in the thread)."""

        def run() -> None:
            if self._stop.wait(first_after_s):
                return
            self.keep_ms = keep_ms()
            if self.keep_ms is None:
                return
            log.info(
                "the dead-letter store %s removes dead letters' bytes after %.1f h (%s), every %.0f min",
                self.store.uri,
                self.keep_ms / 3_600_000,
                self.setting,
                self.every_s / 60,
            )
            while True:
                try:
                    self.prune()
                except OSError as err:  # the store is down: the next round tries again
                    log.warning("the dead-letter store %s could not be pruned: %s", self.store.uri, err)
                if self._stop.wait(self.every_s):
                    return

        self._thread = threading.Thread(target=run, name="dead-letter-store-pruner", daemon=True)
        self._thread.start()

    def prune(self, now_s: float | None = None) -> int:
        """Removes the files older than `keep_ms` (none when it is None); how many."""
        if self.keep_ms is None:
            return 0
        cutoff_ns = int(((time.time() if now_s is None else now_s) - self.keep_ms / 1000) * 1e9)
        removed = 0
        for stage in self.stages:
            fs, root = self.store.locate(stage)
            selector = pafs.FileSelector(root, allow_not_found=True, recursive=True)
            for info in fs.get_file_info(selector):
                if info.type != pafs.FileType.File or info.mtime_ns is None or info.mtime_ns >= cutoff_ns:
                    continue
                try:
                    fs.delete_file(info.path)
                except FileNotFoundError:  # another process of the job removed it first
                    continue
                removed += 1
            if self.store.is_local:
                _remove_empty_folders(Path(root))
        if removed:
            log.info(
                "the dead-letter store %s: removed %d dead letters' bytes older than %.1f h (%s)",
                self.store.uri,
                removed,
                self.keep_ms / 3_600_000,
                self.setting,
            )
        return removed

    def close(self) -> None:
        """Stops the thread; a round in progress (a long listing) is left to end on its own."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


def _remove_empty_folders(root: Path) -> None:
    """The folders under `root` left empty (a batch's or a partition's), deepest first."""
    if not root.is_dir():
        return
    for folder in sorted(
        (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
    ):
        try:
            folder.rmdir()
        except OSError:  # not empty, or a batch writes into it now
            continue
