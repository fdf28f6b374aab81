"""PostgreSQL's arrays, `= ANY`, and functions in FROM, as the SQL reader serves them over SQLite:
each answer below is PostgreSQL 15's for the same query."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from foundation.view_marker import ViewMarker
from services.views.arrays import quote_ident, rewritten
from services.views.sql import SETTINGS, SqlError, SqlReader
from services.views.store import Change, Store, key_of

MARKER = ViewMarker.decode(
    {
        "view": "customer_ratings",
        "key": ["user_id"],
        "columns": [{"name": "user_id", "type": "int"}, {"name": "club_status", "type": "string"}],
    }
)
STATUS = {1: "gold", 2: "platinum", 3: "silver", 4: "platinum"}


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[SqlReader]:
    store = Store(tmp_path / "s.sqlite3")
    rows = [json.dumps({"user_id": u, "club_status": s}) for u, s in STATUS.items()]
    changes = [
        Change("customer_ratings", key_of([u]), ("user_id",), r) for u, r in zip(STATUS, rows, strict=True)
    ]
    store.apply(changes, {"customer_ratings": MARKER}, {})
    token = SETTINGS.set({"search_path": '"$user", public', "session_authorization": "grafana"}.get)
    try:
        yield SqlReader(store, max_rows=100, timeout_s=5)
    finally:
        SETTINGS.reset(token)


def _rows(reader: SqlReader, sql: str) -> list[tuple[str | None, ...]]:
    return reader.query(sql).rows


@pytest.mark.parametrize(
    ("sql", "rows"),
    [
        ("SELECT ARRAY[1, 2, 3]", [("{1,2,3}",)]),
        ("SELECT ARRAY['a', 'b c', NULL, '', 'null', 'q\"x']", [('{a,"b c",NULL,"","null","q\\"x"}',)]),
        (
            "SELECT (ARRAY[10, 20, 30])[2], (ARRAY[10, 20, 30])[4], (ARRAY[10, 20, 30])[0]",
            [("20", None, None)],
        ),
        (
            "SELECT string_to_array('a,b,,c', ','), string_to_array('a,x', ',', 'x')",
            [('{a,b,"",c}', "{a,NULL}")],
        ),
        ("SELECT string_to_array('', ','), string_to_array(NULL, ',')", [("{}", None)]),
        (
            "SELECT array_lower(ARRAY[5, 6], 1), array_upper(ARRAY[5, 6], 1), array_length(ARRAY[5, 6], 1),"
            " array_length(ARRAY[5, 6], 2), array_length('{}'::int[], 1), cardinality(ARRAY[5, 6])",
            [("1", "2", "2", None, None, "2")],
        ),
        ("SELECT '{1, 2,NULL}'::int[], '{\"a,b\",c}'::text[]", [("{1,2,NULL}", '{"a,b",c}')]),
        (
            "SELECT parse_ident('public.\"Customer Ratings\"'), parse_ident('A.b')",
            [('{public,"Customer Ratings"}', "{a,b}")],
        ),
        ("SELECT (parse_ident('public.customer_ratings'))[2]", [("customer_ratings",)]),
        (
            "SELECT quote_ident('customer_ratings'), quote_ident('Ratings'), quote_ident('user')",
            [("customer_ratings", '"Ratings"', '"user"')],
        ),
        ("SELECT user, current_user", [("grafana", "grafana")]),
        ("SELECT i FROM generate_series(1, 5) AS i WHERE i % 2 = 1", [("1",), ("3",), ("5",)]),
        ("SELECT * FROM generate_series(10, 1, -4)", [("10",), ("6",), ("2",)]),
        ("SELECT * FROM generate_series(1.5, 3)", [("1.5",), ("2.5",)]),
        ("SELECT g.x FROM generate_series(1, 2) AS g(x)", [("1",), ("2",)]),
        ("SELECT generate_series FROM generate_series(3, 2)", []),
        ("SELECT x FROM unnest(ARRAY['p', 'q']) x", [("p",), ("q",)]),
        (
            "SELECT user_id FROM customer_ratings WHERE user_id = ANY (ARRAY[2, 4, 9]) ORDER BY 1",
            [("2",), ("4",)],
        ),
        (
            "SELECT user_id FROM customer_ratings WHERE user_id <> ALL (ARRAY[2, 4]) ORDER BY 1",
            [("1",), ("3",)],
        ),
        (
            "SELECT user_id FROM customer_ratings WHERE club_status = ANY (SELECT 'gold') AND user_id >= 1",
            [("1",)],
        ),
        (
            "SELECT c.user_id, g FROM customer_ratings c JOIN generate_series(3, 9) g ON c.user_id = g",
            [("3", "3"), ("4", "4")],
        ),
        ("SELECT s[1], s[2] FROM string_to_array('x,y', ',') s", [("x", "y")]),
        ("SELECT '[not an array]' AS t, 'a[1]' AS u", [("[not an array]", "a[1]")]),  # in strings: left alone
    ],
)
def test_arrays_and_set_returning_functions_give_postgresql_s_rows(
    reader: SqlReader, sql: str, rows: list[tuple[str | None, ...]]
) -> None:
    assert _rows(reader, sql) == rows


def test_grafana_s_query_builder_lists_the_views_of_the_search_path_and_a_view_s_columns(
    reader: SqlReader,
) -> None:
    # Grafana's PostgreSQL data source (its query builder's table and column pickers), as it sends them
    in_search_path = """quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""
    tables = f"""SELECT
    CASE WHEN {in_search_path}
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog', '_timescaledb_cache')
    ORDER BY CASE WHEN {in_search_path} THEN 0 ELSE 1 END, 1"""  # noqa: S608 - Grafana's text
    assert _rows(reader, tables) == [("customer_ratings",)]

    def columns(table: str) -> list[tuple[str | None, ...]]:
        return _rows(
            reader,
            f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident('{table}'),1) = 2
        THEN quote_ident(table_schema) = (parse_ident('{table}'))[1]
          AND quote_ident(table_name) = (parse_ident('{table}'))[2]
        ELSE quote_ident(table_name) = '{table}'
          AND {in_search_path}
      END""",  # noqa: S608 - Grafana's text
        )

    typed = [("user_id", "integer"), ("club_status", "text")]
    assert columns("customer_ratings") == typed
    assert columns("public.customer_ratings") == typed
    assert columns("other") == []
    assert _rows(reader, "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'") == []


@pytest.mark.parametrize(
    ("sql", "sqlstate"),
    [
        ("SELECT * FROM generate_series(1, 3, 0)", "22023"),  # step size cannot equal zero
        ("SELECT * FROM generate_series(1, 3, 'x')", "22023"),  # numbers only
        ("SELECT * FROM generate_series(1)", "42883"),
        ("SELECT parse_ident('a b')", "22023"),
        ("SELECT '{1,x}'::int[]", "22P02"),
        ("SELECT '1,2'::int[]", "22P02"),
        ("SELECT x FROM unnest('not one') AS x", "42804"),
        ("SELECT ARRAY[ARRAY[1], ARRAY[2]]", "0A000"),
        ("SELECT " + " + ".join(["(ARRAY[1])[1]"] * 1_001), "54001"),
        # a `)` that closes nothing before a subscript, a cast or an interval: a syntax error, not a
        # rewrite that grows without end (it took all the memory there was)
        ("SELECT hourly ) [ 1 ] + ( x ,", "42601"),
        ("SELECT a)::int, 1) + interval '1 day', 1) - x", "42601"),
    ],
)
def test_what_is_not_an_array_or_not_served_is_refused_with_postgresql_s_code(
    reader: SqlReader, sql: str, sqlstate: str
) -> None:
    with pytest.raises(SqlError) as refused:
        reader.query(sql)
    assert refused.value.sqlstate == sqlstate, refused.value


def test_the_rewrite_touches_neither_strings_nor_comments_nor_a_type_s_array_suffix() -> None:
    def masked(sql: str) -> str:  # the reader's masking, for strings only: enough here
        out, quoted = [], False
        for char in sql:
            if char == "'":
                quoted = not quoted
                out.append(char)
            else:
                out.append("_" if quoted else char)
        return "".join(out)

    def operand_start(text: str, end: int) -> int:
        start = end
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
            start -= 1
        return start

    assert (
        rewritten("SELECT s[1], 'x[2]' FROM t", masked, operand_start)
        == "SELECT pg_subscript(s, 1), 'x[2]' FROM t"
    )
    assert rewritten("SELECT CAST(a AS text[])", masked, operand_start) == "SELECT CAST(a AS text[])"
    assert rewritten("SELECT ARRAY[ARRAY[1]]", masked, operand_start) == "SELECT pg_array(pg_array(1))"
    assert rewritten("SELECT f(1) FROM t", masked, operand_start) == "SELECT f(1) FROM t"  # not in FROM


def test_quote_ident_quotes_what_is_not_a_plain_lower_case_name_or_is_a_keyword() -> None:
    assert [quote_ident(n) for n in ("views", "hour_start", "Hour", "select", "a-b", "1a", 'q"', None)] == [
        "views",
        "hour_start",
        '"Hour"',
        '"select"',
        '"a-b"',
        '"1a"',
        '"q"""',
        None,
    ]
