"""LIKE and ILIKE as PostgreSQL matches them, over SQLite's LIKE, which ignores ASCII case and
has no escape character of its own."""

import re
import sqlite3

import pytest

from services.views.patterns import glob, like, rewritten


@pytest.mark.parametrize(
    ("value", "pattern", "matched"),
    [
        ("Gold", "gold%", False),  # SQLite's LIKE: true
        ("gold", "gold%", True),
        ("100%", "100\\%", True),  # `\` escapes, as PostgreSQL's default
        ("1005", "100\\%", False),
        ("a_b", "a\\_b", True),
        ("axb", "a\\_b", False),
        ("a\nb", "a%b", True),
        ("été", "_té", True),
    ],
)
def test_like_matches_as_postgresql_s(value: str, pattern: str, matched: bool) -> None:
    assert like(pattern, value) == int(matched)


def test_ilike_ignores_case_in_any_script_and_nulls_give_null() -> None:
    assert glob("gold%", "GOLDEN") == 1 and glob("été", "ÉTÉ") == 1 and glob("x%", "gold") == 0
    assert like(None, "a") is None and like("a", None) is None and glob("a", None) is None
    assert like("a!%", "a%", "!") == 1 and like("a\\%", "a\\x", "") == 1  # ESCAPE '': none


def test_a_pattern_ending_in_its_escape_character_is_refused() -> None:
    with pytest.raises(ValueError, match="must not end with escape character"):
        like("abc\\", "abc")


def test_ilike_outside_strings_is_written_as_glob_which_postgresql_does_not_have() -> None:
    def masked(sql: str) -> str:
        return re.sub(r"'[^']*'", lambda m: "'" + "_" * (len(m.group(0)) - 2) + "'", sql)

    sql = "SELECT 'x ILIKE y' FROM v WHERE a ILIKE 'g%' AND b NOT ilike $1"
    assert rewritten(sql, masked) == "SELECT 'x ILIKE y' FROM v WHERE a GLOB  'g%' AND b NOT GLOB  $1"
    conn = sqlite3.connect(":memory:")
    conn.create_function("glob", 2, glob)
    assert conn.execute(
        rewritten("SELECT 'Platinum' ILIKE 'plat%', 'x' NOT ILIKE 'X'", masked)
    ).fetchone() == (1, 0)
