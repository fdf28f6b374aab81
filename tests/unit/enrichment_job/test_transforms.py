"""The job's transforms on small in-memory data: parsing, dead-letter reasons, versions, the
as-of join with grace, alerts."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from enrichment_job import transforms as T
from tests.support.change_events import change_event as _event
from tests.support.change_events import versions_frame

# py4j leaves its gateway sockets to the garbage collector; that is py4j's, not a leak of ours.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
MAX_FUTURE_MS = 300_000
RAW = "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP"


def _raw(spark: Any, values: list[bytes | None], topic: str = "ratings") -> Any:
    rows = [(b"k", v, topic, 0, i, None) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, RAW)


def _rating(**overrides: Any) -> bytes:
    rating = {
        "rating_id": 1,
        "user_id": 7,
        "stars": 4,
        "route_id": 3,
        "rating_time": 1_000,
        "channel": "web",
        "message": "ok",
    }
    rating.update(overrides)
    return json.dumps({k: v for k, v in rating.items() if v is not ...}).encode()


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


def _table(spark: Any) -> Any:
    values = [
        _event("c", 7, 1_000, 10, last_name="Lovelace"),
        _event("u", 7, 2_000, 20, last_name="Lovelace", club_status="platinum"),
        _event("d", 7, 3_000, 30),
        _event("c", 7, 4_000, 40, last_name="Again", club_status="gold"),
        _event("c", 8, 10_000, 50, first_name="Late", last_name="Comer", club_status="gold"),
    ]
    return versions_frame(spark, values)


def _ratings(spark: Any, pairs: list[tuple[int, int]]) -> Any:
    values = [_rating(rating_id=i, user_id=uid, rating_time=t) for i, (uid, t) in enumerate(pairs)]
    return T.parse_ratings(_raw(spark, values), MAX_FUTURE_MS).where("dlq_reason IS NULL")


# (user_id, rating_time, grace_ms, club status of the version joined, or None for unmatched)
JOIN_CASES = [
    (7, 1_500, 0, "silver"),  # the version valid at the rating's time
    (7, 2_000, 0, "platinum"),  # an update opens its version at its own time
    (7, 3_500, 0, None),  # deleted: unmatched
    (7, 4_000, 0, "gold"),  # re-inserted: matched again
    (7, 500, 0, None),  # before the customer existed, no grace
    (7, 500, 600, "silver"),  # created within the grace after the rating: its first row
    (8, 9_000, 1_000, "gold"),  # exactly at the grace limit
    (8, 8_999, 1_000, None),  # beyond the grace: unmatched
    (99, 1_500, 5_000, None),  # no such customer
]


@pytest.mark.parametrize("split", [None, 1, 3])
@pytest.mark.parametrize("grace_ms", sorted({case[2] for case in JOIN_CASES}))
def test_asof_join(spark: Any, grace_ms: int, split: int | None) -> None:
    """`split`: versions from that offset on are the recent ones, broadcast beside the base."""
    cases = [case for case in JOIN_CASES if case[2] == grace_ms]
    ratings = _ratings(spark, [(uid, t) for uid, t, _, _ in cases])
    table = _table(spark)
    if split is None:
        base, recent = table, None
    else:
        base, recent = table.where(f"cdc_offset < {split}"), table.where(f"cdc_offset >= {split}")
    rows = T.asof_join(ratings, base, grace_ms, recent).orderBy("rating_id").collect()
    assert [row.club_status for row in rows] == [expected for *_, expected in cases]
    assert [row.customer_matched for row in rows] == [expected is not None for *_, expected in cases]
    assert [row.customer_version is None for row in rows] == [expected is None for *_, expected in cases]


def test_every_rating_comes_out_once_matched_or_not(spark: Any) -> None:
    pairs = [(7, t) for t in range(0, 5_000, 100)] + [(8, 9_500), (42, 1)]
    out = T.asof_join(_ratings(spark, pairs), _table(spark), 1_000).collect()
    assert sorted(r.rating_id for r in out) == list(range(len(pairs)))


def test_full_name_and_alert_rule(spark: Any) -> None:
    ratings = T.parse_ratings(
        _raw(
            spark,
            [
                _rating(rating_id=1, stars=2, rating_time=2_500),
                _rating(rating_id=2, stars=3, rating_time=2_500),
                _rating(rating_id=3, stars=1, rating_time=1_500),
            ],
        ),
        MAX_FUTURE_MS,
    ).where("dlq_reason IS NULL")
    enriched = T.asof_join(ratings, _table(spark), 0)
    assert {r.rating_id: r.full_name for r in enriched.collect()} == {
        1: "Ada Lovelace",
        2: "Ada Lovelace",
        3: "Ada Lovelace",
    }
    assert [r.rating_id for r in T.alerts(enriched, stars_below=3, club_status="platinum").collect()] == [1]


def test_dead_letters_keep_the_original_bytes_and_say_why(spark: Any) -> None:
    bad = T.parse_ratings(_raw(spark, [b"{broken"]), MAX_FUTURE_MS).where("dlq_reason IS NOT NULL")
    (row,) = T.dead_letters(bad, "enrichment").collect()
    assert row.value == b"{broken"
    headers = {h.key: bytes(h.value).decode() for h in row.headers}
    assert headers == {
        "dlq.reason": "not a JSON object",
        "dlq.stage": "enrichment",
        "dlq.topic": "ratings",
        "dlq.partition": "0",
        "dlq.offset": "0",
    }


def _released(spark: Any, pairs: list[tuple[int, int]], watermark_ms: int | None, grace_ms: int) -> Any:
    """offset -> released, for ratings (user_id, rating_time) joined to `_table`."""
    joined = T.asof_join(_ratings(spark, pairs), _table(spark), grace_ms)
    released = T.release(T.with_batch_values(joined, cdc_watermark_ms=watermark_ms), grace_ms)
    return {r.rating_offset: r.released for r in released.collect()}


def test_release_waits_for_the_watermark_and_keeps_each_customers_order(spark: Any) -> None:
    # user 7: offsets 0,1,2 with times 100, 5_000, 200; user 8: offset 3 at time 300
    ratings = [(7, 100), (7, 5_000), (7, 200), (8, 300)]
    assert _released(spark, ratings, None, 0) == dict.fromkeys(range(4), False)
    # offset 2 is old enough but waits behind offset 1 of the same customer; user 8 is independent.
    assert _released(spark, ratings, 1_000, 500) == {0: True, 1: False, 2: False, 3: True}
    assert _released(spark, ratings, 6_000, 500) == dict.fromkeys(range(4), True)


def test_release_runs_where_the_join_left_each_customer_no_second_shuffle(spark: Any) -> None:
    """As the job runs it: ratings and table hash-partitioned by customer, no broadcast of the
    table. The join's output stays partitioned by user_id, so the window per customer of
    `release` moves no row again (it used to shuffle every enriched row a second time)."""

    def shuffles(df: Any) -> int:
        return str(df._jdf.queryExecution().executedPlan().toString()).count("Exchange hashpartitioning")

    threshold = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        ratings = _ratings(spark, [(7, 1_500), (8, 9_000)]).repartition(2, "user_id")
        base = _table(spark).repartition(2, "id").sortWithinPartitions("id")
        joined = T.with_batch_values(T.asof_join(ratings, base, 0), cdc_watermark_ms=10_000)
        released = T.release(joined, 0)
        assert shuffles(joined) == 2  # the ratings and the table, each by customer
        assert shuffles(released) == shuffles(joined)
        assert sorted(r.released for r in released.collect()) == [True, True]
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", threshold)


def test_the_grace_delays_only_ratings_without_a_version_valid_at_their_time(spark: Any) -> None:
    ratings = [
        (7, 1_500),  # version valid since 1_000: final once the watermark passes 1_500
        (8, 2_000),  # no version yet: a row created up to 7_000 would still join it
        (7, 2_700),  # not yet passed by the watermark
        (7, 500),  # user 7's first row came 500 ms after it: only the grace decides
    ]
    assert _released(spark, ratings, 2_600, 5_000) == {0: True, 1: False, 2: False, 3: False}
    assert _released(spark, ratings, 3_000, 5_000) == {0: True, 1: False, 2: True, 3: False}
    assert _released(spark, ratings, 7_001, 5_000) == dict.fromkeys(range(4), True)
    # A delete valid at the rating's time is final too: unmatched, with no wait for the grace.
    assert _released(spark, [(7, 3_500)], 3_600, 5_000) == {0: True}
