"""SUBSCRIBE's statement, and a view's SSE events as COPY rows in text format."""

import pytest

from services.views.sql import pg_column
from services.views.subscription import Subscribe, changes, copy_line, events, parse

COLUMNS = (pg_column("user_id", "int"), pg_column("last_message", "string"), pg_column("vip", "boolean"))


@pytest.mark.parametrize(
    ("sql", "asked"),
    [
        ("COPY (SUBSCRIBE customer_ratings) TO STDOUT", Subscribe("customer_ratings", True)),
        (
            "copy ( subscribe to Customer_Ratings with (snapshot = false) ) to stdout;",
            Subscribe("customer_ratings", False),
        ),
        ('COPY (SUBSCRIBE "Odd ""v""" WITH (SNAPSHOT TRUE)) TO STDOUT', Subscribe('Odd "v"', True)),
        ("COPY customer_ratings TO STDOUT", None),
        ("SELECT 'COPY (SUBSCRIBE v) TO STDOUT'", None),
    ],
)
def test_the_statement_names_the_view_and_whether_its_rows_come_first(
    sql: str, asked: Subscribe | None
) -> None:
    assert parse(sql) == asked


def test_events_are_read_from_a_piece_of_the_stream_without_its_comments() -> None:
    text = 'event: snapshot\ndata: {"a":1}\n\n: keep-alive\n\nid: 3\nevent: change\ndata: {"b":2}\n\n'
    assert list(events(text)) == [("snapshot", '{"a":1}'), ("change", '{"b":2}')]


def test_a_change_is_a_copy_row_with_its_state_and_escapes() -> None:
    upsert = '{"key":{"user_id":7},"row":{"user_id":7,"last_message":"a\\tb\\\\c\\nd","vip":true}}'
    assert copy_line(upsert, COLUMNS) == b"upsert\t7\ta\\tb\\\\c\\nd\tt\n"
    assert copy_line('{"key":{"user_id":7},"row":null}', COLUMNS) == b"delete\t7\t\\N\t\\N\n"


def test_a_timestamp_in_a_change_is_shown_as_postgresql_shows_one() -> None:
    columns = (pg_column("hour_start", "timestamp"), pg_column("day", "date"))
    hour = '"hour_start":"2026-12-07T05:00:00.000Z"'
    change = '{"key":{' + hour + '},"row":{' + hour + ',"day":"2026-12-07"}}'
    assert copy_line(change, columns) == b"upsert\t2026-12-07 05:00:00+00\t2026-12-07\n"


@pytest.mark.parametrize(
    ("text", "found", "ended"),
    [
        ('event: snapshot\ndata: {"a":1}\n\nevent: change\ndata: {"b":2}\n\n', ['{"a":1}', '{"b":2}'], None),
        (": keep-alive\n\n", [], None),
        (
            'event: change\ndata: {"a":1}\n\nevent: replaced\ndata: {}\n\nevent: change\ndata: {"b":2}\n\n',
            ['{"a":1}'],
            "the view was replaced by a new version (its columns may differ): subscribe again",
        ),
        (
            'event: change\ndata: {"a":1}\n\nevent: error\ndata: {"error": "too far behind"}\n\n',
            ['{"a":1}'],
            "too far behind",
        ),
        ("event: error\ndata: not json\n\n", [], "not json"),
    ],
)
def test_a_piece_gives_its_rows_up_to_the_event_that_ends_the_stream(
    text: str, found: list[str], ended: str | None
) -> None:
    assert changes(text) == (found, ended)
