"""The dead-letter producer's record limit: the topic's, else Kafka's usual one, and a producer
that can send it."""

import logging

import pytest

from foundation.kafka_record import MAX_RECORD_BYTES
from services.core import dlq


def test_a_topic_whose_limit_cannot_be_read_gets_kafka_s_usual_one_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = {"bootstrap.servers": "127.0.0.1:9", "socket.connection.setup.timeout.ms": 1000}
    with caplog.at_level(logging.WARNING, logger=dlq.__name__):
        assert dlq.record_limit(config, "somewhere-dlq", timeout_s=0.5) == MAX_RECORD_BYTES
    assert "somewhere-dlq: its max.message.bytes could not be read" in caplog.text


@pytest.mark.parametrize("limit", [600_000, MAX_RECORD_BYTES, 2_097_152])
def test_the_producer_takes_a_record_of_the_limit(limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[dict[str, object]] = []
    monkeypatch.setattr(dlq, "Producer", made.append)
    dlq.producer_for({"bootstrap.servers": "x", "acks": "all"}, limit)
    (config,) = made
    assert config["acks"] == "all"
    assert int(str(config["message.max.bytes"])) > max(limit, MAX_RECORD_BYTES)
    assert int(str(config["batch.size"])) >= limit
