"""Tools' metadata queries over the views: the PostgreSQL JDBC driver's own (42.7.14's, captured
as it sent them for getSchemas, getTables, getColumns, getPrimaryKeys, getCatalogs,
getTypeInfo and its look-ups of a type, getTablePrivileges, getBestRowIdentifier and what a
view has none of) and SQLAlchemy 2.1's reflection, answered from the views' descriptions, with
their name patterns applied."""

import json
from pathlib import Path
from typing import Any

import pytest

from services.views import metadata
from services.views.sql import pg_column

QUERIES: dict[str, Any] = json.loads((Path(__file__).parent / "jdbc_metadata_queries.json").read_text())
TABLES = {
    "customer_ratings": (
        pg_column("user_id", "int"),
        pg_column("ratings", "long"),
        pg_column("average_stars", "double"),
    ),
    "segment_hourly": (pg_column("club_status", "string"), pg_column("channel", "string")),
}
KEYS = {"customer_ratings": ["user_id"], "segment_hourly": ["club_status", "channel"]}


def _rows(query: str, *params: str) -> list[tuple[str | None, ...]]:
    answer = metadata.answer(QUERIES[query], TABLES, KEYS, {str(i): p for i, p in enumerate(params, 1)})
    assert answer is not None
    return [tuple(row) for row in answer.rows]


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        ("%", "", True),
        ("cust%", "customer_ratings", True),
        ("Cust%", "customer_ratings", False),  # case-sensitive, as PostgreSQL's LIKE
        ("customer_ratings", "customer_ratings", True),
        ("customer\\_ratings", "customer_ratings", True),
        ("customer\\_ratings", "customerXratings", False),  # an escaped _ is itself
        ("customer_ratings", "customerXratings", True),
        ("segment.hourly", "segment_hourly", False),  # a dot is a dot, not any character
        ("%hour%", "segment_hourly", True),
    ],
)
def test_like_is_postgresql_s(pattern: str, value: str, matches: bool) -> None:
    assert metadata.like(pattern, value) is matches


def test_the_schema_is_public_and_the_catalog_views() -> None:
    assert _rows("getSchemas") == [("public", "views")]


def test_tables_are_the_views_by_schema_and_name_pattern_when_views_are_asked_for() -> None:
    assert [(r[1], r[2], r[3]) for r in _rows("getTables", "public", "%")] == [
        ("public", "customer_ratings", "VIEW"),
        ("public", "segment_hourly", "VIEW"),
    ]
    assert [r[2] for r in _rows("getTables", "public", "seg%")] == ["segment_hourly"]
    assert _rows("getTables", "other", "%") == [] and _rows("getTables", "public", "x%") == []
    assert _rows("getTablesOfTablesOnly", "%") == []  # TABLE only: the views are views


def test_tables_of_every_type_are_the_views_too() -> None:
    # getTables(catalog, schema, name, null): no list of types, so no `c.relkind` filter
    assert [r[2] for r in _rows("getTablesOfEveryType", "public", "%")] == [
        "customer_ratings",
        "segment_hourly",
    ]
    assert [r[2] for r in _rows("getTablesOfEveryType", "%", "cust%")] == ["customer_ratings"]
    assert _rows("getTablesOfEveryType", "other", "%") == []


def test_columns_come_in_order_with_their_type_oids_and_the_patterns_apply() -> None:
    rows = _rows("getColumns", "public", "customer_ratings", "%")
    assert [(r[2], r[3], r[4], r[5], r[9]) for r in rows] == [
        ("customer_ratings", "user_id", "23", "f", "1"),
        ("customer_ratings", "ratings", "20", "f", "2"),
        ("customer_ratings", "average_stars", "701", "f", "3"),
    ]
    assert [(r[2], r[3]) for r in _rows("getColumns", "%", "%", "c%")] == [
        ("segment_hourly", "club_status"),
        ("segment_hourly", "channel"),
    ]
    assert _rows("getColumns", "other", "%", "%") == []


def test_a_view_s_primary_key_is_its_key_in_order() -> None:
    assert _rows("getPrimaryKeys", "public", "segment_hourly") == [
        ("views", "public", "segment_hourly", "club_status", "1", "segment_hourly_pkey"),
        ("views", "public", "segment_hourly", "channel", "2", "segment_hourly_pkey"),
    ]
    assert _rows("getPrimaryKeys", "public", "segment") == []  # = is not LIKE


def test_a_statement_described_before_its_parameters_are_bound_has_the_columns() -> None:
    answer = metadata.answer(QUERIES["getColumns"], TABLES, KEYS, None)
    assert answer is not None and len(answer.columns) == 16 and len(answer.rows) == 5


def test_the_one_catalog_and_the_setting_asked_before_foreign_keys() -> None:
    assert _rows("getCatalogs") == [("views",)]
    assert _rows("maxIndexKeys") == [("32",)]


def test_type_info_lists_the_base_types_and_the_views_own_among_them() -> None:
    listed = _rows("getTypeInfo")
    assert ("int4", "23") in listed and ("text", "25") in listed and ("float8", "701") in listed
    assert {name for name, _ in listed} >= {"int8", "bool"} and len(listed) == len(metadata.BASE_TYPES)
    every = _rows("typeOfEveryOid")
    assert len(every) == len(listed) and all(r[0] == "f" and r[1] == "b" for r in every)  # no arrays
    assert _rows("typeOfOid", "20") == [("f", "b", "int8", "20")]
    assert _rows("typeOfOid", 701) == [("f", "b", "float8", "701")]  # bound as a number too
    assert _rows("typeOfOid", "999999") == []  # the driver takes it as Types.OTHER
    assert _rows("typeByName", "tid") == [("27", "tid")]
    assert _rows("typeByName", "no_such_type") == []
    assert _rows("maxNameLength") == [("64",)]


def test_table_privileges_are_select_for_the_owner_and_for_public() -> None:
    assert _rows("getTablePrivileges", "public", "seg%") == [
        ("views", "public", "segment_hourly", "views", "{views=r/views,=r/views}")
    ]
    assert len(_rows("getTablePrivileges", "%", "%")) == 2
    assert _rows("getTablePrivileges", "other", "%") == []


def test_the_best_row_identifier_is_the_view_s_key_with_its_types() -> None:
    assert _rows("getBestRowIdentifier", "public", "customer_ratings") == [("user_id", "23", "-1")]
    assert _rows("getBestRowIdentifier", "public", "segment_hourly") == [
        ("club_status", "25", "-1"),
        ("channel", "25", "-1"),
    ]
    assert _rows("getBestRowIdentifier", "public", "customer") == []  # = is not LIKE


def test_indexes_foreign_keys_functions_procedures_and_types_are_none_as_for_a_postgresql_view() -> None:
    # getIndexInfo, imported and exported keys, functions, procedures, UDTs, column privileges
    # (PostgreSQL's query asks for tables only) and functions' columns
    assert len(QUERIES["none"]) == 8
    for text in QUERIES["none"]:
        answer = metadata.answer(text, TABLES, KEYS, {})
        assert answer is not None and answer.rows == [], text[:60]
        assert answer.columns and all('"' not in c.name and " " not in c.name for c in answer.columns)


def test_any_other_query_is_not_one_of_these() -> None:
    assert metadata.answer("SELECT datname FROM pg_catalog.pg_database", TABLES, KEYS, None) is None


# SQLAlchemy 2.1's PostgreSQL dialect, as its inspector and Table(..., autoload_with=...) sent
# them (the views' names are bound as parameters, with the kinds of relation asked for).
REFLECTION: dict[str, object] = json.loads(
    (Path(__file__).parent / "sqlalchemy_reflection_queries.json").read_text()
)


def _reflected(query: str, params: dict[str, str]) -> list[tuple[str | None, ...]]:
    text = REFLECTION[query]
    assert isinstance(text, str)
    answer = metadata.answer(text, TABLES, KEYS, params)
    assert answer is not None
    return [tuple(row) for row in answer.rows]


def test_sqlalchemy_finds_the_views_as_views_and_their_columns_with_postgresql_s_type_names() -> None:
    assert _reflected("schemas", {"1": "pg_"}) == [("public",)]
    assert _reflected("views", {"1": "v", "2": "t", "3": "pg_catalog"}) == [
        ("customer_ratings",),
        ("segment_hourly",),
    ]
    assert _reflected("tables", {"1": "r", "2": "p", "3": "t", "4": "pg_catalog"}) == []
    kinds = {str(i): kind for i, kind in enumerate("rpfvm", 2)}
    assert _reflected("has_table", {"1": "segment_hourly", **kinds, "7": "pg_catalog"}) == [
        ("segment_hourly",)
    ]
    assert _reflected("has_table", {"1": "nothing", **kinds, "7": "pg_catalog"}) == []
    oids = _reflected(
        "oids",
        {**{str(i): kind for i, kind in enumerate("rpfvm", 1)}, "6": "pg_catalog", "7": "segment_hourly"},
    )
    assert oids == [("16385", "segment_hourly")]  # the second view by name, as psql's \d numbers them
    asked = {str(i): kind for i, kind in enumerate("rpfvm", 15)} | {
        "20": "pg_catalog",
        "21": "customer_ratings",
    }
    assert [(r[0], r[1], r[3], r[4]) for r in _reflected("columns", asked)] == [
        ("user_id", "integer", "f", "customer_ratings"),
        ("ratings", "bigint", "f", "customer_ratings"),
        ("average_stars", "double precision", "f", "customer_ratings"),
    ]


def test_sqlalchemy_finds_no_constraint_index_or_comment_on_a_view_as_postgresql_has_none() -> None:
    queries = REFLECTION["none"]
    assert isinstance(queries, list) and len(queries) == 8
    for text in queries:
        answer = metadata.answer(text, TABLES, KEYS, {})
        assert answer is not None and answer.rows == [], text[:80]
        assert all(c.name and " " not in c.name and "." not in c.name for c in answer.columns), answer.columns
