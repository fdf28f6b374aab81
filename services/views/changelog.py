"""The changelog thread: reads the views' changelog topics and the views job's markers
(read_committed), applies them to the store with the offsets in one transaction, and publishes
each change. Starts from the store's offsets (the local copy), or from the beginning when those
do not fit the topics any more (a topic re-created, retention past them)."""

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from services.views.config import ViewsApiSettings
from services.views.hub import Hub
from services.views.store import Change, Store, key_of

log = logging.getLogger("views")


class Changelog(threading.Thread):
    def __init__(self, settings: ViewsApiSettings, store: Store, hub: Hub) -> None:
        super().__init__(name="changelog", daemon=True)
        self.settings, self.store, self.hub = settings, store, hub
        self.views = {topic: settings.view_name(topic) for topic in settings.changelog_topics}
        self.caught_up = threading.Event()
        self.stopping = threading.Event()
        self.failed: BaseException | None = None
        self.on_failure: Callable[[], None] = lambda: None
        self.records = 0
        self._pending: set[tuple[str, int]] = set()

    def run(self) -> None:
        consumer = Consumer(self.settings.consumer_config())
        try:
            self._assign(consumer)
            reported = time.monotonic()
            while not self.stopping.is_set():
                self._step(consumer, consumer.consume(2000, 0.2))
                if time.monotonic() - reported > 10:
                    log.info("%d changelog records applied; %d subscribers", self.records, self.hub.count())
                    reported = time.monotonic()
        except Exception as err:  # the service stops, and says why
            self.failed = err
            log.exception("the changelog thread failed")
            self.on_failure()
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer) -> None:
        topics = [*self.settings.changelog_topics, self.settings.commits_topic]
        stored = self.store.offsets()
        assignment, fits = [], True
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=30).topics[topic]
            if meta.error is not None:
                raise KafkaException(meta.error)
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
        changes: list[Change] = []
        markers: dict[str, dict[str, Any]] = {}
        offsets: dict[tuple[str, int], int] = {}
        read = 0  # records, not the end-of-partition events that come with them
        for msg in messages:
            error = msg.error()
            topic, part = str(msg.topic()), int(msg.partition() or 0)
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self._pending.discard((topic, part))
                    continue
                raise KafkaException(error)
            offsets[(topic, part)] = int(msg.offset() or 0) + 1
            read += 1
            if topic == self.settings.commits_topic:
                marker = _json(msg.value())
                if isinstance(marker, dict) and marker.get("view") and "columns" in marker:
                    markers[str(marker["view"])] = marker
                continue
            change = self._change(topic, msg)
            if change is not None:
                changes.append(change)
        if offsets:
            with self.hub.lock:
                applied = self.store.apply(changes, markers, offsets)
                self.hub.publish(applied)
            self.records += read
        if not self._pending and not self.caught_up.is_set():
            log.info("caught up with the changelog topics (%d records applied)", self.records)
            self.caught_up.set()

    def _change(self, topic: str, msg: Message) -> Change | None:
        key = _json(msg.key())
        if not isinstance(key, dict) or not key:
            log.warning(
                "%s[%s]@%s: a key that is not a JSON object; skipped", topic, msg.partition(), msg.offset()
            )
            return None
        value = msg.value()
        return Change(
            self.views[topic],
            key_of(list(key.values())),
            tuple(key),
            None if value is None else value.decode(),
        )


def _json(raw: bytes | None) -> Any:
    try:
        return None if raw is None else json.loads(raw)
    except ValueError:
        return None
