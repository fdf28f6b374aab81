"""Kafka helpers every integration test uses: produce, read back committed records, topics."""

import json
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

StackEnv = dict[str, str]


def produce(
    stack_env: StackEnv,
    topic: str,
    records: list[tuple[bytes | None, bytes | None]],
    timestamp_ms: int = 0,  # the records' CreateTime; 0: the producer's clock
) -> None:
    producer = Producer({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
    for key, value in records:
        producer.produce(topic, key=key, value=value, timestamp=timestamp_ms)
    assert producer.flush(30) == 0


def read_topic(
    stack_env: StackEnv, topic: str, min_records: int = 0, timeout_s: float = 60, idle_s: float = 2
) -> list[Any]:
    """Every committed record of a topic from the start (isolation.level=read_committed): reads
    until at least `min_records` have come and then none for `idle_s`, or until `timeout_s`."""
    consumer = Consumer(
        {
            "bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    last_new = time.monotonic()
    try:
        while time.monotonic() < deadline:
            if len(records) >= min_records and time.monotonic() - last_new >= idle_s:
                break
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                records.append(msg)
                last_new = time.monotonic()
    finally:
        consumer.close()
    return records


def values(records: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(r.value()) for r in records]


COMPACTED = {"cleanup.policy": "compact"}  # a commits topic's policy: the markers stay


def make_topics(
    stack_env: StackEnv, names: list[str], partitions: int = 2, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
    new = [NewTopic(n, num_partitions=partitions, replication_factor=1, config=config or {}) for n in names]
    for future in admin.create_topics(new).values():
        future.result(30)
    # The controller's answer comes before the broker serves the topics: a client at once could
    # be told the topic is unknown. Until each partition has a leader in the metadata.
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            meta = admin.list_topics(name, timeout=10).topics.get(name)
            ready = meta is not None and meta.error is None and len(meta.partitions) == partitions
            if ready and all(p.leader >= 0 for p in meta.partitions.values()):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} has no leader for every partition within 30 s")
            time.sleep(0.1)


def drop_topics(stack_env: StackEnv, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
    for future in admin.delete_topics(names).values():
        future.result(30)


def committed_total(stack_env: StackEnv, group: str, topic: str) -> int:
    """The sum over partitions of the group's committed offsets (0 where none is committed)."""
    consumer = Consumer({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"], "group.id": group})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = consumer.committed([TopicPartition(topic, p) for p in meta.partitions], timeout=10)
        return sum(max(tp.offset, 0) for tp in parts)
    finally:
        consumer.close()
