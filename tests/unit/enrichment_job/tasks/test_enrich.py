"""One batch's ratings step on the driver: the join, the release rule, and the records."""

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from enrichment_job.customers.versions import VersionStore
from enrichment_job.settings import JobSettings
from enrichment_job.tasks.enrich import Ratings, RatingsResult
from foundation.enriched import ENRICHED_FIELDS, ENRICHED_NAMES, EnrichedRating
from tests.support.change_events import change_event, ingest_values, pg_change_event, sample_versions

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
SENT = dt.datetime(2026, 11, 24, 12, tzinfo=dt.UTC)


def rating(rating_id: int, user_id: int, rating_time: int, **more: Any) -> bytes:
    fields = {
        "rating_id": rating_id,
        "user_id": user_id,
        "stars": 4,
        "route_id": 3,
        "rating_time": rating_time,
    }
    return json.dumps({**fields, "channel": "web", "message": "ok", **more}).encode()


def records(values: list[bytes | None], first: int = 0, partition: int = 0) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "key": pa.array([b"k"] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["ratings"] * n),
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(range(first, first + n), pa.int64()),
            "timestamp": pa.array([SENT] * n, pa.timestamp("ms", tz="UTC")),
        }
    )


@pytest.fixture
def store(spark: Any) -> VersionStore:
    return VersionStore(sample_versions(spark))


def step(
    spark: Any, store: VersionStore, pairs: list[tuple[int, int]], watermark_ms: int | None, grace_ms: int
) -> RatingsResult:
    ratings = Ratings(JobSettings(grace_ms=grace_ms))
    return ratings.step(records([rating(n, u, t) for n, (u, t) in enumerate(pairs)]), store, watermark_ms)


def released(result: RatingsResult, count: int) -> dict[int, bool]:
    """offset -> released, for the `count` ratings of a step."""
    out = {json.loads(v)["rating_offset"]: True for v in result.enriched.values}
    return {o: out.get(o, False) for o in range(count)}


def test_release_waits_for_the_watermark_and_keeps_each_customers_order(
    spark: Any, store: VersionStore
) -> None:
    # user 7: offsets 0,1,2 with times 100, 5_000, 200; user 8: offset 3 at time 300
    ratings = [(7, 100), (7, 5_000), (7, 200), (8, 300)]
    assert released(step(spark, store, ratings, None, 0), 4) == dict.fromkeys(range(4), False)
    # offset 2 is old enough but waits behind offset 1 of the same customer; user 8 is independent.
    assert released(step(spark, store, ratings, 1_000, 500), 4) == {0: True, 1: False, 2: False, 3: True}
    assert released(step(spark, store, ratings, 6_000, 500), 4) == dict.fromkeys(range(4), True)


def test_the_grace_delays_only_ratings_without_a_version_valid_at_their_time(
    spark: Any, store: VersionStore
) -> None:
    ratings = [
        (7, 1_500),  # version valid since 1_000: final once the watermark passes 1_500
        (8, 2_000),  # no version yet: a row created up to 7_000 would still join it
        (7, 2_700),  # not yet passed by the watermark
        (7, 500),  # user 7's first row came 500 ms after it: only the grace decides
    ]
    assert released(step(spark, store, ratings, 2_600, 5_000), 4) == {0: True, 1: False, 2: False, 3: False}
    assert released(step(spark, store, ratings, 3_000, 5_000), 4) == {0: True, 1: False, 2: True, 3: False}
    assert released(step(spark, store, ratings, 7_001, 5_000), 4) == dict.fromkeys(range(4), True)
    # A delete valid at the rating's time is final too: unmatched, with no wait for the grace.
    assert released(step(spark, store, [(7, 3_500)], 3_600, 5_000), 1) == {0: True}


def test_a_postgresql_version_is_named_by_its_lsn(spark: Any) -> None:
    store = VersionStore(ingest_values(spark, [pg_change_event("c", 5, 1_000, 777, 700)]).versions)
    (joined,) = (json.loads(v) for v in step(spark, store, [(5, 2_000)], 20_000, 0).enriched.values)
    assert (joined["customer_version"], joined["customer_matched"]) == ("lsn:777", True)


def test_the_enriched_record_names_the_version_it_joined(spark: Any, store: VersionStore) -> None:
    result = step(spark, store, [(7, 2_500), (7, 3_500), (99, 1)], 20_000, 0)
    platinum, deleted, unknown = (json.loads(v) for v in result.enriched.values)
    assert result.enriched.keys == [b"7", b"7", b"99"]
    assert platinum["club_status"] == "platinum"
    assert platinum["full_name"] == "Ada Lovelace"
    assert platinum["customer_matched"] is True
    assert platinum["customer_version"] == "mariadb-bin.000001:20:0"
    assert platinum["customer_valid_from"] == 2_000
    assert platinum["rating_kafka_ts"] == "2026-11-24T12:00:00.000Z"
    assert platinum["cdc_watermark_ms"] == 20_000
    for unmatched in (deleted, unknown):  # every customer field there, as null
        assert unmatched["customer_matched"] is False
        assert unmatched["club_status"] is None
        assert unmatched["full_name"] is None
        assert "email" in unmatched
    assert list(platinum) == list(unknown)


def test_alerts_are_the_unhappy_ratings_of_the_alert_status(spark: Any, store: VersionStore) -> None:
    values = [rating(1, 7, 2_500, stars=2), rating(2, 7, 2_500, stars=3), rating(3, 7, 1_500, stars=1)]
    result = Ratings(JobSettings(grace_ms=0)).step(records(values), store, 20_000)
    assert [json.loads(v)["rating_id"] for v in result.alerts.values] == [1]
    assert result.alerts.topic == "unhappy-platinum-customers"


def test_dead_letters_keep_the_original_bytes_and_say_why(
    spark: Any, store: VersionStore, tmp_path: Path
) -> None:
    settings = JobSettings(max_rating_bytes=1_000, state_dir=str(tmp_path))
    large = rating(2, 7, 1_500, message="x" * 2_000)
    values = [b"{broken", rating(1, 7, 1_500), large]
    result = Ratings(settings).step(records(values, first=40, partition=2), store, 20_000)
    assert result.dead.values == [b"{broken", None]  # too large to go with its headers
    headers = [dict(h) for h in result.dead.headers or []]
    # ... so its bytes are in the state folder's dead-letters, where its headers say
    where = tmp_path / "dead-letters" / "enrichment" / "ratings" / "2" / "42"
    assert headers[1]["dlq.value.location"] == where.as_uri().encode()
    assert headers[1]["dlq.value.bytes"] == str(len(large)).encode()
    assert where.read_bytes() == large
    assert "dlq.value.location" not in headers[0]
    assert headers[0] == {
        "dlq.reason": b"not a JSON object",
        "dlq.stage": b"enrichment",
        "dlq.topic": b"ratings",
        "dlq.partition": b"2",
        "dlq.offset": b"40",
    }
    assert headers[1]["dlq.reason"].startswith(b"value over 1000 bytes")
    assert headers[1]["dlq.offset"] == b"42"
    assert len(result.enriched) == 1


def test_waiting_ratings_join_the_next_step_and_come_out_in_order(spark: Any, store: VersionStore) -> None:
    ratings = Ratings(JobSettings(grace_ms=0))
    first = ratings.step(records([rating(1, 7, 1_500), rating(2, 7, 5_000)]), store, 2_000)
    assert len(first.enriched) == 1
    assert first.waiting_from == {0: 1}
    assert first.new == 2
    ratings.waiting = first.waiting
    second = ratings.step(records([rating(3, 7, 1_600)], first=2), store, 6_000)
    assert [json.loads(v)["rating_id"] for v in second.enriched.values] == [2, 3]
    assert second.new == 1
    assert second.waiting is None
    assert second.waiting_from == {}


def test_a_rating_with_nothing_to_decide_stays_waiting_without_a_watermark(spark: Any) -> None:
    result = Ratings(JobSettings()).step(records([rating(1, 7, 1_500)]), VersionStore(), None)
    assert len(result.enriched) == 0
    assert result.waiting is not None
    assert result.waiting.num_rows == 1


def test_the_enriched_json_has_the_declared_fields_in_order_with_their_json_types(
    spark: Any, store: VersionStore
) -> None:
    result = step(spark, store, [(7, 2_500), (99, 1)], 20_000, 0)
    for value in result.enriched.values:
        record = json.loads(value)
        assert list(record) == list(ENRICHED_NAMES)
        for field in ENRICHED_FIELDS:
            got = record[field.name]
            if got is None:
                assert not field.required, field.name
            else:  # exactly the JSON type: a bool is not an int, a float not an int
                assert type(got) is field.kind, (field.name, got)
        EnrichedRating.model_validate_json(value)  # the services read it (no other fields)


def test_a_rating_whose_enriched_record_is_too_large_for_kafka_is_a_dead_letter_with_its_bytes(
    spark: Any,
) -> None:
    """A rating under the bound joined to a customer with a long comment (PostgreSQL's
    `comments TEXT`): its enriched record would fail the batch's transaction at every re-run."""
    events = [change_event("c", 7, 1_000, 10, club_status="platinum", comments="c" * 3_000)]
    store = VersionStore(ingest_values(spark, events).versions)
    small, large = rating(1, 7, 1_500, stars=1), rating(2, 7, 1_500, stars=1, message="m" * 2_000)
    ratings = Ratings(JobSettings(grace_ms=0, max_rating_bytes=4_000))
    result = ratings.step(records([small, large]), store, 20_000)
    assert len(small) < len(large) < 4_000  # each rating alone is under the bound
    assert [json.loads(v)["rating_id"] for v in result.enriched.values] == [1]
    assert [json.loads(v)["rating_id"] for v in result.alerts.values] == [1]
    (dead,) = result.dead.values
    assert dead is not None and json.loads(dead) == json.loads(large)  # the rating's fields, all of them
    (headers,) = [dict(h) for h in result.dead.headers or []]
    assert headers["dlq.reason"].startswith(b"enriched record of ")
    assert b"over ENRICH_MAX_RATING_BYTES (4000)" in headers["dlq.reason"]
    assert headers["dlq.offset"] == b"1"


def test_the_waiting_ratings_are_capped_by_their_bytes_as_well_as_their_count(
    spark: Any, store: VersionStore
) -> None:
    """Ratings held back by their customer's rating from the future weigh what their messages
    weigh: a few large ones fill the byte cap long before the count cap."""
    ratings = Ratings(JobSettings(grace_ms=0))
    ahead = rating(1, 7, 50_000)  # past the watermark: it waits, and so do its customer's later ones
    large = [rating(n, 7, 1_500, message="m" * 100_000) for n in range(2, 6)]
    result = ratings.step(records([ahead, *large]), store, 20_000)
    ratings.waiting = result.waiting
    assert ratings.waiting_count == 5
    assert ratings.waiting_bytes >= 400_000
    assert ratings.full(max_count=500_000, max_bytes=400_000)
    assert not ratings.full(max_count=500_000, max_bytes=1_000_000)
    assert ratings.full(max_count=5, max_bytes=1_000_000)
