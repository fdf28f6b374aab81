"""SUBSCRIBE through a cursor: the statements as drivers and Materialize's docs write them, and a
cursor's reading of its stream (a few pages ahead at most, its end told once its rows are out)."""

import asyncio
import json
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from foundation.view_marker import ViewMarker
from services.views.cursors import PAGE_ROWS, Close, Cursor, Declare, DeclareQuery, Fetch, Rows, parse
from services.views.sql import Result, SqlError, SqlReader, pg_column
from services.views.store import Change, Store, key_of

COLUMNS = (pg_column("user_id", "int"), pg_column("ratings", "long"))


@pytest.mark.parametrize(
    ("sql", "parsed"),
    [
        ("DECLARE c CURSOR FOR SUBSCRIBE customer_ratings", Declare("c", "customer_ratings", True)),
        ("declare C cursor for subscribe to Customer_Ratings;", Declare("c", "customer_ratings", True)),
        (
            'DECLARE "My C" NO SCROLL CURSOR WITHOUT HOLD FOR SUBSCRIBE "V" WITH (SNAPSHOT = false)',
            Declare("My C", "V", False),
        ),
        ("FETCH c", Fetch("c", 1, None)),
        ("FETCH ALL c", Fetch("c", None, None)),
        ("FETCH FORWARD 100 FROM c WITH (timeout = '1s')", Fetch("c", 100, 1.0)),
        ("fetch 5 in c with (TIMEOUT='500ms');", Fetch("c", 5, 0.5)),
        ("FETCH ALL c WITH (timeout = '0s')", Fetch("c", None, 0.0)),
        ("FETCH ALL c WITH (timeout = '2 seconds')", Fetch("c", None, 2.0)),
        ("FETCH ALL c WITH (timeout = '1 minute')", Fetch("c", None, 60.0)),
        ("CLOSE c", Close("c")),
        ("CLOSE ALL;", Close(None)),
        ("SELECT * FROM customer_ratings", None),
        (
            "DECLARE c CURSOR FOR SELECT * FROM customer_ratings",
            DeclareQuery("c", "SELECT * FROM customer_ratings", False),
        ),
        (  # as psycopg's named cursors write it, a parameter bound by the driver
            'DECLARE "pandas_1" NO SCROLL CURSOR WITH HOLD FOR\nSELECT * FROM v WHERE k >= $1',
            DeclareQuery("pandas_1", "SELECT * FROM v WHERE k >= $1", True),
        ),
        (
            "declare c insensitive cursor without hold for select 1;",
            DeclareQuery("c", "select 1;", False),
        ),
    ],
)
def test_statements_as_drivers_write_them(sql: str, parsed: object) -> None:
    assert parse(sql) == parsed


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("DECLARE c SCROLL CURSOR FOR SELECT 1", "SCROLL cursors"),
        ("DECLARE c BINARY CURSOR FOR SELECT 1", "BINARY cursors"),
        ("DECLARE c CURSOR WITH HOLD FOR SUBSCRIBE v", "WITH HOLD"),
    ],
)
def test_cursors_of_a_kind_not_served_are_refused_naming_it(sql: str, named: str) -> None:
    with pytest.raises(SqlError, match=named) as refused:
        parse(sql)
    assert refused.value.sqlstate == "0A000"


def test_a_query_s_rows_are_fetched_in_order_then_none() -> None:
    rows = Rows(Result(COLUMNS, [("1", "10"), ("2", "20"), ("3", "30")]), hold=False)
    assert rows.columns == COLUMNS

    async def fetched() -> list[list[tuple[str | None, ...]]]:
        return [await rows.fetch(2, 10, None), await rows.fetch(2, 10, None), await rows.fetch(2, 10, 0.0)]

    assert asyncio.run(fetched()) == [[("1", "10"), ("2", "20")], [("3", "30")], []]


def _store(folder: Path, users: int) -> Store:
    store = Store(folder / "s.sqlite3")
    marker = ViewMarker.decode(
        {"view": "customer_ratings", "key": ["user_id"], "columns": [{"name": "user_id", "type": "int"}]}
    )
    changes = [
        Change("customer_ratings", key_of([u]), ("user_id",), json.dumps({"user_id": u}))
        for u in range(users)
    ]
    store.apply(changes, {"customer_ratings": marker}, {})
    return store


def test_a_fetch_of_any_size_is_read_a_page_at_a_time_and_one_left_part_way_loses_the_cursor(
    tmp_path: Path,
) -> None:
    reader = SqlReader(_store(tmp_path, 2_500), max_rows=5, timeout_s=5)

    async def fetched() -> tuple[list[int], list[int], list[int], str]:
        rows = Rows(reader.stream("SELECT user_id FROM customer_ratings ORDER BY 1", lasts_s=60), hold=False)
        sizes = [len(page) async for page in rows.pages(1_500)]  # past the cap of 5: no refusal
        rest = [int(row[0]) async for page in rows.pages(None) for row in page]
        again = Rows(reader.stream("SELECT user_id FROM customer_ratings ORDER BY 1", lasts_s=60), hold=False)
        pages = again.pages(None)
        first = [int(row[0]) for row in await anext(pages)]
        await pages.aclose()  # the client went away, or canceled, after the first page
        with pytest.raises(SqlError) as lost:
            await anext(again.pages(1))
        return sizes, rest, first, f"{lost.value.sqlstate} {lost.value}"

    sizes, rest, first, lost = asyncio.run(fetched())
    assert sizes == [PAGE_ROWS, 500]
    assert rest == list(range(1_500, 2_500))
    assert first == list(range(PAGE_ROWS))
    assert lost == "57014 a FETCH of this cursor was left part way: its place is lost"


def test_a_timeout_that_is_no_duration_is_refused_naming_it() -> None:
    with pytest.raises(SqlError, match="'soon'") as refused:
        parse("FETCH ALL c WITH (timeout = 'soon')")
    assert refused.value.sqlstate == "22007"


def _change(user: int) -> str:
    return (
        f'event: change\ndata: {{"key":{{"user_id":{user}}},"row":{{"user_id":{user},"ratings":{user}}}}}\n\n'
    )


def test_the_stream_is_read_a_few_pages_ahead_of_the_fetches_and_closed_with_the_cursor() -> None:
    pulled: list[int] = []
    closed: list[bool] = []

    async def stream() -> AsyncGenerator[str, None]:
        try:
            for page in range(100):
                pulled.append(page)
                yield _change(page)
        finally:
            closed.append(True)

    async def run() -> None:
        cursor = Cursor(stream(), COLUMNS)
        await asyncio.sleep(0.05)
        assert len(pulled) <= 5  # not the whole stream: a client that stops fetching holds little
        assert await cursor.fetch(2, 10, 1) == [("upsert", "0", "0"), ("upsert", "1", "1")]
        assert await cursor.fetch(1, 10, 1) == [("upsert", "2", "2")]
        cursor.close()
        await asyncio.sleep(0.05)
        assert closed == [True] and len(pulled) < 10

    asyncio.run(run())


def test_a_stream_s_end_comes_after_its_rows() -> None:
    async def stream() -> AsyncGenerator[str, None]:
        yield _change(1) + 'event: replaced\ndata: {"view": "v"}\n\n' + _change(2)

    async def run() -> None:
        cursor = Cursor(stream(), COLUMNS)
        assert await cursor.fetch(10, 10, 1) == [("upsert", "1", "1")]  # not the new version's rows
        with pytest.raises(SqlError, match="replaced by a new version") as ended:
            await cursor.fetch(10, 10, 1)
        assert ended.value.sqlstate == "57000"

    asyncio.run(run())


def test_a_cursor_closed_before_it_read_anything_still_closes_its_stream() -> None:
    closed: list[bool] = []

    async def stream() -> AsyncGenerator[str, None]:
        try:
            yield _change(1)
            await asyncio.Event().wait()
        finally:
            closed.append(True)

    async def run() -> None:
        Cursor(stream(), COLUMNS).close()  # no turn of the loop between: its reader never ran
        await asyncio.sleep(0.05)
        assert closed == [True]

    asyncio.run(run())
