"""A changelog record taken apart and put together: the one-integer key's quick path gives what
the JSON parse gives, keys keep their order, tombstones stay tombstones, and what is not a
changed row is refused with its reason."""

import json

import pytest

from foundation.changelog_record import BadChangelogRecord, ChangelogRecord


@pytest.mark.parametrize("number", [0, 7, -3, 123456789012345678])
def test_a_one_integer_key_reads_as_its_json_parse_would(number: int) -> None:
    key = json.dumps({"user_id": number}, separators=(",", ":")).encode()
    record = ChangelogRecord.decode(key, b'{"user_id":1,"ratings":2}')
    assert record == ChangelogRecord(("user_id",), json.dumps([number]), '{"user_id":1,"ratings":2}')
    assert record.key == {"user_id": number}
    assert record.row == {"user_id": 1, "ratings": 2}


def test_a_composite_key_keeps_its_columns_order_and_round_trips() -> None:
    key = {"club_status": "gold", "channel": "wéb", "hour": "2026-11-18T10"}
    row = {**key, "ratings": 3, "average_stars": 4.5, "last_message": None}
    record = ChangelogRecord.of(key, row)
    assert record.key_columns == ("club_status", "channel", "hour")
    assert record.key_values == '["gold","w\\u00e9b","2026-11-18T10"]'  # the store's key
    encoded = record.encode()
    assert encoded == (
        '{"club_status":"gold","channel":"wéb","hour":"2026-11-18T10"}'.encode(),
        '{"club_status":"gold","channel":"wéb","hour":"2026-11-18T10","ratings":3,"average_stars":4.5,"last_message":null}'.encode(),
    )
    assert ChangelogRecord.decode(*encoded) == record
    assert ChangelogRecord.decode(*encoded).row == row


def test_a_tombstone_has_no_row() -> None:
    record = ChangelogRecord.decode(b'{"hour":"2026-11-18T10"}', None)
    assert record.value is None and record.row is None
    assert record.encode() == (b'{"hour":"2026-11-18T10"}', None)


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, b"{}", "not a JSON object"),
        (b"42", b"{}", "not a JSON object"),
        (b"{}", b"{}", "not a JSON object"),
        (b"{not json", b"{}", "not a JSON object"),
        (b'{"user_id":1}', b"caf\xe9", "not UTF-8"),
    ],
)
def test_what_is_not_a_changed_row_is_refused_with_its_reason(
    key: bytes | None, value: bytes, reason: str
) -> None:
    with pytest.raises(BadChangelogRecord, match=reason):
        ChangelogRecord.decode(key, value)
