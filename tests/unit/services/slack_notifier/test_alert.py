"""Reading alerts: the enriched record strictly, and a RecordError (dead letter) when a field the
message needs is missing."""

import json
from typing import Any

import pytest
from confluent_kafka import Message
from support.services import enriched_record

from foundation.errors import RecordError
from services.slack_notifier.alert import decode_alert


def kafka(value: dict[str, Any] | bytes) -> Message:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return Message(topic="alerts", partition=0, offset=1, key=b"1", value=raw)


def test_an_alert_has_what_the_message_shows() -> None:
    alert = decode_alert(kafka(enriched_record(3, stars=1, message=None, channel=None)))
    assert (alert.rating_id, alert.stars, alert.name, alert.message, alert.channel) == (
        3,
        1,
        "Rica Blaisdell",
        "",
        "",
    )


def test_the_name_falls_back_to_first_and_last_name() -> None:
    assert decode_alert(kafka(enriched_record(3, full_name=None))).name == "Rica Blaisdell"


def test_a_customer_without_name_or_email_on_file_is_still_alerted_on() -> None:
    unknown = enriched_record(3, email=None, full_name=None, first_name=None, last_name=None)
    alert = decode_alert(kafka(unknown))
    assert (alert.name, alert.email) == ("(no name on file)", "(no email on file)")


@pytest.mark.parametrize(
    "value, reason",
    [
        (b"not json", "Invalid JSON"),
        (enriched_record(1, stars=9), "stars"),
        ({"rating_id": 1}, "user_id"),
        (enriched_record(1, club_status=None), "missing club_status"),
        (enriched_record(1, customer_matched=False), "customer_matched"),
    ],
)
def test_a_malformed_alert_is_a_record_error(value: dict[str, Any] | bytes, reason: str) -> None:
    with pytest.raises(RecordError, match=reason):
        decode_alert(kafka(value))
