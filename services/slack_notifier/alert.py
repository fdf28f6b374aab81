"""An alert as the notifier needs it: the enriched rating, strictly read, with the fields a message
shows. A customer without a name or an email on file is still alerted on (the message says what
is missing); a record that is no alert at all (unreadable, or no matched customer with a club
status) is a RecordError and goes to the dead-letter topic."""

from dataclasses import dataclass

from confluent_kafka import Message

from foundation.enriched import decode_enriched, rating_digest
from foundation.errors import RecordError

__all__ = ["NO_EMAIL", "NO_NAME", "Alert", "decode_alert"]

NO_NAME = "(no name on file)"
NO_EMAIL = "(no email on file)"


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
    rating: str = ""  # a digest of what the rating says (RATING_NAMES): another rating, another digest


def decode_alert(message: Message) -> Alert:
    record = decode_enriched(message)
    name = record.full_name or " ".join(p for p in (record.first_name, record.last_name) if p)
    if not record.customer_matched or not record.club_status:
        missing = "customer_matched" if not record.customer_matched else "club_status"
        raise RecordError(f"alert without customer data: missing {missing}")
    return Alert(
        rating_id=record.rating_id,
        user_id=record.user_id,
        name=name or NO_NAME,
        email=record.email or NO_EMAIL,
        club_status=str(record.club_status),
        stars=record.stars,
        message=record.message or "",
        channel=record.channel or "",
        rating_time_ms=record.rating_time,
        rating=rating_digest(record),
    )
