"""Data survives `make down` / `make up`: topics and messages, rows, objects, documents.

Runs last (marker restarts_stack) because it stops the stack the other tests use."""

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from elasticsearch import Elasticsearch
from support.stack import stack_command

from infra.stack.clients import app_db

StackEnv = dict[str, str]


def _first_message(servers: str, topic: str) -> bytes | None:
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"{topic}-{time.time_ns()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    try:
        for _ in range(30):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                return msg.value()
    finally:
        consumer.close()
    return None


def _produce_one(servers: str, topic: str, value: bytes) -> None:
    """The producer is gone when this returns, so it does not retry a stopped broker in the logs."""
    producer = Producer({"bootstrap.servers": servers})
    producer.produce(topic, value)
    assert producer.flush(30) == 0


@pytest.mark.restarts_stack
def test_topics_rows_objects_and_documents_survive_down_and_up(
    stack_env: StackEnv, s3: Any, unique: str
) -> None:
    servers = stack_env["KAFKA_BOOTSTRAP_SERVERS"]
    topic = f"test-restart-{unique}"
    admin = AdminClient({"bootstrap.servers": servers})  # kept: its futures need a live handle
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    _produce_one(servers, topic, b"kept across restarts")
    with app_db(stack_env) as conn, conn.cursor() as cur:
        cur.execute(
            "INSERT INTO customers (first_name, email, club_status) VALUES ('Kept', %s, 'gold')",
            (f"{unique}@example.com",),
        )
        customer_id = cur.lastrowid
    bucket, key = stack_env["S3_BUCKET"], f"tests/{unique}/kept.txt"
    s3.put_object(Bucket=bucket, Key=key, Body=b"kept")
    es = Elasticsearch(stack_env["ELASTICSEARCH_URL"])
    es.index(index=f"test-{unique}", id="1", document={"kept": True}, refresh="wait_for")
    es.close()

    assert "stack stopped" in stack_command("down")
    assert "supervisor: not running" in stack_command("status", expect_rc=1)
    assert "stack is up" in stack_command("up")

    assert _first_message(servers, topic) == b"kept across restarts"
    admin = AdminClient({"bootstrap.servers": servers})
    admin.delete_topics([topic])[topic].result(30)
    with app_db(stack_env) as conn, conn.cursor() as cur:
        cur.execute("SELECT club_status FROM customers WHERE id = %s", (customer_id,))
        assert cur.fetchone() == ("gold",)
        cur.execute("DELETE FROM customers WHERE id = %s", (customer_id,))
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"kept"
    s3.delete_object(Bucket=bucket, Key=key)
    es = Elasticsearch(stack_env["ELASTICSEARCH_URL"])
    try:
        assert es.get(index=f"test-{unique}", id="1")["_source"] == {"kept": True}
    finally:
        es.indices.delete(index=f"test-{unique}")
        es.close()
