"""The SQL reader: what a prepared statement's computed columns are told to be, from its SELECT
list's text, and the bound on a query's rows in bytes."""

import json
import random
from pathlib import Path

import pytest

from foundation.view_marker import ViewMarker
from services.views.sql import (
    SqlError,
    SqlReader,
    aliased,
    computed_kinds,
    information_schema,
    pg_casts,
    pg_name,
    pg_names,
    subquery_kinds,
    time_arithmetic,
    unqualified,
)
from services.views.store import Change, Store, key_of

COLUMNS = {"user_id": "int", "ratings": "long", "average_stars": "double", "club_status": "string"}


@pytest.mark.parametrize(
    ("sql", "kinds"),
    [
        (
            "SELECT count(*), max(average_stars) AS top, sum(ratings) total, avg(ratings) FROM v",
            {"count(*)": "long", "top": "double", "total": "long", "avg(ratings)": "double"},
        ),
        (
            "SELECT DISTINCT upper(club_status) AS s, CAST(ratings AS REAL) r, 1 AS one, 2.5 AS half,"
            " 'a, b' AS text, coalesce(v.user_id, 0) AS id FROM v WHERE x IN (1, 2)",
            {"s": "string", "r": "double", "one": "long", "half": "double", "text": "string", "id": "int"},
        ),
        (
            'WITH w AS (SELECT ratings FROM v) SELECT min("ratings") AS "Low, est" FROM w',
            {"Low, est": "long"},
        ),
        (
            "SELECT ratings * 2 AS doubled, user_id + 1 AS next, user_id % 2 odd, average_stars / 2 AS half,"
            " (ratings - 1) * 2.5e-1 AS q, -ratings AS neg, 2 * -user_id AS neg2, club_status || '!' AS loud,"
            " abs(ratings) + abs(user_id) AS both, (ratings) + (user_id) AS sum2 FROM v",
            {
                "doubled": "long",
                "next": "int",
                "odd": "int",
                "half": "double",
                "q": "double",
                "neg": "long",
                "neg2": "int",
                "loud": "string",
                "both": "long",
                "sum2": "long",
            },
        ),
        # not said: text (an operand of no type known; a function of its own)
        ("SELECT ratings * $1 AS p, -club_status AS n, json_extract(x, '$.a') AS a, 1e-3 - 'x' y FROM v", {}),
        ("SELECT 1", {"1": "long"}),
    ],
)
def test_a_computed_column_is_typed_by_what_its_expression_says(sql: str, kinds: dict[str, str]) -> None:
    assert computed_kinds(sql, COLUMNS) == kinds


def test_the_schema_public_is_taken_off_names_and_left_in_strings_comments_and_other_names() -> None:
    assert (
        unqualified('SELECT v.a FROM "public"."v" JOIN PUBLIC . w USING (a)')
        == 'SELECT v.a FROM "v" JOIN w USING (a)'
    )
    assert unqualified("SELECT public.v.a FROM public.v") == "SELECT v.a FROM v"
    kept = "SELECT 'public.v', \"public\" AS p FROM republic.v, mypublic.w -- public.v"
    assert unqualified(kept) == kept


@pytest.mark.parametrize(
    ("sql", "sqlite"),
    [
        (
            "SELECT * FROM v WHERE user_id = $1::INTEGER",
            "SELECT * FROM v WHERE user_id = CAST($1 AS INTEGER)",
        ),
        (
            "SELECT count(*)::float8, avg(x)::numeric(10,2) FROM v",
            "SELECT CAST(count(*) AS float8), CAST(avg(x) AS numeric(10,2)) FROM v",
        ),
        (
            "SELECT '7'::bigint, (a + b)::double precision, v.x::int",
            "SELECT CAST('7' AS bigint), CAST((a + b) AS double precision), CAST(v.x AS int)",
        ),
        (
            'SELECT f(g(x))::text, "Odd"::int FROM v',
            'SELECT CAST(f(g(x)) AS text), CAST("Odd" AS int) FROM v',
        ),
        (
            "SELECT CASE WHEN a > 1 THEN CASE b WHEN 2 THEN 1 END ELSE 0 END::int, x FROM v",
            "SELECT CAST(CASE WHEN a > 1 THEN CASE b WHEN 2 THEN 1 END ELSE 0 END AS int), x FROM v",
        ),  # a CASE expression whole, nested ones within
        (
            "SELECT case when 'end' = x then 1 end ::text, weekend::int FROM v",
            "SELECT CAST(case when 'end' = x then 1 end AS text), CAST(weekend AS int) FROM v",
        ),
        (
            "SELECT 'a::int', x FROM v -- y::int",
            "SELECT 'a::int', x FROM v -- y::int",
        ),  # strings and comments kept
        (
            "SELECT '5'::text::int, $1::text::int[], (a::int + b::int)::text FROM v",
            "SELECT CAST(CAST('5' AS text) AS int), pg_array_in(CAST($1 AS text), 'int'),"
            " CAST((CAST(a AS int) + CAST(b AS int)) AS text) FROM v",
        ),  # chained: each casts what the one before it wrote (written wrong before)
        (
            "SELECT - interval '1 day', 1, - interval '2 days' FROM v",
            "SELECT (pg_interval('1 day ago') COLLATE pg_interval), 1,"
            " (pg_interval('2 days ago') COLLATE pg_interval) FROM v",
        ),  # a sign, not a shift (once pg_shift(SELECT, ...)): the interval negated
        (
            "SELECT current_schema(),session_user, CURRENT_USER, current_catalog FROM v",
            "SELECT current_schema(),session_user(), current_user(), current_database() FROM v",
        ),  # PostgreSQL's calls without parentheses
        (
            "SELECT \"current_user\", v.current_user, current_user_id, current_role(), 'current_role' FROM v",
            "SELECT \"current_user\", v.current_user, current_user_id, current_role(), 'current_role' FROM v",
        ),  # a column so named, quoted or qualified; a longer name; a string
    ],
)
def test_postgresql_s_casts_are_written_as_sqlite_reads_them(sql: str, sqlite: str) -> None:
    assert pg_casts(sql) == sqlite


def test_information_schema_s_tables_are_named_as_the_connection_has_them() -> None:
    assert information_schema(
        'SELECT * FROM information_schema.tables t, "information_schema"."COLUMNS"'
    ) == ("SELECT * FROM information_schema__tables t, information_schema__columns")
    kept = (
        "SELECT 'information_schema.tables', x FROM information_schema.routines -- information_schema.views"
    )
    assert information_schema(kept) == kept


def test_a_query_whose_rows_weigh_more_than_the_bound_is_refused_whatever_their_number(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.sqlite3")
    marker = ViewMarker.decode(
        {
            "view": "customer_ratings",
            "key": ["user_id"],
            "columns": [{"name": "user_id", "type": "int"}, {"name": "last_message", "type": "string"}],
        }
    )
    rows = [json.dumps({"user_id": u, "last_message": "m" * 300_000}) for u in range(4)]
    store.apply(
        [Change("customer_ratings", key_of([u]), ("user_id",), r) for u, r in enumerate(rows)],
        {"customer_ratings": marker},
        {},
    )
    reader = SqlReader(store, max_rows=100, timeout_s=5, max_bytes=1_000_000)
    assert len(reader.query("SELECT * FROM customer_ratings WHERE user_id < 3").rows) == 3  # 900 KB
    with pytest.raises(SqlError) as refused:
        reader.query("SELECT * FROM customer_ratings")  # 4 rows, 1.2 MB of text
    assert refused.value.sqlstate == "54000" and "VIEWS_PG_MAX_BYTES" in str(refused.value)
    assert len(reader.query("SELECT user_id FROM customer_ratings").rows) == 4  # without the long column
    # in bytes as they go out (UTF-8), not characters: 3 rows of 200,000 characters of 3 bytes each
    wide = [
        json.dumps({"user_id": u, "last_message": "€" * 200_000}, ensure_ascii=False) for u in range(10, 13)
    ]
    store.apply(
        [
            Change("customer_ratings", key_of([u]), ("user_id",), r)
            for u, r in zip(range(10, 13), wide, strict=True)
        ],
        {},
        {},
    )
    with pytest.raises(SqlError) as refused:
        reader.query("SELECT * FROM customer_ratings WHERE user_id >= 10")  # 600,000 characters, 1.8 MB
    assert refused.value.sqlstate == "54000"
    assert len(reader.query("SELECT * FROM customer_ratings WHERE user_id = 10").rows) == 1  # 600 KB


HOURLY_KINDS = {"hour_start": "timestamp", "day": "date", "ratings": "long"}  # a windowed view's columns


def test_a_timestamp_minus_a_timestamp_is_an_interval_and_a_date_minus_a_date_days() -> None:
    kinds = HOURLY_KINDS
    asked = "SELECT max(hour_start) - min(hour_start), now() - max(v.hour_start), day - day FROM v"
    assert time_arithmetic(pg_casts(asked), kinds) == (
        "SELECT pg_minus(max(hour_start), min(hour_start)), pg_minus(now(), max(v.hour_start)),"
        " CAST(julianday(day) - julianday(day) AS INTEGER) FROM v"
    )
    assert time_arithmetic(pg_casts("SELECT current_timestamp - hour_start FROM v"), kinds) == (
        "SELECT pg_minus(now(), hour_start) FROM v"  # the clock in the session's zone
    )
    kept = (
        "SELECT ratings - 1, -ratings, 2 - -ratings, 1e-3, 'a - b', hour_start - interval '1 hour' -- x - y"
    )
    assert time_arithmetic(kept, kinds) == kept  # numbers, signs, strings, an interval, a comment
    unknown = "SELECT hour_start - $1, day + x FROM v"  # a parameter's or an unknown name's type
    assert time_arithmetic(unknown, kinds) == unknown
    assert time_arithmetic("SELECT day + 1, 2 + day, day - ratings FROM v", kinds) == (
        "SELECT date(day, printf('%+d days', +(1))), date(day, printf('%+d days', 2)),"
        " date(day, printf('%+d days', -(ratings))) FROM v"
    )
    for refused in (
        "SELECT hour_start + 1 FROM v",
        "SELECT day + day FROM v",
        "SELECT ratings - hour_start FROM v",
    ):
        with pytest.raises(SqlError) as error:
            time_arithmetic(refused, kinds)
        assert error.value.sqlstate == "42883" and "operator does not exist" in str(error.value), refused


def test_an_interval_moves_a_timestamp_from_either_side_and_its_own_arithmetic_is_refused() -> None:
    day = "(pg_interval('1 day') COLLATE pg_interval)"  # `'1 day'::interval`, as the casts write it
    assert time_arithmetic(f"SELECT hour_start - {day}, {day} + day FROM v", HOURLY_KINDS) == (  # noqa: S608
        f"SELECT (pg_shift(hour_start, '-', {day}) COLLATE pg_timestamp),"  # noqa: S608
        f" (pg_shift(day, '+', {day}) COLLATE pg_timestamp) FROM v"
    )
    for refused, sqlstate in (
        (f"SELECT {day} * 2", "0A000"),  # SQLite would give 2: the text's leading number
        (f"SELECT {day} + {day}", "0A000"),
        (f"SELECT {day} - hour_start FROM v", "42883"),  # noqa: S608 - as PostgreSQL
        ("SELECT hour_start * 2 FROM v", "42883"),
        ("SELECT day / 2 FROM v", "42883"),
    ):
        with pytest.raises(SqlError) as error:
            time_arithmetic(refused, HOURLY_KINDS)
        assert error.value.sqlstate == sqlstate, refused
    kept = "SELECT count(*), t.*, ratings * 2, floor(date_part('epoch', hour_start) / 300) * 300 FROM v t"
    assert time_arithmetic(kept, HOURLY_KINDS) == kept


def test_the_times_a_subquery_or_a_cte_computes_are_typed_by_the_names_it_gives_them() -> None:
    # what Superset's virtual datasets and Metabase's nested questions send: the outer query
    # reads the inner one's aliases, and `last - first` was SQLite's difference of two texts' years
    nested = (
        "WITH s AS (SELECT max(hour_start) AS Last, min(day) AS d, count(*) AS n FROM v)"
        " SELECT y - x, last - (SELECT min(hour_start) AS first FROM v) FROM"
        " (SELECT x, x + interval '1 day' AS y FROM (SELECT hour_start AS x FROM v) a) b, s"
    )
    kinds = subquery_kinds(pg_casts(nested), HOURLY_KINDS)
    assert kinds == {
        "last": "timestamp",
        "d": "date",
        "first": "timestamp",
        "x": "timestamp",
        "y": "timestamp",
    }
    assert time_arithmetic("SELECT last - x, d + 1 FROM s", HOURLY_KINDS | kinds) == (
        "SELECT pg_minus(last, x), date(d, printf('%+d days', +(1))) FROM s"
    )
    assert subquery_kinds("SELECT hour_start - day FROM v WHERE x IN (1, 2)", HOURLY_KINDS) == {}
    assert subquery_kinds("SELECT (SELECT max(hour_start) AS t FROM v", HOURLY_KINDS) == {}  # unclosed


@pytest.mark.parametrize(
    ("item", "name"),
    [
        ("count(*)", "count"),
        ("pg_catalog.version()", "version"),
        ("max(hour_start) OVER (PARTITION BY day)", "max"),
        ("v.Hour_Start", "hour_start"),  # folded, as PostgreSQL folds a name
        ('"Hour"', "Hour"),
        ("hour_start::date", "hour_start"),  # a cast names its operand's column
        ("'7'::bigint", "int8"),  # or its type
        ("CAST(1.5 AS double precision)", "float8"),
        ("CAST(ratings AS text)", "ratings"),
        ("'{1,2}'::int[]", "int4"),
        ("interval '1 day'", "interval"),
        ("CASE WHEN ratings > 1 THEN 'a' END", "case"),
        ("EXISTS (SELECT 1)", "exists"),
        ("ARRAY[1, 2]", "array"),
        ("(SELECT max(ratings) AS Most FROM v)", "most"),
        ("(SELECT count(*) FROM v)", "count"),
        ("current_timestamp", "current_timestamp"),
        ("true", "bool"),
        ("ratings + 1", "?column?"),
        ("max(ratings) + 1", "?column?"),
        ("1", "?column?"),
        ("'text'", "?column?"),
        ("null", "?column?"),
        ("ratings > 1", "?column?"),
        ("-ratings", "?column?"),
        ("CAST(a AS int) + CAST(b AS int)", "?column?"),  # no one construct: an expression
        ("CASE WHEN a THEN 1 END || CASE WHEN b THEN 2 END", "?column?"),
        ("EXISTS (SELECT 1) AND x", "?column?"),
        ("interval '1 day' || 'x'", "?column?"),
        ("CASE WHEN a THEN CASE WHEN b THEN 1 END END", "case"),
    ],
)
def test_a_column_without_an_alias_is_named_as_postgresql_names_it(item: str, name: str) -> None:
    assert pg_name(item) == name


def test_the_result_s_names_are_aliases_folded_or_postgresql_s_and_sqlite_s_where_not_one_for_one() -> None:
    sql = (
        'SELECT count(*) AS Total, sum(ratings) "Sum", max(day) latest, x IS NOT NULL, -- why\n'
        " count(*) FROM v;"
    )
    sqlite_names = ["Total", "Sum", "latest", "x IS NOT NULL", "count(*)"]
    assert pg_names(sql, sqlite_names) == ["total", "Sum", "latest", "?column?", "count"]
    assert aliased("CASE WHEN a THEN 1 ELSE 0 END") == ("CASE WHEN a THEN 1 ELSE 0 END", None)
    assert aliased("name COLLATE nocase") == ("name COLLATE nocase", None)
    assert aliased("a + b") == ("a + b", None)
    for starred in ("SELECT *, count(*) FROM v", "SELECT v.* FROM v", "VALUES (1, 2)"):
        assert pg_names(starred, ["a", "b"]) == ["a", "b"]  # not the result's columns one for one


_WORDS = (  # split on spaces: `'1` and `day'` are lone quotes, as a hostile client sends them
    "SELECT FROM hourly WHERE hour_start day ratings - + interval '1 day' 'x' ( ) [ ] , 1 now() ARRAY"
    " generate_series unnest ANY ALL = <> :: int [] date extract epoch age CAST AS timestamp LATERAL"
    " JOIN ON user current_date '{1,2}' e -- /* */ \"q\" $1 AND s i string_to_array parse_ident"
    " * / ::interval interval '10 min' >"
).split()


def test_any_jumble_of_sql_words_gets_an_sql_error_or_rows_never_another_failure(tmp_path: Path) -> None:
    # the rewrites of PostgreSQL's syntax each walk the statement's text: none may fail on a text
    # they do not expect (a `)` that closes nothing once made one grow without end)
    store = Store(tmp_path / "s.sqlite3")
    columns = [{"name": name, "type": kind} for name, kind in HOURLY_KINDS.items()]
    marker = ViewMarker.decode({"view": "hourly", "key": ["hour_start"], "columns": columns})
    row = {"hour_start": "2026-01-01T00:00:00.000Z", "day": "2026-01-01", "ratings": 3}
    store.apply(
        [Change("hourly", key_of([row["hour_start"]]), ("hour_start",), json.dumps(row))],
        {"hourly": marker},
        {},
    )
    reader = SqlReader(store, max_rows=100, timeout_s=0.2)
    jumbles, answered = random.Random(7), 0
    for _ in range(2_000):
        sql = "SELECT " + " ".join(jumbles.choice(_WORDS) for _ in range(jumbles.randint(1, 14)))
        try:
            reader.query(sql)
            answered += 1
        except SqlError:
            pass
    assert answered > 0  # some were SQL


@pytest.mark.parametrize(
    ("expression", "kind"),
    [
        ("ratings > 1", "boolean"),
        ("(a = ANY (ARRAY[1, 2]))", "boolean"),
        ("x IS NOT NULL", "boolean"),
        ("NOT EXISTS (SELECT 1)", "boolean"),
        ("ratings BETWEEN 1 AND 3", "boolean"),
        ("CASE WHEN ratings > 1 THEN 'a' ELSE 'b' END", None),  # the CASE's, not known here
        ("coalesce(ratings > 1, false)", "boolean"),  # the kind of its first argument
        ("data->>'x'", None),  # SQLite's JSON operator, no comparison
        ("ratings << 2", None),  # a shift, no comparison
        ("'a > b'", "string"),
    ],
)
def test_a_comparison_or_a_condition_in_the_select_list_is_a_boolean(
    expression: str, kind: str | None
) -> None:
    assert computed_kinds(f"SELECT {expression} AS c FROM v", HOURLY_KINDS).get("c") == kind  # noqa: S608
