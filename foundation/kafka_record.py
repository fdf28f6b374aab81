"""The largest Kafka record the product writes: the one bound that every process's producer and
every size check against it share; and a topic's settings as the broker has them."""

from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource

__all__ = ["MAX_RECORD_BYTES", "topic_configs"]

# librdkafka's default message.max.bytes, the largest record a producer sends (the broker's own
# default limit, message.max.bytes, is about the same): key, value, headers and framing.
MAX_RECORD_BYTES = 1_000_000


def topic_configs(config: Mapping[str, Any], topic: str, timeout_s: float) -> dict[str, str | None]:
    """`topic`'s settings (name -> value) as the broker has them (DescribeConfigs). The client's
    errors are raised as they come (KafkaException: no right to read them, no such topic; a
    timeout): each caller decides what it does without them."""
    admin = AdminClient(dict(config))  # held until the answer came: its futures die with it
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout_s)
    return {name: entry.value for name, entry in entries.items()}
