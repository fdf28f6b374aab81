"""The catalog's answers that psql's own commands cannot show in a test: its tab completion
(which runs only at a terminal), with the queries psql 15 sends, captured as it sent them."""

import pytest

from services.views import catalog
from services.views.sql import pg_column

TABLES = {
    "customer_ratings": (pg_column("user_id", "int"), pg_column("club_status", "string")),
    "customer_x": (pg_column("k", "int"),),
    "segment_hourly": (pg_column("club_status", "string"), pg_column("hour", "string")),
}
# SELECT * FROM cu<Tab>: relations of the kinds a query reads, and schemas, named so far
FROM_CU = (
    "SELECT c.relname, NULL::pg_catalog.text FROM pg_catalog.pg_class c WHERE c.relkind IN ('r', "
    "'S', 'v', 'm', 'f', 'p') AND (c.relname) LIKE 'cu%' AND pg_catalog.pg_table_is_visible(c.oid) "
    "AND c.relnamespace <> (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'pg_catalog') "
    "UNION ALL SELECT NULL::pg_catalog.text, n.nspname FROM pg_catalog.pg_namespace n WHERE "
    "n.nspname LIKE 'cu%' AND n.nspname NOT LIKE E'pg\\\\_%' LIMIT 1000"
)
# \d cu<Tab>: relations of any kind
ANY_CU = (
    "SELECT c.relname, NULL::pg_catalog.text FROM pg_catalog.pg_class c WHERE (c.relname) LIKE "
    "'cu%' AND pg_catalog.pg_table_is_visible(c.oid) AND c.relnamespace <> (SELECT oid FROM "
    "pg_catalog.pg_namespace WHERE nspname = 'pg_catalog') UNION ALL SELECT NULL::pg_catalog.text, "
    "n.nspname FROM pg_catalog.pg_namespace n WHERE n.nspname LIKE 'cu%' AND n.nspname NOT LIKE "
    "E'pg\\\\_%' LIMIT 1000"
)
# SELECT * FROM customer_ratings WHERE cl<Tab>
WHERE_CL = (
    "SELECT a.attname, NULL::pg_catalog.text FROM pg_catalog.pg_attribute a, pg_catalog.pg_class c "
    "WHERE c.oid = a.attrelid and a.attnum > 0 and not a.attisdropped AND (a.attname) LIKE 'cl%' "
    "AND c.relname = 'customer_ratings' AND pg_catalog.pg_table_is_visible(c.oid) LIMIT 1000"
)


def _rows(sql: str) -> list[tuple[str | None, ...]]:
    return catalog.answer(sql, TABLES).rows


def test_tab_completes_a_view_s_name_from_what_was_typed() -> None:
    assert _rows(FROM_CU) == [("customer_ratings", None), ("customer_x", None)]
    assert _rows(ANY_CU) == [("customer_ratings", None), ("customer_x", None)]
    assert _rows(FROM_CU.replace("'cu%'", "'customer\\_r%'")) == [
        ("customer_ratings", None)
    ]  # _ as psql escapes it
    assert _rows(FROM_CU.replace("'cu%'", "'pu%'")) == [(None, "public")]
    tables_only = FROM_CU.replace("('r', 'S', 'v', 'm', 'f', 'p')", "('r', 'p')")  # INSERT INTO cu<Tab>
    assert _rows(tables_only) == []


def test_tab_completes_a_column_of_the_view_the_query_names() -> None:
    assert _rows(WHERE_CL) == [("club_status", None)]
    assert _rows(WHERE_CL.replace("'customer_ratings'", "'customer_x'")) == []
    assert _rows(WHERE_CL.replace("'customer_ratings'", "'no_such_view'")) == []
    assert _rows(WHERE_CL.replace("'cl%'", "'%'")) == [("user_id", None), ("club_status", None)]


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("cu%", "customer", True),
        ("cu%", "acu", False),
        ("a\\_b%", "a_bc", True),
        ("a\\_b%", "axbc", False),
        ("a_b", "axb", True),
        ("it''s%", "it's", True),
    ],
)
def test_like_patterns_read_as_postgresql_reads_them(pattern: str, name: str, matches: bool) -> None:
    assert (catalog._like(pattern).fullmatch(name) is not None) == matches
