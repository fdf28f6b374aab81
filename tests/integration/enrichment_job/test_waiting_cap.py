"""k. A stalled CDC watermark does not grow the job's memory without bound: at
ENRICH_MAX_WAITING_RATINGS waiting ratings, or ENRICH_MAX_WAITING_BYTES of them, new ones stay
in Kafka, and once the watermark moves again every rating comes out once, in order, joined.

The job reads a CDC topic of the test's own, fed with Debezium-shaped events by the test, so
the watermark stalls and resumes on cue without touching the shared stack."""

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.change_events import customer_row
from support.enrichment import (
    Job,
    StackEnv,
    Topics,
    create_topics,
    delete_topics,
    produce,
    rating,
    read_topic,
    values,
)
from support.kafka import drop_topics, make_topics

CAP = 50
BATCH = 40  # ENRICH_MAX_OFFSETS_PER_TRIGGER: both topics, so at most 40 new ratings a batch
RATINGS = 300
USER = 7


class Cdc:
    """A Debezium-like feed: one customer, then a heartbeat (the database clock) every 200 ms
    while `beating` is set."""

    def __init__(self, stack_env: StackEnv, topic: str) -> None:
        self.stack_env, self.topic = stack_env, topic
        self.pos = 100
        self.beating = threading.Event()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _event(self, table: str, op: str, after: dict[str, Any], ts_ms: int) -> bytes:
        self.pos += 10
        source = {"ts_ms": ts_ms, "file": "mariadb-bin.000001", "pos": self.pos, "row": 0, "table": table}
        before = after if op == "u" else None
        return json.dumps(
            {"before": before, "after": after, "op": op, "ts_ms": ts_ms, "source": source}
        ).encode()

    def customer(self, created_ms: int) -> None:
        row = customer_row(USER, first_name="Wai", last_name="Ting", email="w@example.com")
        row["club_status"] = "platinum"
        produce(self.stack_env, self.topic, [(b"7", self._event("customers", "c", row, created_ms))])

    def _beat(self) -> None:
        while not self.stopped.is_set():
            if self.beating.is_set():
                now = datetime.now(UTC)
                ts = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
                after = {"id": 1, "ts": ts}
                produce(
                    self.stack_env, self.topic, [(b"1", self._event("debezium_heartbeat", "u", after, 0))]
                )
            time.sleep(0.2)


@pytest.fixture
def topics(stack_env: StackEnv) -> Iterator[Topics]:
    """Topics and a job name of each test's own (the module's would be shared): the caps' runs
    must not go on from each other's commits, over a CDC topic made anew for each."""
    topics = Topics()
    names = create_topics(stack_env, topics)
    yield topics
    delete_topics(stack_env, names)


@pytest.fixture
def cdc(stack_env: StackEnv, topics: Topics) -> Iterator[Cdc]:
    name = topics.name("cdc")
    make_topics(stack_env, [name], partitions=1)
    feed = Cdc(stack_env, name)
    feed.thread.start()
    yield feed
    feed.stopped.set()
    feed.thread.join(5)
    drop_topics(stack_env, [name])


# The cap by count, and by bytes: ratings a little over 50 KB each as the join holds them, of
# which 20 fill ENRICH_MAX_WAITING_BYTES' least value (1,000,000), where the count cap (500,000
# by default) would hold them all.
CAPS = {
    "count": ({"ENRICH_MAX_WAITING_RATINGS": str(CAP)}, "ok", CAP),
    "bytes": ({"ENRICH_MAX_WAITING_BYTES": "1000000"}, "m" * 50_000, 1_000_000 // 50_000),
}


# The two caps hold ratings back through the same path; CI runs the bytes cap (80 s each),
# `make test-long` both.
@pytest.mark.parametrize("cap", [pytest.param("count", marks=pytest.mark.long), "bytes"])
def test_k_at_the_cap_new_ratings_stay_in_kafka_and_all_come_out_once_when_the_watermark_moves(
    stack_env: StackEnv, topics: Topics, cdc: Cdc, tmp_path: Path, cap: str
) -> None:
    settings, message, most = CAPS[cap]
    cdc.customer(int(time.time() * 1000) - 60_000)
    cdc.beating.set()
    extra = {
        "ENRICH_CDC_TOPIC": topics.name("cdc"),
        "ENRICH_MAX_OFFSETS_PER_TRIGGER": str(BATCH),
        **settings,
    }
    job = Job(stack_env, topics, tmp_path / "job", grace_ms=1000, extra=extra).start()
    try:
        cdc.beating.clear()  # the watermark stalls, as when Connect is down
        time.sleep(2)
        now = int(time.time() * 1000)
        ratings = [rating(i, USER, 1 + i % 5, now, message) for i in range(RATINGS)]
        produce(stack_env, topics.name("ratings"), ratings)
        waiting = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            waiting.append(job.metrics().get("enrichment", {}).get("waiting", 0))
            time.sleep(0.5)
        early = read_topic(stack_env, topics.name("enriched"), timeout_s=5, idle_s=2)
        cdc.beating.set()
        enriched = values(
            read_topic(stack_env, topics.name("enriched"), min_records=RATINGS, timeout_s=240, idle_s=10)
        )
    finally:
        job.stop()
    log = job.log.read_text()
    assert early == [], "nothing may come out while the watermark stands still"
    assert most <= max(waiting) <= most + BATCH, waiting
    assert "left in Kafka for later" in log
    assert [v["rating_id"] for v in enriched] == list(range(RATINGS)), "each once, in input order"
    assert all(v["customer_matched"] and v["club_status"] == "platinum" for v in enriched)
