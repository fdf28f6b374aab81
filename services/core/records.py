"""What flows from the consumer loop to a sink: decoded records with their Kafka coordinates."""

from dataclasses import dataclass
from typing import Generic, TypeVar

from confluent_kafka import Message

__all__ = ["Incoming", "Rejected", "T"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Incoming(Generic[T]):
    """A decoded record and the Kafka message it came from (for offsets and dead letters)."""

    value: T
    message: Message

    @property
    def topic(self) -> str:
        return str(self.message.topic())

    @property
    def partition(self) -> int:
        return int(self.message.partition() or 0)

    @property
    def offset(self) -> int:
        return int(self.message.offset() or 0)


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record the service could not handle, with the reason that goes to the dead-letter topic."""

    message: Message
    reason: str
