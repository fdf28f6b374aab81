"""Spark's parse of ratings and change events on small in-memory data: the reasons it gives
the records the driver's Arrow parse leaves to it."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from enrichment_job.records import transforms as T
from tests.support.change_events import change_event as _event
from tests.support.ratings import rating_value as _rating

# py4j leaves its gateway sockets to the garbage collector; that is py4j's, not a leak of ours.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
MAX_FUTURE_MS = 300_000
RAW = "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP"


def _raw(spark: Any, values: list[bytes | None], topic: str = "ratings") -> Any:
    rows = [(b"k", v, topic, 0, i, None) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, RAW)


RATING_CASES: list[tuple[bytes | None, str | None]] = [
    (_rating(), None),
    (_rating(route_id=..., channel=..., message=...), None),
    (None, "empty value"),
    (b"{not json", "not a JSON object"),
    (b"[1, 2]", "not a JSON object"),
    (_rating(stars=...), "missing field stars"),
    (_rating(user_id=None), "missing field user_id"),
    (_rating(stars="five"), "field stars is not int"),
    (_rating(rating_time=1.5), "field rating_time is not bigint"),
    (_rating(stars=0), "stars outside 1..5"),
    (_rating(stars=6), "stars outside 1..5"),
    (_rating(message="caf-").replace(b"caf-", b"caf\xe9"), "value is not valid UTF-8"),
]


def test_each_rating_is_readable_or_has_a_reason(spark: Any) -> None:
    raw = _raw(spark, [value for value, _ in RATING_CASES])
    rows = T.parse_ratings(raw, MAX_FUTURE_MS).orderBy("offset").collect()
    assert [row.dlq_reason for row in rows] == [reason for _, reason in RATING_CASES]
    good = [row for row in rows if row.dlq_reason is None]
    assert [(row.rating_id, row.user_id, row.rating_time) for row in good] == [(1, 7, 1_000)] * 2


def test_a_rating_too_large_for_its_enriched_copy_is_a_dead_letter(spark: Any) -> None:
    small, large = _rating(message="x" * 800), _rating(message="x" * 1_200)
    rows = T.parse_ratings(_raw(spark, [small, large]), MAX_FUTURE_MS, max_bytes=1_000).orderBy("offset")
    reasons = [row.dlq_reason for row in rows.collect()]
    assert reasons[0] is None
    assert reasons[1] == (
        "value over 1000 bytes (ENRICH_MAX_RATING_BYTES): its enriched copy would not fit in a Kafka record"
    )


def test_a_rating_time_before_1970_or_too_far_after_its_kafka_timestamp_is_a_dead_letter(spark: Any) -> None:
    sent = datetime(2026, 11, 24, 12, tzinfo=UTC)
    sent_ms = int(sent.timestamp() * 1000)
    cases = [
        (sent_ms + MAX_FUTURE_MS, None),  # as far ahead as allowed
        (sent_ms - 86_400_000, None),  # a day old: late, not wrong
        (sent_ms + MAX_FUTURE_MS + 1, "rating_time more than 300000 ms after the record's Kafka timestamp"),
        (2**63 - 1, "rating_time more than 300000 ms after"),  # would overflow rating_time + grace
        (-1, "rating_time before 1970-01-01"),
    ]
    rows = [(b"k", _rating(rating_time=t), "ratings", 0, i, sent) for i, (t, _) in enumerate(cases)]
    parsed = T.parse_ratings(spark.createDataFrame(rows, RAW), MAX_FUTURE_MS).orderBy("offset").collect()
    for row, (_, reason) in zip(parsed, cases, strict=True):
        assert (row.dlq_reason or "").startswith(reason or ""), row
        assert (row.dlq_reason is None) == (reason is None)


def test_each_change_event_is_readable_or_has_a_reason(spark: Any) -> None:
    values = [
        _event("c", 7, 1_000, 10),
        _event("u", 7, 2_000, 20, club_status="platinum"),
        _event("d", 7, 3_000, 30),
        None,  # tombstone after the delete
        b"garbage",
        json.dumps({"op": "x", "after": {"id": 1}, "source": {"ts_ms": 1}}).encode(),
        json.dumps({"op": "c", "after": {"first_name": "no id"}, "source": {"ts_ms": 1}}).encode(),
    ]
    events = T.parse_cdc(_raw(spark, values, "asgard.demo.customers")).collect()
    assert [e.dlq_reason for e in events] == [
        None,
        None,
        None,
        None,
        "not a JSON object",
        "unknown op",
        "change event without a customer id",
    ]
    assert [e.is_tombstone for e in events][:4] == [False, False, False, True]
