"""EXPLAIN over the wire protocol: how the service reads a query of the views, as PostgreSQL's
one column of text, `QUERY PLAN`, a line a step:

    psql -h 127.0.0.1 -p 6875 -c "EXPLAIN SELECT * FROM customer_ratings WHERE user_id BETWEEN 1 AND 99"

A pull by the key (`WHERE user_id = 42`, or `= $1` bound to an integer) is one line: it is read
through the view's key index as an HTTP pull is, on the event loop. Any other query gets
SQLite's plan over the store's table of every view's rows (`main.rows`), then what its names
are: `USING INDEX key_of_...` reads a key or a range of keys through a view's key index (the
lines after the plan say whose), `USING PRIMARY KEY (view=?)` every row of a view. The query is
not run. PostgreSQL's options are read in either spelling (`EXPLAIN VERBOSE ...`, `EXPLAIN
(COSTS false) ...`) and change nothing; `ANALYZE` (run it and time it: psql's `\\timing` does)
and a `FORMAT` other than TEXT are refused with 0A000.
"""

import re
from dataclasses import dataclass

from services.views.sql import Column, Params, Result, SqlError, SqlReader, first_word, pg_column
from services.views.store import key_index_prefix

__all__ = ["COLUMNS", "Explain", "explain", "parse"]

COLUMNS: tuple[Column, ...] = (pg_column("QUERY PLAN", "string"),)
_LISTED = re.compile(r"\s*\(([^()]*)\)(.*)", re.DOTALL)  # EXPLAIN (option [value], ...) query
_WORDS = re.compile(r"\s*((?:(?:ANALYZE|ANALYSE|VERBOSE)\s+)*)(.*)", re.IGNORECASE | re.DOTALL)
_OPTIONS = {"analyze", "analyse", "verbose", "costs", "settings", "generic_plan", "buffers", "serialize"}
_OPTIONS |= {"wal", "timing", "summary", "memory", "format"}
_FALSE = {"false", "off", "0", "no"}
_NOTE = "SQLite's plan over main.rows, every view's rows; USING PRIMARY KEY (view=?): all of a view's rows"


@dataclass(frozen=True)
class Explain:
    sql: str  # the query explained


def parse(sql: str) -> Explain | None:
    """EXPLAIN [options] <query>; None for any other statement; SqlError for an option not
    served."""
    if first_word(sql) != "EXPLAIN":
        return None
    rest = sql.lstrip()[len("EXPLAIN") :]
    if (listed := _LISTED.match(rest)) is not None:
        parts = [part.split() for part in listed.group(1).split(",") if part.strip()]
        options = [(p[0].lower(), p[1].lower() if len(p) > 1 else "true") for p in parts]
        rest = listed.group(2)
    else:
        words = _WORDS.match(rest)
        assert words is not None  # every text matches: both groups may be empty
        options = [(word.lower(), "true") for word in words.group(1).split()]
        rest = words.group(2)
    for name, value in options:
        if name not in _OPTIONS:
            raise SqlError("42601", f'unrecognized EXPLAIN option "{name}"')
        if name in ("analyze", "analyse") and value not in _FALSE:
            raise SqlError(
                "0A000",
                "EXPLAIN ANALYZE is not served: EXPLAIN shows how a query is read (psql's \\timing times it)",
            )
        if name == "format" and value != "text":
            raise SqlError("0A000", f"EXPLAIN's FORMAT {value.upper()} is not served: TEXT")
    if not rest.strip().rstrip(";").strip():
        raise SqlError("42601", "EXPLAIN of what: EXPLAIN SELECT ...")
    return Explain(rest.strip())


def explain(reader: SqlReader, asked: Explain, params: Params) -> Result:
    """The plan's lines: a pull by the key's one, or SQLite's steps as a tree, then a note."""
    if reader.key_lookup(asked.sql, params) is not None:
        return Result(COLUMNS, [("Key Lookup: one row read through the view's key index, as an HTTP pull",)])
    steps = reader.plan(asked.sql, params)
    depth = {0: -1}
    lines: list[tuple[str | None, ...]] = []
    for step, parent, detail in steps:
        depth[step] = level = depth.get(parent, -1) + 1
        lines.append((detail if level == 0 else " " * (6 * level - 4) + "->  " + detail,))
    said = " ".join(detail for _, _, detail in steps)
    indexes = [
        (f"{key_index_prefix(view)}...: the key index of {view} ({', '.join(key)})",)
        for view, key in reader.keys().items()
        if key_index_prefix(view) in said
    ]
    return Result(COLUMNS, [*lines, (_NOTE,), *indexes])
