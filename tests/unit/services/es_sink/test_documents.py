"""Pure transforms: daily index by the UTC day of rating_time, _id = rating_id, and the index
template built from the packaged one with its own pattern and alias per family."""

import json
from datetime import UTC, datetime

import pytest
from support.services import enriched_record

from foundation.enriched import EnrichedRating
from services.es_sink.config import packaged_template
from services.es_sink.documents import bulk_lines, daily_index, document, index_template

TEMPLATE = json.loads(packaged_template())
PROPERTIES = TEMPLATE["template"]["mappings"]["properties"]


def ms(day: str) -> int:
    """Epoch ms of an ISO time in UTC."""
    return int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("rating_time", "index"),
    [
        (ms("2026-11-22T23:59:59.999"), "ratings-2026.11.22"),
        (ms("2026-11-23T00:00:00"), "ratings-2026.11.23"),
        (ms("2026-12-31T23:59:59.999"), "ratings-2026.12.31"),
        (ms("2027-01-01"), "ratings-2027.01.01"),
        (0, "ratings-1970.01.01"),
    ],
)
def test_the_index_is_the_utc_day_of_rating_time(rating_time: int, index: str) -> None:
    assert daily_index("ratings-", rating_time) == index


def test_each_record_is_indexed_under_its_rating_id() -> None:
    first = EnrichedRating.model_validate(enriched_record(41, rating_time=ms("2026-11-22T23:59:59.999")))
    second = EnrichedRating.model_validate(enriched_record(42, rating_time=ms("2026-11-23")))
    ops = [json.loads(line) for line in bulk_lines([("ratings-", first), ("unhappy-platinum-", second)])]
    assert ops[0] == {"create": {"_index": "ratings-2026.11.22", "_id": "41"}}
    assert ops[1]["rating_id"] == 41
    assert ops[2] == {"create": {"_index": "unhappy-platinum-2026.11.23", "_id": "42"}}
    assert ops[3]["stars"] == second.stars


def test_the_same_record_gives_the_same_action_every_time() -> None:
    record = EnrichedRating.model_validate(enriched_record(7))
    assert bulk_lines([("r-", record)]) == bulk_lines([("r-", record)])


def test_the_source_line_is_the_whole_document() -> None:
    record = EnrichedRating.model_validate(enriched_record(7, club_status=None))
    assert json.loads(bulk_lines([("r-", record)])[1]) == document(record)


def test_unmatched_ratings_keep_their_nulls() -> None:
    record = EnrichedRating.model_validate(
        {"rating_id": 1, "user_id": 2, "stars": 3, "rating_time": 0, "customer_matched": False}
    )
    doc = document(record)
    assert doc["club_status"] is None
    assert doc["customer_matched"] is False


def test_every_document_field_is_mapped_and_nothing_else() -> None:
    """dynamic: strict would reject a document with an unmapped field: the mapping covers them all."""
    assert set(document(EnrichedRating.model_validate(enriched_record(1)))) == set(PROPERTIES)
    assert TEMPLATE["template"]["mappings"]["dynamic"] == "strict"


@pytest.mark.parametrize(
    ("fields", "mapping"),
    [
        (
            ("club_status", "region", "channel", "email", "gender", "full_name", "customer_version"),
            {"type": "keyword"},
        ),
        (("message", "comments"), {"type": "text"}),
        (
            ("rating_time", "enriched_ms", "cdc_watermark_ms", "customer_valid_from"),
            {"type": "date", "format": "epoch_millis"},
        ),
        (("stars", "user_id", "route_id"), {"type": "integer"}),
        (("rating_id", "rating_offset"), {"type": "long"}),
        (("customer_matched",), {"type": "boolean"}),
    ],
)
def test_the_mapping_is_explicit(fields: tuple[str, ...], mapping: dict[str, str]) -> None:
    for field in fields:
        assert mapping.items() <= PROPERTIES[field].items(), field


def test_only_built_in_analyzers_are_used() -> None:
    """The local Elasticsearch has no analysis-common module."""
    analyzers = {p.get("analyzer") for p in PROPERTIES.values()} | {
        sub.get("analyzer") for p in PROPERTIES.values() for sub in p.get("fields", {}).values()
    }
    assert analyzers <= {None, "standard"}


def test_each_family_gets_its_pattern_and_alias_without_touching_the_shared_file() -> None:
    alerts = index_template(TEMPLATE, "t-unhappy-platinum-", "t-unhappy-platinum")
    assert alerts["index_patterns"] == ["t-unhappy-platinum-*"]
    assert alerts["template"]["aliases"] == {"t-unhappy-platinum": {}}
    assert alerts["template"]["mappings"] == TEMPLATE["template"]["mappings"]
    assert TEMPLATE["index_patterns"] == ["ratings-*"]
    assert TEMPLATE["template"]["aliases"] == {"ratings": {}}


def test_a_rating_far_from_its_kafka_timestamp_goes_to_its_year_s_index() -> None:
    written = "2026-12-02T10:00:00.000Z"  # the rating's Kafka timestamp
    assert daily_index("ratings-", 0, written) == "ratings-1970"
    assert daily_index("ratings-", ms("2026-11-02"), written) == "ratings-2026.11.02"  # 30 days: daily
    assert daily_index("ratings-", ms("2026-11-01T23:59:59"), written) == "ratings-2026"  # 31 days
    assert daily_index("ratings-", ms("2027-06-01"), written) == "ratings-2027"  # ahead, as far
    assert daily_index("ratings-", ms("2026-11-01"), written, daily_days=60) == "ratings-2026.11.01"
    assert daily_index("ratings-", ms("2026-11-01"), None) == "ratings-2026.11.01"  # no timestamp
    assert daily_index("ratings-", ms("2026-11-01"), "not a date") == "ratings-2026"
    # 1,000 distinct days from 1970 on: an index a year.
    days = {daily_index("ratings-", i * 20 * 86_400_000, written) for i in range(1000)}
    assert days == {f"ratings-{year}" for year in range(1970, 2025)}
