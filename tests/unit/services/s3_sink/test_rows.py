"""Reading a batch of enriched ratings into Arrow: the lake's explicit schema, nulls for unmatched
customers, and every bad record rejected with its reason while the others are kept."""

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Message
from support.services import enriched_record

from foundation.enriched import EnrichedRating
from foundation.errors import RecordError
from services.s3_sink.rows import decode_value, parse_values
from services.s3_sink.schema import CATEGORY, LAKE_SCHEMA, UTC_MS, WIRE_SCHEMA, to_lake_table


def raw(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode()


def unmatched(rating_id: int) -> dict[str, Any]:
    """As the job writes a rating whose user matches no customer: customer fields null."""
    record = enriched_record(rating_id, customer_matched=False)
    for name in ("first_name", "last_name", "email", "gender", "club_status", "region", "comments"):
        record[name] = None
    for name in ("create_ts", "update_ts", "full_name", "customer_version", "customer_valid_from"):
        record[name] = None
    return record


def test_the_wire_schema_covers_every_field_of_the_enriched_rating() -> None:
    assert WIRE_SCHEMA.names == list(EnrichedRating.model_fields)


def test_the_lake_schema_has_proper_types_and_kafka_coordinates() -> None:
    assert LAKE_SCHEMA.field("stars").type == pa.int8()
    assert LAKE_SCHEMA.field("rating_time").type == UTC_MS
    assert LAKE_SCHEMA.field("rating_time_ms").type == pa.int64()
    assert LAKE_SCHEMA.field("club_status").type == CATEGORY
    assert LAKE_SCHEMA.field("customer_matched").type == pa.bool_()
    assert not LAKE_SCHEMA.field("rating_id").nullable
    assert LAKE_SCHEMA.names[-3:] == ["kafka_topic", "kafka_partition", "kafka_offset"]


def test_records_become_lake_rows_with_nulls_for_unmatched_customers() -> None:
    records = [enriched_record(1), unmatched(2)]
    parsed = parse_values([raw(r) for r in records])
    assert parsed.rejected == []
    table = to_lake_table(parsed.table, ["enriched", "enriched"], [0, 1], [10, 11])
    assert table.schema == LAKE_SCHEMA
    rows = table.to_pylist()
    assert rows[0]["club_status"] == records[0]["club_status"]
    assert rows[0]["rating_time"] == datetime.fromtimestamp(records[0]["rating_time"] / 1000, tz=UTC)
    assert rows[0]["rating_time_ms"] == records[0]["rating_time"]
    assert rows[1]["customer_matched"] is False
    assert rows[1]["club_status"] is None
    assert rows[1]["full_name"] is None
    assert rows[1]["customer_valid_from"] is None
    assert (rows[1]["kafka_topic"], rows[1]["kafka_partition"], rows[1]["kafka_offset"]) == (
        "enriched",
        1,
        11,
    )
    for name in WIRE_SCHEMA.names:
        if name not in {"rating_time", "customer_valid_from"}:
            assert rows[0][name] == records[0][name], name


def test_unknown_fields_are_ignored_and_missing_optional_ones_are_null() -> None:
    minimal = {"rating_id": 1, "user_id": 2, "stars": 5, "rating_time": 0, "customer_matched": False}
    parsed = parse_values([raw({**minimal, "something_new": [1, 2]})])
    assert parsed.rejected == []
    assert parsed.table.to_pylist()[0]["channel"] is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"not json", "Invalid value"),
        (b"[1, 2]", "changed from object to array"),
        (b"   ", "not one JSON object per record"),
        (b'{"rating_id": 1}{"rating_id": 2}', "not one JSON object per record"),
        (b"null", "rating_id: field required"),
        (raw({k: v for k, v in enriched_record(3).items() if k != "rating_id"}), "rating_id: field required"),
        (raw(enriched_record(4, stars=9)), "stars: must be 1..5, got 9"),
        (raw(enriched_record(5, stars=0)), "stars: must be 1..5, got 0"),
        (raw(enriched_record(6, stars="5")), "/stars"),
        (raw(enriched_record(7, rating_time=-1)), "rating_time: epoch ms out of range"),
        (raw(enriched_record(8, club_status={"a": 1})), "/club_status"),
        (raw({**enriched_record(9), "rating_id": 2**70}), "couldn't parse"),
        (b'{"rating_id": 1, "message": "\xff\xfe"}', "UTF8"),
    ],
)
def test_a_bad_record_is_rejected_with_its_reason_and_the_others_kept(value: bytes, reason: str) -> None:
    good = [raw(enriched_record(i)) for i in range(100, 140)]
    values = [*good[:17], value, *good[17:]]
    parsed = parse_values(values)
    assert [pos for pos, _ in parsed.rejected] == [17]
    assert reason in parsed.rejected[0][1]
    assert parsed.kept == [i for i in range(len(values)) if i != 17]
    assert parsed.table.column("rating_id").to_pylist() == list(range(100, 140))


def test_several_bad_records_in_one_batch() -> None:
    values = [raw(enriched_record(i)) for i in range(1000)]
    for i in (0, 500, 999):
        values[i] = b"{"
    values[250] = raw(enriched_record(250, stars=7))
    parsed = parse_values(values)
    assert sorted(pos for pos, _ in parsed.rejected) == [0, 250, 500, 999]
    assert parsed.table.num_rows == len(parsed.kept) == 996


def message(value: bytes | None) -> Message:
    return Message(topic="t", partition=0, offset=1, value=value)


def test_decode_keeps_one_line_values_and_compacts_multi_line_json() -> None:
    assert decode_value(message(b'{"a": 1}')) == b'{"a": 1}'
    assert decode_value(message(b'{\n  "a": 1\r\n}')) == b'{"a":1}'
    with pytest.raises(RecordError, match="empty value"):
        decode_value(message(None))
    with pytest.raises(RecordError, match="invalid JSON"):
        decode_value(message(b"{\n"))
