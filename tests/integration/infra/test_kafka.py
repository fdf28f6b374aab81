from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from infra.stack.bootstrap import read_topics

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


def test_the_topics_carry_the_configs_topics_txt_gives(stack_env: StackEnv) -> None:
    """Every topic of infra/kafka/topics.txt carries its configs (`make up` sets them on topics
    an earlier one made too): the services' dead-letter topics take records of 2 MiB."""
    admin = AdminClient({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
    wanted = {t.name: t.config for t in read_topics() if t.config}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in wanted]
    found = {r.name: f.result(30) for r, f in admin.describe_configs(resources).items()}
    differ = {
        (name, key): found[name][key].value
        for name, config in wanted.items()
        for key, value in config.items()
        if found[name][key].value != value
    }
    assert differ == {}
    assert found["es-sink-dlq"]["max.message.bytes"].value == "2097152"
