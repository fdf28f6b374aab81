"""Dead letters against the real broker: a send whose wait timed out leaves its records queued in
the producer, and the same batch sent again waits for them instead of writing each twice."""

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.kafka import StackEnv, make_topics, produce, read_topic

from foundation.errors import SinkUnavailable
from services.core.dlq import DeadLetters
from services.core.records import Rejected


def _rejected(stack_env: StackEnv, topic: str, count: int) -> list[Rejected]:
    consumer = Consumer(
        {"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"], "group.id": uuid.uuid4().hex}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    messages = []
    try:
        while len(messages) < count:
            messages += [m for m in consumer.consume(count, 10) if m.error() is None]
    finally:
        consumer.close()
    return [Rejected(m, "bad") for m in messages]


def test_a_batch_sent_again_after_a_timeout_writes_each_dead_letter_once(
    stack_env: StackEnv, unique: str
) -> None:
    source, dlq = f"in-{unique}", f"dlq-{unique}"
    make_topics(stack_env, [source, dlq], partitions=1)
    produce(stack_env, source, [(b"k", f"v{i}".encode()) for i in range(5)])
    rejected = _rejected(stack_env, source, 5)
    producer = Producer({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"], "linger.ms": 200})
    letters = DeadLetters(producer, dlq, "test")
    with pytest.raises(SinkUnavailable, match="unconfirmed"):
        letters.send(rejected, timeout_s=0)  # still lingering in the producer: not confirmed
    letters.send(rejected)  # the loop's retry of the same batch
    letters.send(rejected[:1])  # a later batch with the same record again: a new dead letter
    written = read_topic(stack_env, dlq, min_records=6, timeout_s=30)
    assert sorted(m.value() for m in written) == [b"v0", b"v0", b"v1", b"v2", b"v3", b"v4"]
