"""The largest Kafka record the product writes: the one bound that every process's producer and
every size check against it share; what a consumer may fetch ahead of its reader, in bytes; and a
topic's settings as the broker has them."""

from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource

__all__ = ["FETCH_QUEUE_BACKOFF_MS", "MAX_RECORD_BYTES", "prefetch_config", "topic_configs"]

# librdkafka's default message.max.bytes, the largest record a producer sends (the broker's own
# default limit, message.max.bytes, is about the same): key, value, headers and framing.
MAX_RECORD_BYTES = 1_000_000

# How long librdkafka waits before it fetches again once its queue was full (1 s by default): a
# reader that empties the queue sooner than that waits for nothing.
FETCH_QUEUE_BACKOFF_MS = 10


def prefetch_config(queue_bytes: int) -> dict[str, int]:
    """librdkafka settings that keep what a consumer fetched ahead of its reader under
    `queue_bytes` (overshot by one fetch at most). librdkafka's own bound is 100,000 records or
    64 MiB a consumer, whichever comes first: a reader that falls behind (catching up on a
    backlog, a sink paused by an outage) held that much whatever its records' sizes."""
    return {
        "queued.max.messages.kbytes": max(1, -(-queue_bytes // 1024)),
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    }


def topic_configs(config: Mapping[str, Any], topic: str, timeout_s: float) -> dict[str, str | None]:
    """`topic`'s settings (name -> value) as the broker has them (DescribeConfigs). The client's
    errors are raised as they come (KafkaException: no right to read them, no such topic; a
    timeout): each caller decides what it does without them."""
    admin = AdminClient(dict(config))  # held until the answer came: its futures die with it
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout_s)
    return {name: entry.value for name, entry in entries.items()}
