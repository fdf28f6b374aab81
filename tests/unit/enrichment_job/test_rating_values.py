"""Ratings parsed on the driver: Arrow where it can, Spark for the rest, the same either way."""

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from enrichment_job import rating_values
from enrichment_job.kafka_in import KAFKA
from enrichment_job.rating_values import PARSED, parse, parse_spark
from tests.support.ratings import rating_value as rating

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
MAX_FUTURE_MS = 300_000
MAX_BYTES = 1_000
SENT = dt.datetime(2026, 11, 24, 12, tzinfo=dt.UTC)
SENT_MS = int(SENT.timestamp() * 1000)


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
]


def _reasons(parsed: pa.Table) -> list[str | None]:
    """In offset order (a parse gives its rows in partition and offset order)."""
    return parsed.sort_by("offset").column("dlq_reason").to_pylist()


def test_each_rating_is_readable_or_has_the_reason_sparks_parse_gives(spark: Any) -> None:
    records = raw([value for value, _ in CASES])
    ours = parse(records, spark, MAX_FUTURE_MS, MAX_BYTES)
    theirs = parse_spark(records, spark, MAX_FUTURE_MS, MAX_BYTES)
    for reason, (_, expected) in zip(_reasons(ours), CASES, strict=True):
        assert (reason or "").startswith(expected or ""), reason
        assert (reason is None) == (expected is None), reason
    assert ours.schema == PARSED
    # The same row for row; of a dead letter only its record and reason are used.
    kept = [*KAFKA.names, "dlq_reason"]
    assert ours.select(kept).to_pylist() == theirs.select(kept).to_pylist()
    readable = [r for r in ours.to_pylist() if r["dlq_reason"] is None]
    assert readable == [r for r in theirs.to_pylist() if r["dlq_reason"] is None]


def test_a_batch_arrow_reads_whole_never_starts_spark(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any) -> pa.Table:
        raise AssertionError("Spark's parse was asked")

    monkeypatch.setattr(rating_values, "parse_spark", refuse)
    values = [rating(rating_id=n, stars=n % 7) for n in range(500)] + [None, rating(message="x" * 2_000)]
    values[43] = rating(rating_id=43, message="caf-").replace(b"caf-", b"caf\xe9")  # Latin-1
    parsed = parse(raw(values), spark, MAX_FUTURE_MS, MAX_BYTES)
    reasons = _reasons(parsed)
    assert reasons[43] == "value is not valid UTF-8"
    assert reasons.count(None) == sum(1 for n in range(500) if 1 <= n % 7 <= 5) - 1
    ids = parsed.sort_by("offset").column("rating_id").to_pylist()
    assert ids[:3] == [0, 1, 2]  # a dead letter's fields: as read


def test_only_the_values_arrow_cannot_read_go_to_spark(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def counting(records: pa.Table, *args: Any) -> pa.Table:
        asked.append(records.num_rows)
        return parse_spark(records, *args)

    monkeypatch.setattr(rating_values, "parse_spark", counting)
    values = [rating(rating_id=n) for n in range(1_000)]
    values[10], values[700] = b"{broken", rating(stars="x")
    parsed = parse(raw(values), spark, MAX_FUTURE_MS, MAX_BYTES)
    assert asked == [1]  # the field of another type; a value that is no JSON needs no Spark job
    by_offset = dict(
        zip(parsed.column("offset").to_pylist(), parsed.column("dlq_reason").to_pylist(), strict=True)
    )
    assert by_offset[10] == "not a JSON object"
    assert by_offset[700] == "field stars is not int"
    assert sum(r is None for r in by_offset.values()) == 998


def test_a_dead_letter_keeps_its_value_and_a_readable_rating_drops_it(spark: Any) -> None:
    parsed = parse(raw([rating(), b"{broken", rating(stars=9)]), spark, MAX_FUTURE_MS, MAX_BYTES)
    rows = sorted(parsed.to_pylist(), key=lambda r: r["offset"])
    assert [r["value"] for r in rows] == [None, b"{broken", rating(stars=9)]
    assert [r["user_id"] for r in rows] == [7, None, None]  # a dead letter joins no one


def test_a_value_that_holds_no_json_object_is_a_dead_letter_without_a_spark_job(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load generator's unreadable records among them: a batch with one started a Spark job
    (5.5 s the first time, 0.4 s later), the slow lane of every user's first minutes."""
    asked: list[list[bytes]] = []

    def counting(records: pa.Table, *args: Any) -> pa.Table:
        asked.append(records.column("value").to_pylist())
        return parse_spark(records, *args)

    monkeypatch.setattr(rating_values, "parse_spark", counting)
    hopeless = [b"{not json", b"", b"   ", b"null", b"42", b'"a string"', b"{broken", b'{"a": 1', b"true"]
    to_spark = [b"{'rating_id': 1}", b'[{"rating_id": 1}]', b'{"rating_id": 1} trailing']
    values = [rating(), *hopeless, *to_spark]
    parsed = parse(raw(values), spark, MAX_FUTURE_MS, MAX_BYTES)
    assert [sorted(a) for a in asked] == [sorted(to_spark)]  # what Spark may read otherwise than Python
    reasons = _reasons(parsed)
    assert reasons[: 1 + len(hopeless)] == [None] + ["not a JSON object"] * len(hopeless)
    assert reasons == _reasons(parse_spark(raw(values), spark, MAX_FUTURE_MS, MAX_BYTES))
