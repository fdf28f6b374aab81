"""Ratings parsed with no Spark job: Arrow where it can, Python's JSON parser for the rest, with
the fields and reasons Spark's parse gives (the views job and the CDC side parse with Spark)."""

import datetime as dt
from functools import cache
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from enrichment_job.kafka.reader import KAFKA
from enrichment_job.records import rating_values
from enrichment_job.records.rating_values import PARSED, parse
from enrichment_job.records.schemas import RATING_FIELDS
from enrichment_job.records.transforms import KAFKA_META, parse_ratings
from enrichment_job.runtime.plans import Columns, select
from tests.support.ratings import rating_value as rating

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
MAX_FUTURE_MS = 300_000
MAX_BYTES = 1_000
SENT = dt.datetime(2026, 11, 24, 12, tzinfo=dt.UTC)
SENT_MS = int(SENT.timestamp() * 1000)
RAW_SCHEMA = "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP"


def raw(values: list[bytes | None]) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "key": pa.array([b"k"] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["ratings"] * n),
            "partition": pa.array([i % 2 for i in range(n)], pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([SENT] * n, pa.timestamp("ms", tz="UTC")),
        }
    )


def parse_spark(records: pa.Table, spark: SparkSession) -> pa.Table:
    """`PARSED` by Spark's parse (`transforms.parse_ratings`), row for row: the reference."""
    df = spark.createDataFrame(records, RAW_SCHEMA)
    parsed = select(parse_ratings(df, MAX_FUTURE_MS, MAX_BYTES), _flow_columns()).toArrow()
    return parsed.sort_by(rating_values.ORDER).cast(PARSED)


@cache
def _flow_columns() -> Columns:
    bad = F.col("dlq_reason").isNotNull()
    cleared = ("user_id", "rating_time")
    return Columns(
        *[F.when(~bad, F.col(n)).alias(n) if n in cleared else F.col(n) for n in RATING_FIELDS.names],
        *[F.when(bad, F.col("value")).alias("value") if c == "value" else F.col(c) for c in KAFKA_META],
        F.col("dlq_reason"),
    )


# value -> its reason (None: readable)
CASES: list[tuple[bytes | None, str | None]] = [
    (rating(), None),
    (rating(route_id=..., channel=..., message=...), None),
    (rating(extra={"nested": [1, 2]}), None),  # fields it does not know are ignored
    (None, "empty value"),
    (b"{not json", "not a JSON object"),
    (b"[1, 2]", "not a JSON object"),
    (b"null", "not a JSON object"),
    (b"  " + rating(), None),  # whitespace around the object: Spark's parse reads it
    (rating(stars=...), "missing field stars"),
    (rating(user_id=None), "missing field user_id"),
    (rating(stars="five"), "field stars is not int"),
    (rating(rating_time=1.5), "field rating_time is not bigint"),
    (rating(user_id=2**40), "field user_id is not int"),
    (rating(channel=5), None),  # Spark reads a number as text
    (rating(stars=0), "stars outside 1..5"),
    (rating(stars=6), "stars outside 1..5"),
    (rating(rating_time=-1), "rating_time before 1970-01-01"),
    (rating(rating_time=SENT_MS + MAX_FUTURE_MS), None),
    (rating(rating_time=SENT_MS + MAX_FUTURE_MS + 1), "rating_time more than 300000 ms after"),
    (rating(rating_time=2**63 - 1), "rating_time more than 300000 ms after"),
    (rating(message="x" * 2_000), "value over 1000 bytes"),
    (rating(message='quote " \\ \n ünï ✓'), None),
    (rating(message="caf-").replace(b"caf-", b"caf\xe9 \xff"), "value is not valid UTF-8"),
    (b"\xff\xfe\x00{", "value is not valid UTF-8"),
    # Values Arrow's reader does not take whole, which Python's parse reads as Spark's does.
    (rating(channel={"a": [1, 2.50, True, None]}), None),  # a text field takes any JSON, as text
    (rating(channel=1e2), None),
    (rating(channel=True), None),
    (rating(channel=[1, "a"]), None),
    (rating(stars=5.0), "field stars is not int"),
    (rating(stars=True), "field stars is not int"),
    (rating(route_id="7"), "field route_id is not int"),
    (rating(rating_time=2**64), "field rating_time is not bigint"),
    (rating(stars=None, user_id="x"), "missing field stars"),  # a missing field before a wrong type
    (rating(stars=True, user_id=None), "missing field user_id"),
    (rating(stars=9, route_id="x"), "field route_id is not int"),  # the type before the range
    (b"[" + rating() + b"]", "not a JSON object"),
    (b"  " + rating() + b"\n ", None),
]


def _reasons(parsed: pa.Table) -> list[str | None]:
    """In offset order (a parse gives its rows in partition and offset order)."""
    return parsed.sort_by("offset").column("dlq_reason").to_pylist()


def test_each_rating_is_readable_or_has_the_reason_sparks_parse_gives(spark: Any) -> None:
    records = raw([value for value, _ in CASES])
    ours = parse(records, MAX_FUTURE_MS, MAX_BYTES)
    theirs = parse_spark(records, spark)
    for reason, (_, expected) in zip(_reasons(ours), CASES, strict=True):
        assert (reason or "").startswith(expected or ""), reason
        assert (reason is None) == (expected is None), reason
    assert ours.schema == PARSED
    # The same row for row; of a dead letter only its record and reason are used.
    kept = [*KAFKA.names, "dlq_reason"]
    assert ours.select(kept).to_pylist() == theirs.select(kept).to_pylist()
    readable = [r for r in ours.to_pylist() if r["dlq_reason"] is None]
    assert readable == [r for r in theirs.to_pylist() if r["dlq_reason"] is None]


# What is not JSON (RFC 8259) but Spark's parse would read: single quotes, what follows the
# object. A producer that writes Python's str(dict) is told so, not half understood.
STRICTER = [
    b"{'rating_id': 1, 'user_id': 7, 'stars': 4, 'rating_time': 1000}",
    rating() + b" trailing",
    rating() + b' {"a": 1}',
]


def test_what_is_not_json_is_a_dead_letter_though_sparks_parse_would_read_it(spark: Any) -> None:
    records = raw(STRICTER)
    assert _reasons(parse(records, MAX_FUTURE_MS, MAX_BYTES)) == ["not a JSON object"] * len(STRICTER)
    assert None in _reasons(parse_spark(records, spark))  # the difference is real


def test_a_batch_never_starts_a_spark_job(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("a Spark session was asked for")

    monkeypatch.setattr(SparkSession, "getActiveSession", refuse)
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse)
    values = [rating(rating_id=n, stars=n % 7) for n in range(500)] + [None, rating(message="x" * 2_000)]
    values[43] = rating(rating_id=43, message="caf-").replace(b"caf-", b"caf\xe9")  # Latin-1
    values[44], values[45], values[46] = b"{broken", rating(stars="x"), rating(rating_id=46, channel=5)
    parsed = parse(raw([value for value, _ in CASES] + values), MAX_FUTURE_MS, MAX_BYTES)
    reasons = _reasons(parsed)[len(CASES) :]
    assert reasons[43:47] == ["value is not valid UTF-8", "not a JSON object", "field stars is not int", None]
    assert reasons.count(None) == sum(1 for n in range(500) if 1 <= n % 7 <= 5) - 3
    channels = parsed.sort_by("offset").column("channel").to_pylist()[len(CASES) :]
    assert channels[46] == "5"


def test_a_dead_letter_keeps_its_value_and_a_readable_rating_drops_it() -> None:
    parsed = parse(raw([rating(), b"{broken", rating(stars=9), rating(stars="x")]), MAX_FUTURE_MS, MAX_BYTES)
    rows = sorted(parsed.to_pylist(), key=lambda r: r["offset"])
    assert [r["value"] for r in rows] == [None, b"{broken", rating(stars=9), rating(stars="x")]
    assert [r["user_id"] for r in rows] == [7, None, None, None]  # a dead letter joins no one


def test_a_value_that_holds_no_json_object_is_a_dead_letter(spark: Any) -> None:
    """The load generator's unreadable records among them: a batch with one used to start a
    Spark job (5.5 s the first time, 0.4 s later), the slow lane of every user's first minutes."""
    hopeless = [b"{not json", b"", b"   ", b"null", b"42", b'"a string"', b"{broken", b'{"a": 1', b"true"]
    values = [rating(), *hopeless, b'[{"rating_id": 1}]']
    reasons = _reasons(parse(raw(values), MAX_FUTURE_MS, MAX_BYTES))
    assert reasons == [None] + ["not a JSON object"] * (len(values) - 1)
    assert reasons == _reasons(parse_spark(raw(values), spark))


def test_a_kafka_timestamp_set_ahead_by_its_producer_does_not_move_the_future_bound(spark: Any) -> None:
    """The bound starts at the job's clock when the record's timestamp is later: a producer
    with CreateTime 55 minutes ahead, and its rating_time with it, is a dead letter."""
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=55)
    ahead_ms = int(ahead.timestamp() * 1000)
    records = raw([rating(rating_time=ahead_ms), rating(rating_time=SENT_MS)]).set_column(
        5, "timestamp", pa.array([ahead, SENT], pa.timestamp("ms", tz="UTC"))
    )
    for parsed in (parse(records, MAX_FUTURE_MS, MAX_BYTES), parse_spark(records, spark)):
        assert _reasons(parsed)[0] == (
            "rating_time more than 300000 ms after the record's Kafka timestamp or the job's clock, "
            "the earlier (ENRICH_MAX_FUTURE_MS)"
        )
        assert _reasons(parsed)[1] is None  # a past timestamp is the bound's start, as before
    # The job's clock is the start only when it is earlier: 55 minutes on, the rating is fine.
    later = parse(records, MAX_FUTURE_MS, MAX_BYTES, now_ms=ahead_ms)
    assert _reasons(later) == [None, None]
