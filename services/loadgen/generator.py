"""The load loop: ratings at a steady rate into Kafka, customer changes at their own rate into
the customer database, figures in a JSON file (what the demo's live view and summary read)."""

import json
import logging
import random
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from services.loadgen.config import LoadgenSettings
from services.loadgen.customers import next_change
from services.loadgen.database import CustomerDb, DatabaseUnavailable
from services.loadgen.ratings import bad_record, encode, fake_rating

__all__ = ["DB_BACKOFF_MAX_S", "TICK_S", "LoadGenerator"]

log = logging.getLogger(__name__)
TICK_S = 0.01
DB_BACKOFF_MAX_S = 10.0


class LoadGenerator:
    def __init__(self, settings: LoadgenSettings, db: CustomerDb, producer: Producer) -> None:
        self.settings, self.db, self.producer = settings, db, producer
        self.rnd = random.Random(settings.seed)
        self.first_rating_id = settings.first_rating_id or time.time_ns() // 1000
        self.next_rating_id = self.first_rating_id
        self.ids: list[int] = []
        self.sent = Counter[str]()
        self.delivered = Counter[str]()
        self.failed = 0
        self.changes = Counter[str]()
        self.db_down_since: float | None = None
        self.db_backoff_s = 0.0
        self.stopping = threading.Event()

    def _on_delivery(self, kind: str, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            self.delivered[kind] += 1
        else:
            self.failed += 1
            if self.failed <= 3:
                log.error("a record was not delivered: %s", err)

    def check_topic(self) -> str | None:
        """None when the ratings topic exists, else what is wrong (auto topic creation is off)."""
        topic = self.settings.ratings_topic
        meta = self.producer.list_topics(timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return f"topic {topic} does not exist: create it (make up creates the default topics)"
        return None

    def run(self) -> None:
        self.ids = self.db.seed(self.settings.customers, self.rnd)
        log.info("%d customers in the table; producing %.0f ratings/s", len(self.ids), self.settings.rate)
        started = time.monotonic()
        next_change_at = started
        last_report = started
        while not self.stopping.is_set():
            now = time.monotonic()
            if self.settings.duration_s and now - started >= self.settings.duration_s:
                break
            due = int((now - started) * self.settings.rate) - sum(self.sent.values())
            self._produce(due)
            if self.settings.changes_per_s and now >= next_change_at:
                next_change_at = max(next_change_at, now - 1) + self._change()
            if now - last_report >= 1:
                self.write_metrics(running=True)
                last_report = now
            self.producer.poll(0)
            time.sleep(TICK_S)
        left = self.producer.flush(60)
        self.write_metrics(running=False)
        log.info(
            "produced %d ratings and %d unreadable records (%d undelivered); %d customer changes",
            self.delivered["ratings"],
            self.delivered["bad"],
            left + self.failed,
            sum(self.changes.values()),
        )

    def _produce(self, count: int) -> None:
        for _ in range(count):
            n = sum(self.sent.values()) + 1
            if self.settings.bad_every and n % self.settings.bad_every == 0:
                self._send(b"bad", bad_record(self.rnd), "bad")
                continue
            now_ms = int(time.time() * 1000)
            rating = fake_rating(
                self.rnd, self.next_rating_id, self.ids, self.settings.unmatched_share, now_ms
            )
            self.next_rating_id += 1
            self._send(*encode(rating), "ratings")

    def _send(self, key: bytes, value: bytes, kind: str) -> None:
        headers: list[tuple[str, str | bytes | None]] | None = (
            [("loadgen.kind", b"bad")] if kind == "bad" else None
        )
        while True:
            try:
                self.producer.produce(
                    self.settings.ratings_topic,
                    value,
                    key,
                    headers=headers,
                    on_delivery=partial(self._on_delivery, kind),
                )
                break
            except BufferError:
                self.producer.poll(0.05)
        self.sent[kind] += 1

    def _change(self) -> float:
        """One customer change; returns the seconds until the next may run: its interval, or,
        while the database is unreachable, a back-off (ratings keep flowing meanwhile)."""
        interval = 1 / self.settings.changes_per_s
        change = next_change(self.rnd, self.ids, len(self.ids) + sum(self.changes.values()))
        try:
            new_id = self.db.apply(change)
        except DatabaseUnavailable as err:
            if self.db_down_since is None:
                self.db_down_since = time.monotonic()
                log.warning("%s; customer changes pause, ratings go on, retrying", err)
            self.db_backoff_s = min(max(2 * self.db_backoff_s, interval, 0.5), DB_BACKOFF_MAX_S)
            return self.db_backoff_s
        if self.db_down_since is not None:
            log.info(
                "customer database reachable again after %.1f s; changes resume",
                time.monotonic() - self.db_down_since,
            )
            self.db_down_since, self.db_backoff_s = None, 0.0
        if new_id is not None:
            self.ids.append(new_id)
        elif change.kind == "delete" and change.customer_id in self.ids:
            self.ids.remove(change.customer_id)
        self.changes[change.kind] += 1
        return interval

    def figures(self, running: bool) -> dict[str, Any]:
        return {
            "running": running,
            "updated_at": time.time(),
            "first_rating_id": self.first_rating_id,
            "last_rating_id": self.next_rating_id - 1,
            "ratings": self.delivered["ratings"],
            "bad_records": self.delivered["bad"],
            "undelivered": self.failed,
            "customers": len(self.ids),
            "changes": dict(self.changes),
        }

    def write_metrics(self, running: bool) -> None:
        path: Path | None = self.settings.metrics_file
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.figures(running)))
        tmp.replace(path)
