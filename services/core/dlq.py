"""Dead letters: the original key, value and headers of a record, plus why and where it came from."""

import logging
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from foundation.errors import SinkUnavailable
from foundation.kafka_record import MAX_RECORD_BYTES, topic_configs
from services.core.records import Rejected

__all__ = ["DeadLetters", "Origin", "dead_letter_headers", "producer_for", "record_limit"]

log = logging.getLogger(__name__)


def dead_letter_headers(message: Message, reason: str, stage: str) -> list[tuple[str, str | bytes | None]]:
    """The same dlq.* headers the enrichment job writes, after the record's own headers."""
    headers = message.headers() or []
    own = list(headers.items()) if isinstance(headers, dict) else list(headers)
    return [
        *own,
        ("dlq.reason", reason.encode()),
        ("dlq.stage", stage.encode()),
        ("dlq.topic", str(message.topic()).encode()),
        ("dlq.partition", str(message.partition()).encode()),
        ("dlq.offset", str(message.offset()).encode()),
    ]


Origin = tuple[str | None, int | None, int | None]  # a rejected record's topic, partition and offset


def _origin(item: Rejected) -> Origin:
    return item.message.topic(), item.message.partition(), item.message.offset()


# What a record's headers and framing may take beside its key and value.
_FRAMING_BYTES = 1_024


def _size(key: bytes | None, value: bytes | None, headers: list[tuple[str, str | bytes | None]]) -> int:
    extra = sum(len(k) + len(v or b"") for k, v in headers)
    return len(key or b"") + len(value or b"") + extra + _FRAMING_BYTES


def record_limit(config: dict[str, Any], topic: str, timeout_s: float = 10.0) -> int:
    """The largest record `topic` takes, its `max.message.bytes` as the broker says; Kafka's
    usual limit (MAX_RECORD_BYTES) when that cannot be read (no DescribeConfigs right on it)."""
    try:
        limit = topic_configs(config, topic, timeout_s)["max.message.bytes"]
        if limit is None:
            raise ValueError("max.message.bytes has no value")
        return int(limit)
    except (KafkaException, FutureTimeout, KeyError, ValueError, TypeError) as err:
        log.warning(
            "dead-letter topic %s: its max.message.bytes could not be read (%s); a dead letter over %d"
            " bytes goes without its value",
            topic,
            err,
            MAX_RECORD_BYTES,
        )
        return MAX_RECORD_BYTES


def producer_for(config: dict[str, Any], max_bytes: int) -> Producer:
    """The dead-letter producer, able to send a record of `max_bytes` (librdkafka's own limit is
    MAX_RECORD_BYTES)."""
    size = max(max_bytes, MAX_RECORD_BYTES)
    return Producer({**config, "message.max.bytes": size + _FRAMING_BYTES, "batch.size": size})


class DeadLetters:
    """Writes rejected records to one topic and confirms them before the loop commits offsets.

    A dead letter carries the record's value whole up to `max_bytes`, the largest record its
    topic takes (`record_limit`; the stack's dead-letter topics take 2 MiB, so that any record
    read from a topic of Kafka's usual limit fits with the dlq.* headers). Over it (its value,
    the record's own headers and the dlq.* ones), it goes without its value, with a header that
    says so: sent whole, the producer refused it, the loop took that for an outage, and the
    service retried it for ever. Its dlq.topic, dlq.partition and dlq.offset headers point at
    the original record.

    A send that timed out leaves its dead letters queued in the producer, where they may still
    be delivered: the same batch sent again produces only those that were not (a failed
    delivery), instead of a second copy of each."""

    def __init__(self, producer: Producer, topic: str, stage: str, max_bytes: int = MAX_RECORD_BYTES) -> None:
        self.producer, self.topic, self.stage, self.max_bytes = producer, topic, stage, max_bytes
        self._failures: list[str] = []
        self._queued: set[Origin] = set()  # produced, not reported yet
        self._confirmed: set[Origin] = set()  # delivered since the last send that confirmed all

    def _delivered(self, origin: Origin, err: KafkaError | None, _msg: Message) -> None:
        self._queued.discard(origin)
        if err is None:
            self._confirmed.add(origin)
        else:
            self._failures.append(str(err))

    def send(self, rejected: list[Rejected], timeout_s: float = 30.0) -> None:
        """Produce and wait for every dead letter; SinkUnavailable if Kafka did not confirm them all."""
        if not rejected:
            return
        for item in rejected:
            origin = _origin(item)
            if origin in self._queued or origin in self._confirmed:
                continue  # sent by an earlier try of this batch: waited for, not sent again
            log.warning("dead letter %s[%s]@%s: %s", *origin, item.reason)
            key, value = item.message.key(), item.message.value()
            headers = dead_letter_headers(item.message, item.reason, self.stage)
            if _size(key, value, headers) > self.max_bytes:
                dropped = (
                    f"{len(value or b'')} bytes, over the dead-letter record limit; the original is at"
                    " dlq.topic, dlq.partition, dlq.offset"
                )
                headers.append(("dlq.value.dropped", dropped.encode()))
                log.error("dead letter %s[%s]@%s: its value is left out (%s)", *origin, dropped)
                value = None
            self._queued.add(origin)
            self.producer.produce(
                self.topic,
                key=key,
                value=value,
                headers=headers,
                on_delivery=partial(self._delivered, origin),
            )
        left = self.producer.flush(timeout_s)
        failures, self._failures = self._failures, []
        if not left and not failures:
            self._confirmed.clear()
        if left or failures:
            raise SinkUnavailable(
                f"dead-letter topic {self.topic}: {left} unconfirmed, errors {failures[:3]}"
            )
