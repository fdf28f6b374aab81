from confluent_kafka import Consumer, Producer

StackEnv = dict[str, str]


def test_produce_and_consume_through_kafka(stack_env: StackEnv, new_topic: str) -> None:
    servers = stack_env["KAFKA_BOOTSTRAP_SERVERS"]
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
    sent = [(f"k{i}".encode(), f"value {i}".encode()) for i in range(5)]
    for key, value in sent:
        producer.produce(new_topic, key=key, value=value)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": new_topic,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([new_topic])
    received = []
    try:
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                received.append((msg.key(), msg.value()))
            if len(received) == len(sent):
                break
    finally:
        consumer.close()
    assert received == sent


def test_auto_topic_creation_is_off(stack_env: StackEnv, unique: str) -> None:
    producer = Producer(
        {"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"], "message.timeout.ms": 3000}
    )
    errors = []
    producer.produce(f"never-created-{unique}", b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
