"""The views' pure parts on a local Spark: reading enriched records, the late rule, and each
declared aggregation on a static batch."""

import json
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from support.frames import kafka_rows as _raw

from enrichment_job.views.aggregation import (
    DEAD_LETTERS,
    VIEW,
    aggregate_views,
    changelog_columns,
    dead_letter_reason,
    view_rows,
)
from enrichment_job.views.declarations import View, customer_ratings, declared, segment_hourly
from enrichment_job.views.settings import ViewsSettings
from enrichment_job.views.transforms import EVERY_FIELD, late_for_hour, parse_enriched
from foundation.changelog_record import ChangelogRecord
from foundation.enriched import ENRICHED_FIELDS as RECORD_FIELDS

# py4j leaves the socket of a collect() to the garbage collector (as in the job's own transform tests).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
HOUR = 1_794_996_000_000  # 2026-11-18T10:00:00Z, an hour boundary


def _enriched(**fields: Any) -> bytes:
    record = {
        "rating_id": 1,
        "user_id": 7,
        "stars": 2,
        "rating_time": HOUR + 1000,
        "channel": "web",
        "message": "meh",
        "club_status": "gold",
        "full_name": "Ann Lee",
        "customer_matched": True,
        "cdc_watermark_ms": HOUR + 2000,
    }
    return json.dumps({**record, **fields}).encode()


def test_unreadable_records_get_a_reason_and_readable_ones_none(spark: SparkSession) -> None:
    values = [
        _enriched(),
        None,
        b"not json",
        _enriched(stars="two"),
        _enriched(user_id=None),
        _enriched(cdc_watermark_ms=None),
    ]
    reasons = [r.dlq_reason for r in parse_enriched(_raw(spark, values)).orderBy("offset").collect()]
    assert reasons == [
        None,
        "empty value",
        "not an enriched rating (JSON)",
        "not an enriched rating (JSON)",
        "missing user_id",
        "missing cdc_watermark_ms",
    ]


def test_every_field_parses_each_field_of_the_enriched_record_for_views_declared_in_sql(
    spark: SparkSession,
) -> None:
    record = _enriched(region="north", email="ann@example.com", customer_version="b:1:0", rating_offset=9)
    row = parse_enriched(_raw(spark, [record]), EVERY_FIELD).collect()[0].asDict()
    assert [f.name for f in EVERY_FIELD.fields] == [f.name for f in RECORD_FIELDS]
    assert (row["region"], row["email"], row["customer_version"], row["rating_offset"]) == (
        "north",
        "ann@example.com",
        "b:1:0",
        9,
    )
    assert row["user_id"] == 7 and row["dlq_reason"] is None
    assert "region" not in parse_enriched(_raw(spark, [record])).columns  # the built-in views' parse


@pytest.mark.parametrize(
    ("released_at", "late"),
    [(HOUR + 3_600_000 + 59_999, False), (HOUR + 3_600_000 + 60_000, True), (HOUR + 10, False)],
)
def test_an_hour_closes_the_lateness_after_it_ends_on_the_records_cdc_clock(
    spark: SparkSession, released_at: int, late: bool
) -> None:
    parsed = parse_enriched(_raw(spark, [_enriched(cdc_watermark_ms=released_at)]))
    reason = parsed.select(late_for_hour(60_000).alias("r")).first()
    assert reason is not None
    assert (reason.r is not None) == late
    if late:
        assert reason.r.startswith("late: the window of hour 2026-11-18T10 closed at 2026-11-18T11:01:00Z")


def _parsed(spark: SparkSession, records: list[bytes]) -> DataFrame:
    return parse_enriched(_raw(spark, records)).where(F.col("dlq_reason").isNull())


def _rows(spark: SparkSession, records: list[bytes], view: View) -> list[dict[str, Any]]:
    """`view`'s rows from `records`, aggregated beside every declared view as the job does."""
    views = tuple(v if v.name != view.name else view for v in declared(ViewsSettings()))
    aggregated = aggregate_views(_parsed(spark, records), views)
    return [r.asDict() for r in view_rows(aggregated, views, view).collect()]


def test_customer_ratings_counts_and_keeps_the_last_rating_by_time(spark: SparkSession) -> None:
    records = [
        _enriched(rating_id=1, stars=5, rating_time=HOUR + 3000, club_status="gold"),
        _enriched(rating_id=2, stars=1, rating_time=HOUR + 9000, club_status="platinum", message="bad"),
        _enriched(rating_id=3, stars=2, rating_time=HOUR + 1000, club_status="silver"),
        _enriched(rating_id=4, user_id=8, customer_matched=False, club_status=None, full_name=None),
    ]
    rows = {r["user_id"]: r for r in _rows(spark, records, customer_ratings(ViewsSettings()))}
    assert rows[7] == {
        "user_id": 7,
        "ratings": 3,
        "unhappy_ratings": 2,
        "stars_sum": 8,
        "average_stars": 2.667,
        "first_rating_time": HOUR + 1000,
        "last_rating_time": HOUR + 9000,
        "last_rating_id": 2,
        "last_stars": 1,
        "last_channel": "web",
        "last_message": "bad",
        "club_status": "platinum",
        "full_name": "Ann Lee",
        "customer_matched": True,
    }
    assert rows[8]["club_status"] is None and rows[8]["customer_matched"] is False


def test_segment_hourly_groups_by_status_channel_and_utc_hour_with_distinct_customers(
    spark: SparkSession,
) -> None:
    records = [
        _enriched(rating_id=1, user_id=1, stars=1),
        _enriched(rating_id=2, user_id=1, stars=5),
        _enriched(rating_id=3, user_id=2, stars=3),
        _enriched(rating_id=4, user_id=3, rating_time=HOUR + 3_600_000, cdc_watermark_ms=HOUR + 3_600_500),
        _enriched(rating_id=5, user_id=4, customer_matched=False, club_status=None, channel=None),
    ]
    rows = {
        (r["club_status"], r["channel"], r["hour"]): r
        for r in _rows(spark, records, segment_hourly(ViewsSettings()))
    }
    assert set(rows) == {
        ("gold", "web", "2026-11-18T10"),
        ("gold", "web", "2026-11-18T11"),
        ("unmatched", "unknown", "2026-11-18T10"),
    }
    ten = rows[("gold", "web", "2026-11-18T10")]
    assert (ten["ratings"], ten["stars_sum"], ten["unhappy_ratings"], ten["customers"]) == (3, 9, 1, 2)
    assert ten["average_stars"] == 3.0 and ten["hour_start_ms"] == HOUR


def test_every_view_declares_key_columns_its_row_has_and_a_last_rating_time(spark: SparkSession) -> None:
    views = declared(ViewsSettings())
    aggregated = aggregate_views(_parsed(spark, [_enriched()]), views)
    for view in views:
        columns = view_rows(aggregated, views, view).columns
        assert set(view.key) <= set(columns), view.name
        assert "last_rating_time" in columns, f"{view.name}: the marker's freshness reads it"


def test_a_rating_a_view_refuses_is_still_counted_by_the_others(spark: SparkSession) -> None:
    late = _enriched(rating_id=1, rating_time=HOUR, cdc_watermark_ms=HOUR + 3 * 3_600_000)
    on_time = _enriched(rating_id=2, rating_time=HOUR, cdc_watermark_ms=HOUR + 1000)
    settings = ViewsSettings()
    assert _rows(spark, [late], segment_hourly(settings)) == []
    assert [r["ratings"] for r in _rows(spark, [late, on_time], segment_hourly(settings))] == [1]
    assert [r["ratings"] for r in _rows(spark, [late, on_time], customer_ratings(settings))] == [2]


def test_the_query_that_finds_dead_letters_counts_them_in_a_row_of_their_own_and_the_views_the_rest(
    spark: SparkSession,
) -> None:
    settings = ViewsSettings()
    views = declared(settings)
    by_hour = segment_hourly(settings)
    late = _enriched(rating_id=1, rating_time=HOUR, cdc_watermark_ms=HOUR + 3 * 3_600_000)
    records = [_enriched(rating_id=2), b"not json", late, _enriched(rating_id=3, user_id=None)]
    parsed = parse_enriched(_raw(spark, records))
    aggregated = aggregate_views(parsed, (by_hour,), dead_letter_reason(views))
    dead = aggregated.where(F.col(VIEW) == 1).collect()
    assert [r[DEAD_LETTERS] for r in dead] == [3]  # unreadable, refused by segment_hourly, missing user_id
    assert [r["ratings"] for r in view_rows(aggregated, (by_hour,), by_hour).collect()] == [1]
    # its changelog columns name no view, so no changelog topic gets it
    assert [r.view for r in aggregated.select(*changelog_columns((by_hour,))).collect()].count(None) == 1
    reasons = parsed.select(dead_letter_reason(views).alias("reason")).collect()
    assert [r.reason for r in reasons][:2] == [None, "not an enriched rating (JSON)"]
    assert reasons[2].reason.startswith("segment_hourly: late: the window of hour 2026-11-18T10 closed at")
    assert reasons[3].reason == "missing user_id"


def test_changelog_records_carry_each_rows_view_key_and_whole_row(spark: SparkSession) -> None:
    views = declared(ViewsSettings())
    aggregated = aggregate_views(_parsed(spark, [_enriched(rating_id=1, user_id=7, stars=2)]), views)
    records = {r.view: r for r in aggregated.select(*changelog_columns(views)).collect()}
    assert set(records) == {v.name for v in views}
    customer = records["customer_ratings"]
    assert json.loads(customer.key) == {"user_id": 7}
    assert json.loads(customer.value)["unhappy_ratings"] == 1
    assert json.loads(customer.value)["last_message"] == "meh"
    segment = records["segment_hourly"]
    assert json.loads(segment.key) == {"club_status": "gold", "channel": "web", "hour": "2026-11-18T10"}
    assert json.loads(segment.value)["customers"] == 1
    assert customer.last_rating_time == segment.last_rating_time == HOUR + 1000
    # Spark's to_json writes what the contract's encoding gives, byte for byte
    for record in (customer, segment):
        typed = ChangelogRecord.decode(record.key.encode(), record.value.encode())
        assert typed.encode() == (record.key.encode(), record.value.encode())
        assert ChangelogRecord.of(typed.key, typed.row).encode() == typed.encode()


def test_a_rating_whose_key_is_too_large_for_a_view_is_its_dead_letter_and_the_others_count_it(
    spark: SparkSession,
) -> None:
    """A 600 KB channel in segment_hourly's key made a changelog record over Kafka's limit (the
    key stands in the value again), and the views job failed on it at every restart."""
    views = declared(ViewsSettings(max_key_bytes=1024))
    by_customer, by_hour = views
    wide = _enriched(rating_id=1, channel="c" * 1_100)
    records = [wide, _enriched(rating_id=2)]
    assert [r["ratings"] for r in _rows(spark, records, by_hour)] == [1]
    assert [r["ratings"] for r in _rows(spark, records, by_customer)] == [2]
    reasons = _parsed(spark, records).select(dead_letter_reason(views).alias("reason")).collect()
    assert [r.reason for r in reasons] == [
        "segment_hourly: key of club_status, channel, hour_ts over 1024 bytes (VIEWS_JOB_MAX_KEY_BYTES):"
        " 1123 bytes",
        None,
    ]
