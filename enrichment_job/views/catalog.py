"""The catalog of views declared in SQL: a compacted Kafka topic, a record per view (key: its
name; value: its SQL file's text and when it was created), a tombstone for a dropped one. The
views job follows it (`Follower`), so a view created or dropped while it runs starts or stops
without a restart, and the catalog survives every restart of the job.

The built-in views (`declarations.py`) are not in it: they are the job's own.
"""

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from foundation.errors import RatingsError

__all__ = [
    "BUILT_IN_NAMES",
    "CatalogError",
    "Entry",
    "Follower",
    "committed_reader",
    "delete_topic",
    "ensure_topic",
    "marker_key",
    "publish",
    "read_all",
]

if TYPE_CHECKING:
    from enrichment_job.views.settings import ViewsSettings

log = logging.getLogger("enrichment_job.views.catalog")

BUILT_IN_NAMES = ("customer_ratings", "segment_hourly")


class CatalogError(RatingsError):
    """The catalog cannot be read or written; the message says why."""


@dataclass(frozen=True)
class Entry:
    """A view in the catalog: its name, the text of its SQL file, and when it was created (each
    creation of a name is a new view: its own checkpoint and transactional id). `topic`: its
    changelog topic when not the name's own (a replacement writes to a new one while the version
    it replaces still serves from its own); `previous`: the version it replaces, which serves
    until this one has caught up (blue/green)."""

    name: str
    sql: str
    created_at_ms: int
    topic: str = ""
    previous: "Entry | None" = None

    def changelog(self, prefix: str) -> str:
        """Its changelog topic: its own, else the name's under the views' topic `prefix`."""
        return self.topic or f"{prefix}{self.name}"

    def encode(self) -> bytes:
        return json.dumps(self._body()).encode()

    def _body(self) -> dict[str, object]:
        body: dict[str, object] = {"name": self.name, "sql": self.sql, "created_at_ms": self.created_at_ms}
        if self.topic:
            body["topic"] = self.topic
        if self.previous is not None:
            body["previous"] = replace(self.previous, previous=None)._body()
        return body

    @staticmethod
    def decode(name: str, raw: bytes) -> "Entry | None":
        try:
            return Entry._of(name, json.loads(raw))
        except (ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def _of(name: str, body: dict[str, object]) -> "Entry":
        previous = body.get("previous")
        return Entry(
            name,
            str(body["sql"]),
            int(str(body["created_at_ms"])),
            str(body.get("topic") or ""),
            Entry._of(name, previous) if isinstance(previous, dict) else None,
        )


def marker_key(settings: "ViewsSettings", name: str, problem_of: int | None = None) -> str:
    """The key of a SQL view's marker in the commits topic: the same for every creation of a name,
    so that the compacted topic keeps the newest word on it (rows, or dropped). `problem_of`: a
    version's own key, for what went wrong with it (refused, failed), which the markers of the
    version that goes on serving would otherwise hide (a later batch marker of the version
    itself says it runs again)."""
    key = f"{settings.name}-sql:{name}"
    return key if problem_of is None else f"{key}@{problem_of}"


def ensure_topic(config: dict[str, str], topic: str, partitions: int, timeout_s: float = 30) -> bool:
    """Creates `topic` compacted when it does not exist; True when it was created."""
    admin = AdminClient(dict(config.items()))
    if topic in admin.list_topics(timeout=timeout_s).topics:
        return False
    new = NewTopic(topic, num_partitions=partitions, config={"cleanup.policy": "compact"})
    try:
        admin.create_topics([new], operation_timeout=timeout_s)[topic].result(timeout_s)
    except KafkaException as err:
        error = err.args[0] if err.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise CatalogError(f"cannot create the topic {topic}: {err}") from None
    return True


def delete_topic(config: dict[str, str], topic: str, timeout_s: float = 30) -> None:
    admin = AdminClient(dict(config.items()))
    try:
        admin.delete_topics([topic], operation_timeout=timeout_s)[topic].result(timeout_s)
    except KafkaException as err:
        error = err.args[0] if err.args else None
        if not (isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise CatalogError(f"cannot delete the topic {topic}: {err}") from None


def read_all(config: dict[str, str], topic: str, timeout_s: float = 30) -> dict[str, Entry]:
    """The views in the catalog now (an absent topic: none)."""
    views: dict[str, Entry] = {}
    consumer = committed_reader(config)
    try:
        if not _exists(consumer, topic, timeout_s):
            return views
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return views
                raise CatalogError(f"cannot read the catalog {topic}: {error}")
            _apply(views, msg.key(), msg.value())
        raise CatalogError(f"could not read the catalog {topic} to its end within {timeout_s} s")
    finally:
        consumer.close()


def publish(config: dict[str, str], topic: str, name: str, entry: Entry | None) -> None:
    """Writes `entry` (None: the view's tombstone) and waits until Kafka has it."""
    ensure_topic(config, topic, 1)
    producer = Producer({**config, "enable.idempotence": True})
    failed: list[KafkaError] = []
    producer.produce(
        topic,
        key=name.encode(),
        value=None if entry is None else entry.encode(),
        on_delivery=lambda err, _msg: failed.append(err) if err is not None else None,
    )
    if producer.flush(30) or failed:
        raise CatalogError(
            f"the catalog {topic} did not take the change: {failed[0] if failed else 'timed out'}"
        )


class Follower:
    """Reads the catalog from its start and goes on reading it, in a thread of its own: `created`
    for each view it finds (again after a restart) and for each new version of one (a
    replacement: the entry names the version it replaces), `dropped` for each tombstone of a
    view it had."""

    def __init__(
        self,
        config: dict[str, str],
        topic: str,
        created: Callable[[Entry], None],
        dropped: Callable[[str], None],
    ) -> None:
        self.config, self.topic, self.created, self.dropped = config, topic, created, dropped
        self.views: dict[str, Entry] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="views-catalog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)

    def _run(self) -> None:
        """Reads on until stopped; after a failure (Kafka away), reads the catalog again from
        its start, and only what differs from the views it has is created or dropped."""
        while not self._stopping.is_set():
            try:
                self._read()
            except Exception:  # logged; read again
                log.exception("the catalog of views %s cannot be read; reading it again in 5 s", self.topic)
                self._stopping.wait(5)

    def _read(self) -> None:
        consumer = committed_reader(self.config)
        try:
            while not self._stopping.is_set() and not _exists(consumer, self.topic, 30):
                self._stopping.wait(5)
            consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
            log.info("following the catalog of views %s", self.topic)
            seen: dict[str, Entry] = {}
            caught_up = False
            while not self._stopping.is_set():
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
                    if not caught_up:  # views gone while it was not reading: dropped
                        for name in [n for n in self.views if n not in seen]:
                            del self.views[name]
                            self.dropped(name)
                        caught_up = True
                    continue
                _apply(seen, msg.key(), msg.value())
                self._take(msg.key(), msg.value())
        finally:
            consumer.close()

    def _take(self, key: bytes | None, value: bytes | None) -> None:
        before = dict(self.views)
        _apply(self.views, key, value)
        name = key.decode(errors="replace") if key is not None else ""
        old, new = before.get(name), self.views.get(name)
        if old == new:
            return
        try:
            if new is None:
                self.dropped(name)
            else:
                self.created(new)
        except BaseException:
            # Not done: the next reading of the catalog (after 5 s) tries again.
            self.views = before
            raise


def _apply(views: dict[str, Entry], key: bytes | None, value: bytes | None) -> None:
    if key is None:
        return
    name = key.decode(errors="replace")
    if value is None:
        views.pop(name, None)
        return
    entry = Entry.decode(name, value)
    if entry is None:
        log.warning("catalog: the entry of %r is not readable; left out", name)
        return
    views[name] = entry


def committed_reader(config: dict[str, str], group: str = "views-catalog-reader") -> Consumer:
    """A consumer of committed records that says where each partition ends, for reads by
    assignment from a given offset (the group's offsets are never committed)."""
    return Consumer(
        {
            **config,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )


def _exists(consumer: Consumer, topic: str, timeout_s: float) -> bool:
    meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    return meta is not None and meta.error is None
