"""The SSE data of a change: the key named by its columns, then the row."""

import json

import pytest

from services.views.hub import change_data
from services.views.store import Change


@pytest.mark.parametrize(
    ("key", "columns", "named"),
    [
        ("[12345]", ("user_id",), {"user_id": 12345}),  # spelled as it is
        ("[null]", ("user_id",), {"user_id": None}),
        ("[-1.5e3]", ('a "quoted" name',), {'a "quoted" name': -1500.0}),
        ('["a,b"]', ("club_status",), {"club_status": "a,b"}),  # strings are parsed
        ('["gold","web",1700000000000]', ("club_status", "channel", "hour"), None),
    ],
)
def test_the_key_is_named_by_its_columns_and_the_row_follows_as_it_is(
    key: str, columns: tuple[str, ...], named: dict[str, object] | None
) -> None:
    row = '{"user_id": 12345, "ratings": 2}'
    data = change_data(Change("v", key, columns, row))
    expected = named if named is not None else dict(zip(columns, json.loads(key), strict=True))
    assert json.loads(data) == {"key": expected, "row": {"user_id": 12345, "ratings": 2}}
    assert data.endswith(f',"row":{row}}}')


def test_a_deleted_row_is_null() -> None:
    assert json.loads(change_data(Change("v", "[7]", ("user_id",), None))) == {
        "key": {"user_id": 7},
        "row": None,
    }
