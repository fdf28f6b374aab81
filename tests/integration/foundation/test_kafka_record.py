"""The bound on what a consumer fetches ahead, against the real broker: a reader that reads
slowly while 12 MB wait fetches no more than its bound (plus a fetch) in librdkafka's queue,
where librdkafka's own settings hold all of it."""

import json
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from support.kafka import produce

from services.views.config import ViewsApiSettings

StackEnv = dict[str, str]
RECORD = b"x" * 10_000
# max.partition.fetch.bytes: librdkafka overshoots its bound by one fetch, and the statistics may
# count the next one as it arrives
ONE_FETCH = 1_048_576


def _fetched_ahead(config: dict[str, Any], topic: str) -> int:
    """The most bytes the consumer fetched ahead of its reader over 3 s while its reader took one
    record every 0.3 s (librdkafka's statistics, every 100 ms: the offsets fetched against those
    handed to the reader, times the records' size)."""
    most = 0

    def stats(raw: str) -> None:
        nonlocal most
        partition = json.loads(raw)["topics"].get(topic, {}).get("partitions", {}).get("0", {})
        ahead = int(partition.get("next_offset", 0)) - max(0, int(partition.get("app_offset", 0)))
        most = max(most, ahead * len(RECORD))

    consumer = Consumer({**config, "statistics.interval.ms": 100, "stats_cb": stats})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        taken = consumer.consume(1, 30)
        assert len(taken) == 1 and taken[0].error() is None
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            time.sleep(0.3)
            consumer.consume(1, 0)  # a slow reader; the call also serves the statistics callback
    finally:
        consumer.close()
    return most


def test_what_a_consumer_fetches_ahead_stays_under_its_bound_in_bytes(
    stack_env: StackEnv, new_topic: str
) -> None:
    produce(stack_env, new_topic, [(None, RECORD)] * 1200)  # 12 MB
    settings = ViewsApiSettings(
        bootstrap_servers=stack_env["KAFKA_BOOTSTRAP_SERVERS"], fetch_queue_bytes=2_000_000
    )
    bounded = _fetched_ahead(settings.consumer_config(), new_topic)
    assert 0 < bounded <= 2_000_000 + 2 * ONE_FETCH
    # librdkafka's own bound (100,000 records or 64 MiB) let it fetch the whole topic ahead
    unbounded = _fetched_ahead(
        {k: v for k, v in settings.consumer_config().items() if k != "queued.max.messages.kbytes"}, new_topic
    )
    assert unbounded > 10_000_000
