"""Dead letters: the original key, value and headers of a record, plus why and where it came from."""

import logging

from confluent_kafka import KafkaError, Message, Producer

from services.core.errors import SinkUnavailable
from services.core.records import Rejected

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


class DeadLetters:
    """Writes rejected records to one topic and confirms them before the loop commits offsets."""

    def __init__(self, producer: Producer, topic: str, stage: str) -> None:
        self.producer, self.topic, self.stage = producer, topic, stage
        self._failures: list[str] = []

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._failures.append(str(err))

    def send(self, rejected: list[Rejected], timeout_s: float = 30.0) -> None:
        """Produce and wait for every dead letter; SinkUnavailable if Kafka did not confirm them all."""
        if not rejected:
            return
        for item in rejected:
            log.warning(
                "dead letter %s[%s]@%s: %s",
                item.message.topic(),
                item.message.partition(),
                item.message.offset(),
                item.reason,
            )
            self.producer.produce(
                self.topic,
                key=item.message.key(),
                value=item.message.value(),
                headers=dead_letter_headers(item.message, item.reason, self.stage),
                on_delivery=self._delivered,
            )
        left = self.producer.flush(timeout_s)
        failures, self._failures = self._failures, []
        if left or failures:
            raise SinkUnavailable(
                f"dead-letter topic {self.topic}: {left} unconfirmed, errors {failures[:3]}"
            )
