"""EXPLAIN's forms and options (its answers over the wire: test_pgwire.py)."""

import pytest

from services.views.plans import Explain, parse
from services.views.sql import SqlError


@pytest.mark.parametrize(
    ("sql", "query"),
    [
        ("EXPLAIN SELECT 1", "SELECT 1"),
        ("  explain verbose SELECT * FROM v;", "SELECT * FROM v;"),
        (
            "EXPLAIN (COSTS false, FORMAT TEXT, ANALYZE off) WITH a AS (SELECT 1) SELECT * FROM a",
            "WITH a AS (SELECT 1) SELECT * FROM a",
        ),
    ],
)
def test_explain_s_query_is_what_follows_its_options(sql: str, query: str) -> None:
    assert parse(sql) == Explain(query)


def test_other_statements_are_not_explain() -> None:
    assert parse("SELECT 'EXPLAIN'") is None
    assert parse("EXPLAINED") is None


@pytest.mark.parametrize(
    ("sql", "sqlstate", "says"),
    [
        ("EXPLAIN ANALYZE SELECT 1", "0A000", "ANALYZE"),
        ("EXPLAIN (ANALYZE) SELECT 1", "0A000", "ANALYZE"),
        ("EXPLAIN (FORMAT yaml) SELECT 1", "0A000", "FORMAT YAML"),
        ("EXPLAIN (PRETTY on) SELECT 1", "42601", "pretty"),
        ("EXPLAIN", "42601", "EXPLAIN of what"),
    ],
)
def test_what_is_not_served_is_refused_naming_it(sql: str, sqlstate: str, says: str) -> None:
    with pytest.raises(SqlError, match=says) as refused:
        parse(sql)
    assert refused.value.sqlstate == sqlstate
