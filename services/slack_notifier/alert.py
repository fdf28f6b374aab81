"""An alert as the notifier needs it: the enriched rating, strictly read, with the fields a message
shows. A record without them is a RecordError (it goes to the dead-letter topic)."""

from dataclasses import dataclass

from confluent_kafka import Message

from services.core.enriched import decode_enriched
from services.core.errors import RecordError


@dataclass(frozen=True, slots=True)
class Alert:
    rating_id: int
    user_id: int
    name: str
    email: str
    club_status: str
    stars: int
    message: str
    channel: str
    rating_time_ms: int


def decode_alert(message: Message) -> Alert:
    record = decode_enriched(message)
    name = record.full_name or " ".join(p for p in (record.first_name, record.last_name) if p)
    needed = {"full_name": name, "email": record.email, "club_status": record.club_status}
    missing = [field for field, value in needed.items() if not value]
    if not record.customer_matched or missing:
        raise RecordError(f"alert without customer data: missing {', '.join(missing) or 'customer_matched'}")
    return Alert(
        rating_id=record.rating_id,
        user_id=record.user_id,
        name=name,
        email=str(record.email),
        club_status=str(record.club_status),
        stars=record.stars,
        message=record.message or "",
        channel=record.channel or "",
        rating_time_ms=record.rating_time,
    )
