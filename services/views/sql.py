"""Read-only SQL over the views, for the PostgreSQL wire protocol (`pgwire`).

Each view is a table of its own: its columns typed as the views job's marker names them, read
from the store's rows. A query is a single `SELECT` (or `WITH ... SELECT`, or `VALUES`) in
SQLite's dialect, which shares PostgreSQL's for `WHERE`, `ORDER BY`, `LIMIT`/`OFFSET`,
`GROUP BY` and the common functions. It runs on a read-only connection whose authorizer
allows reading the views' rows and nothing else (no write, no `PRAGMA`, no `ATTACH`, no other
table of the store), for at most `timeout_s`, and gives at most `max_rows` rows: past that it is
refused, never cut short in silence. A `Stream` gives a query's rows without that cap, a page at
a time from one snapshot of the store, for COPY TO STDOUT and cursors.
"""

import contextlib
import contextvars
import functools
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, NoReturn

from foundation.errors import RatingsError
from services.views import arrays, numbers, patterns, timestamps
from services.views.store import Store, column_sql, key_of, served, still_loading, utf8_bytes, view_literal

__all__ = [
    "DATABASE",
    "IDENTIFIER",
    "PARAMETER",
    "PAST_DEADLINE",
    "PG_TYPES",
    "PG_TYPE_NAMES",
    "SCHEMA",
    "SETTINGS",
    "Column",
    "Params",
    "Result",
    "SqlError",
    "SqlReader",
    "Stream",
    "aliased",
    "computed_kinds",
    "first_word",
    "identifier",
    "information_schema",
    "pg_casts",
    "pg_column",
    "pg_name",
    "pg_names",
    "subquery_kinds",
    "time_arithmetic",
    "uncommented",
    "unqualified",
]

IDENTIFIER = r'("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_]*)'  # a name, quoted or bare (one group)


def identifier(text: str) -> str:
    """A name as PostgreSQL reads it: a quoted one as written, a bare one in lower case."""
    return text[1:-1].replace('""', '"') if text.startswith('"') else text.lower()


# PostgreSQL's type of each column type the views job names: (type oid, byte size; -1 varies).
PG_TYPES = {
    "int": ("int4", 23, 4),
    "long": ("int8", 20, 8),
    "double": ("float8", 701, 8),
    "boolean": ("bool", 16, 1),
    "string": ("text", 25, -1),
    "timestamp": ("timestamptz", 1184, 8),  # in UTC (`timestamps`)
    "date": ("date", 1082, 4),
}
# PostgreSQL's name of each of those types, as format_type() and information_schema give it.
PG_TYPE_NAMES = {
    "int4": "integer",
    "int8": "bigint",
    "float8": "double precision",
    "bool": "boolean",
    "text": "text",
    "timestamptz": "timestamp with time zone",
    "date": "date",
}
_READABLE = {"SELECT", "WITH", "VALUES"}
_WRITES = {"INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "REPLACE", "TRUNCATE", "GRANT"}
_NOT_SERVED = {
    "PRAGMA", "ATTACH", "DETACH", "VACUUM", "REINDEX", "ANALYZE", "EXPLAIN", "BEGIN", "COMMIT",
    "ROLLBACK", "SAVEPOINT", "RELEASE", "END", "SET", "SHOW", "RESET", "COPY", "LISTEN", "PREPARE",
}  # fmt: skip
_VIEW_DDL = re.compile(r"\s*(?:CREATE|DROP|ALTER)\s+(?:OR\s+REPLACE\s+)?(?:MATERIALIZED\s+)?VIEW\b", re.I)
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_TABLE_FUNCTIONS = {"json_each"}  # SQLite's, read as a table: an array's elements (`arrays`)
_BLOB_FUNCTIONS = {"randomblob", "zeroblob"}  # a row of a gigabyte in one call
_MAX_VALUE_BYTES = 1_000_000  # SQLite's limit on one value's length (a view's row is far less)
_MAX_SQL_BYTES = 100_000
# A stream's rows (COPY TO STDOUT, a cursor over a query): read from its own connection with a
# small page cache (it reads each page of the table once; the operating system caches the file),
# in pages of at most PAGE_BYTES of text, fetched from SQLite _FETCH_ROWS at a time.
STREAM_CACHE_KIB = 1_024
PAGE_BYTES = 1 << 20
_FIRST_ROWS = 100  # read as the stream opens: the computed columns' types come from them
_FETCH_ROWS = 100
_CHUNK = 500  # rows read at a time while their weight is counted
PAST_DEADLINE = "the rows were read for longer than VIEWS_PG_STREAM_TIMEOUT_S: read fewer, or faster"
Params = dict[str, Any]  # a query's parameters by number: {"1": 42} for $1
VERSION = "PostgreSQL 15.0 (ratings views), the materialized views' query service, read only"
DATABASE, SCHEMA = "views", "public"  # the one database and schema the views are, to every tool
_SESSION_FUNCTIONS = {"version": VERSION, "current_schema": SCHEMA, "current_database": DATABASE}
# The client's settings, by name (None: unknown), for current_setting(): its connection's task
# sets it (a worker thread running the query gets the task's context).
SETTINGS: contextvars.ContextVar[Callable[[str], str | None]] = contextvars.ContextVar(
    "SETTINGS", default=lambda _name: None
)


# A PostgreSQL function's refusal, raised in SQLite's call of it (SQLite says only "user-defined
# function raised exception"): kept here by the thread that ran it, for `_translated` to give.
_REFUSED = threading.local()


def _refusing(function: Callable[..., Any], sqlstate: str) -> Callable[..., Any]:
    """`function` as SQLite calls it: its ValueError becomes the query's SqlError(`sqlstate`)."""

    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except ValueError as err:
            _REFUSED.error = SqlError(sqlstate, str(err))
            raise

    return call


def _session_user() -> str:
    """current_user, session_user and current_role: the user the client named."""
    return SETTINGS.get()("session_authorization") or ""


def _current_setting(name: Any, _missing_ok: Any = None) -> str | None:
    """PostgreSQL's current_setting(name [, missing_ok]): the client's value; null for a
    setting not known here (PostgreSQL refuses it unless missing_ok)."""
    return SETTINGS.get()(str(name)) if name is not None else None


class SqlError(RatingsError):
    """A query refused or failed, with its SQLSTATE (PostgreSQL's error code)."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@dataclass(frozen=True)
class Column:
    name: str
    pg_type: str  # int4, int8, float8, bool, text
    oid: int
    size: int


@dataclass(frozen=True)
class Result:
    columns: tuple[Column, ...]
    rows: list[tuple[str | None, ...]]  # each value in PostgreSQL's text format, None for null
    command: str = "SELECT"  # the command tag's word: "SELECT 3", "FETCH 3", "SHOW" (no count)

    def tag(self, count: int) -> str:
        """CommandComplete's tag, as PostgreSQL words it, for `count` rows sent."""
        return self.command if self.command == "SHOW" else f"{self.command} {count}"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_TIME_KINDS = ("timestamp", "date")
_SAID_KINDS = (*_TIME_KINDS, "boolean")  # what a computed column's text types, over its values
_COLLATED = {"timestamp": f" COLLATE {timestamps.COLLATION}"}  # compared by instant, not as text


def _view_sql(view: str, columns: list[dict[str, str]]) -> str:
    parts = [
        f"{column_sql(c['name'], c.get('type', 'string'))}{_COLLATED.get(c.get('type', ''), '')}"
        f" AS {_quoted(c['name'])}"
        for c in columns
    ]
    return (
        f"CREATE TEMP VIEW {_quoted(view)} AS SELECT {', '.join(parts)} "  # noqa: S608 (quoted names)
        f"FROM main.rows WHERE view = {view_literal(view)}"
    )


# information_schema's tables that tools read to list the views and their columns, each a
# temporary view of the views' descriptions (made with the connection's views).
_INFORMATION_SCHEMA = {
    "schemata": ("catalog_name", "schema_name", "schema_owner"),
    "tables": ("table_catalog", "table_schema", "table_name", "table_type", "is_insertable_into"),
    "views": ("table_catalog", "table_schema", "table_name", "view_definition", "is_updatable"),
    "columns": (
        "table_catalog",
        "table_schema",
        "table_name",
        "column_name",
        "ordinal_position",
        "column_default",
        "is_nullable",
        "data_type",
        "udt_name",
    ),
}
# pg_catalog's tables that tools read by their bare name (Grafana looks for TimescaleDB in
# pg_extension), as psql's queries of them find them (`catalog`): empty.
_CATALOG: dict[str, tuple[tuple[str, ...], list[tuple[object, ...]]]] = {
    "pg_extension": (
        (
            "oid",
            "extname",
            "extowner",
            "extnamespace",
            "extrelocatable",
            "extversion",
            "extconfig",
            "extcondition",
        ),
        [],
    ),
}
_CATALOG_NAME = re.compile(
    r'(?<![\w."$])(?:(?:pg_catalog|"pg_catalog")\s*\.\s*)?("?)(' + "|".join(_CATALOG) + r')\1(?![\w"$])',
    re.IGNORECASE,
)
_INFORMATION_VIEWS = {f"information_schema__{table}" for table in _INFORMATION_SCHEMA} | {
    f"pg_catalog__{table}" for table in _CATALOG
}
_INFORMATION_NAME = re.compile(
    r'(?<![\w."$])(?:information_schema|"information_schema")\s*\.\s*("?)('
    + "|".join(_INFORMATION_SCHEMA)
    + r')\1(?![\w"$])',
    re.IGNORECASE,
)


def _information_sql(shapes: dict[str, list[dict[str, str]]]) -> list[str]:
    """The statements that make information_schema's tables of these views."""
    rows: dict[str, list[tuple[object, ...]]] = {
        "schemata": [(DATABASE, SCHEMA, DATABASE)],
        "tables": [(DATABASE, SCHEMA, view, "VIEW", "NO") for view in sorted(shapes)],
        "views": [(DATABASE, SCHEMA, view, None, "NO") for view in sorted(shapes)],
        "columns": [
            (DATABASE, SCHEMA, view, c["name"], i, None, "YES", *_type_names(c.get("type", "string")))
            for view in sorted(shapes)
            for i, c in enumerate(shapes[view], start=1)
        ],
    }
    tables = {
        f"information_schema__{table}": (columns, rows[table])
        for table, columns in _INFORMATION_SCHEMA.items()
    }
    tables.update({f"pg_catalog__{table}": shape for table, shape in _CATALOG.items()})
    made = []
    for name, (columns, table_rows) in tables.items():
        values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in table_rows)
        body = f"VALUES {values}" if values else f"SELECT {', '.join(['NULL'] * len(columns))} WHERE 0"
        made.append(f"CREATE TEMP VIEW {name}({', '.join(columns)}) AS {body}")
    return made


def _type_names(kind: str) -> tuple[str, str]:
    """information_schema's data_type and udt_name of a view column's type."""
    pg_type = PG_TYPES.get(kind, PG_TYPES["string"])[0]
    return PG_TYPE_NAMES[pg_type], pg_type


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    return str(value) if isinstance(value, int) else view_literal(str(value))


def information_schema(sql: str) -> str:
    """`sql` with information_schema's tables (`information_schema.columns`...) and pg_catalog's
    served here (`pg_extension`) named as the connection has them, outside strings and comments."""
    lowered = sql.lower()
    if "information_schema" in lowered:
        sql = _outside_strings(sql, _INFORMATION_NAME, lambda m: f"information_schema__{m.group(2).lower()}")
    if any(table in lowered for table in _CATALOG):
        sql = _outside_strings(sql, _CATALOG_NAME, lambda m: f"pg_catalog__{m.group(2).lower()}")
    return sql


def _outside_strings(sql: str, pattern: re.Pattern[str], replaced: Callable[[re.Match[str]], str]) -> str:
    """`sql` with each match of `pattern` that starts outside a string or a comment replaced (a
    name's quotes stay in `_masked`'s text, a string's or a comment's letters do not)."""
    masked = _masked(sql)
    for found in reversed([m for m in pattern.finditer(sql) if masked[m.start()] == sql[m.start()]]):
        sql = sql[: found.start()] + replaced(found) + sql[found.end() :]
    return sql


def uncommented(sql: str) -> str:
    """The statement without the whitespace and comments before it."""
    text = sql.lstrip()
    while text.startswith(("--", "/*")):
        if text.startswith("--"):
            text = text.split("\n", 1)[1] if "\n" in text else ""
        else:
            text = text.split("*/", 1)[1] if "*/" in text else ""
        text = text.lstrip()
    return text


_SCHEMA_PREFIX = re.compile(r'(?<![\w."$])(?:public|"public")\s*\.\s*(?=[A-Za-z_"])', re.IGNORECASE)


def unqualified(sql: str) -> str:
    """`sql` with the schema `public` taken off the names it qualifies (`public.v`,
    `"public"."v"`, `public.v.column`), outside strings and comments: the views are all the
    schema there is, and tools write their names in full."""
    if "public" not in sql.lower():
        return sql
    return _outside_strings(sql, _SCHEMA_PREFIX, lambda _: "")


_CAST_TYPE = re.compile(
    r"::\s*([A-Za-z_][A-Za-z0-9_]*(?:\s+(?:precision|varying))?)(\s*\([0-9,\s]*\))?(\s*\[\s*\])?",
    re.IGNORECASE,
)
_CLOCK = re.compile(r"\b(?:interval|extract)\b", re.IGNORECASE)  # `t - interval '1 hour'`: `timestamps`
# PostgreSQL's functions called without parentheses (DBeaver asks `SELECT current_schema(),
# session_user` as it connects): written as SQLite's calls, where not a name's part or quoted.
_NILADIC = re.compile(
    r"(?<![.\w\"])(current_user|session_user|current_role|current_catalog|user|current_timestamp"
    r"|localtimestamp|current_date)(?![\w\"]|\s*[(.])",
    re.IGNORECASE,
)
# Their calls: the clock's in the session's zone (SQLite's own are UTC without a zone).
_NILADIC_CALLS = {
    "current_catalog": "current_database()",
    "user": "current_user()",
    "current_timestamp": "now()",
    "localtimestamp": "now()",
    "current_date": "pg_date(now())",
}
_OPERAND_END = re.compile(r"[\w.$\"]")
_CASE_WORDS = re.compile(r"\b(?:CASE|END)\b", re.IGNORECASE)


def _operand_start(masked: str, end: int) -> int:
    """Where the operand that ends at `end` (exclusive) starts: a name, a number, a parameter, a
    string, or a parenthesised group with the name of the function it calls, if any."""
    i = end
    while i > 0 and masked[i - 1].isspace():
        i -= 1
    if i > 0 and masked[i - 1] == "'":  # a string: its opening quote (a string's inside is masked)
        opening = masked.rfind("'", 0, i - 1)
        return end if opening < 0 else opening  # a lone quote: no operand
    if i > 0 and masked[i - 1] == ")":
        depth, i = 0, i - 1
        while i >= 0:
            depth += (masked[i] == ")") - (masked[i] == "(")
            if depth == 0:
                break
            i -= 1
        if i < 0:
            return end  # a `)` that closes nothing: no operand
    end_of_word = i
    while i > 0 and _OPERAND_END.match(masked[i - 1]):
        i -= 1
    if masked[i:end_of_word].upper() == "END":  # a CASE expression: from its CASE, nested ones within
        depth = 0
        for word in reversed(list(_CASE_WORDS.finditer(masked, 0, end_of_word))):
            depth += 1 if word.group(0).upper() == "END" else -1
            if depth == 0:
                return word.start()
    return i


def pg_casts(sql: str) -> str:
    """PostgreSQL's `x::type` written as `CAST(x AS type)`, which SQLite reads (`$1::int`,
    `count(*)::float`, `'7'::bigint`, `(a + b)::numeric(10, 2)`, `CASE ... END::text`),
    PostgreSQL's clock (`now() - interval '1 hour'`) and casts to its time types as
    `timestamps` writes them, `current_user` (`user`, `session_user`, `current_role`,
    `current_catalog`, `current_timestamp`, `current_date`) as a call, arrays, `= ANY (...)`
    and functions in FROM as `arrays` writes them, and ILIKE as `patterns` does, outside
    strings and comments."""
    if _NILADIC.search(sql) is not None:
        masked = _masked(sql)
        for found in reversed([m for m in _NILADIC.finditer(sql) if masked[m.start()] == sql[m.start()]]):
            word = found.group(1).lower()
            call = _NILADIC_CALLS.get(word, f"{word}()")
            sql = sql[: found.start()] + call + sql[found.end() :]
    try:
        sql = arrays.rewritten(sql, _masked, _operand_start)
    except arrays.Refused as err:
        raise SqlError(err.sqlstate, str(err)) from None
    if _TYPED_TIME.search(sql) is not None:
        sql = _typed_literals(sql)
    if "::" in sql:
        sql = _casts(sql)
    if _TIME_CAST.search(sql) is not None:
        sql = _time_casts(sql)
    if _CLOCK.search(sql) is not None:  # after the casts: `'2026-12-07'::date + interval '1 day'`
        sql = timestamps.rewritten(sql, _masked, _operand_start)
    if "ilike" in sql.lower():
        sql = patterns.rewritten(sql, _masked)
    return sql


_CAST_CALL = re.compile(r"\bCAST\s*\(", re.IGNORECASE)
_TIME_TYPE = r"(timestamptz|timestamp(?:\s+with(?:out)?\s+time\s+zone)?|date|interval)"
_TIME_CAST = re.compile(rf"\bAS\s+{_TIME_TYPE}\s*\)", re.IGNORECASE)
_TIME_CAST_END = re.compile(rf"\s+AS\s+{_TIME_TYPE}\s*$", re.IGNORECASE)


_TYPED_TIME = re.compile(rf"\b(?!interval){_TIME_TYPE}\s*'", re.IGNORECASE)


def _typed_literals(sql: str) -> str:
    """Each of SQL's typed literals of a time type (`timestamptz '2026-12-07 04:00'`,
    `timestamp with time zone '...'`, `date '2026-12-07'`; an interval's is `timestamps`') as
    the cast of its text to the type: SQLite read `date '...'` as a column named date."""
    masked = _masked(sql)
    for found in reversed([m for m in _TYPED_TIME.finditer(masked) if masked[m.start()] == sql[m.start()]]):
        close = masked.find("'", found.end())
        typed = timestamps.cast(sql[found.end() - 1 : close + 1], found.group(1)) if close > 0 else None
        if typed is None or masked[: found.start()].endswith("."):
            continue
        sql = sql[: found.start()] + typed + sql[close + 1 :]
    return sql


def _time_casts(sql: str) -> str:
    """Each `CAST(x AS date)` (or `timestamp`, `timestamptz`) as `timestamps` writes it, the last
    first: SQLite's CAST to a name it does not know keeps the leading number (2026), and
    Metabase groups by day with `CAST(t AS date)`."""
    masked = _masked(sql)
    for found in reversed(list(_CAST_CALL.finditer(masked))):
        depth, end = 1, found.end()
        while end < len(masked) and depth:
            depth += (masked[end] == "(") - (masked[end] == ")")
            end += 1
        typed = _TIME_CAST_END.search(masked, found.end(), end - 1) if not depth else None
        if typed is None:
            continue
        cast = timestamps.cast(sql[found.end() : typed.start()].strip(), typed.group(1))
        if cast is not None:
            sql = sql[: found.start()] + cast + sql[end:]
            masked = masked[: found.start()] + _masked(cast) + masked[end:]
    return sql


def _casts(sql: str) -> str:
    """Each `x::type` as SQLite's `CAST`, `timestamps`' for its time types, `pg_array_in` for an
    array type; the first first, so that a chained cast (`$1::text::int[]`) casts what the one
    before it wrote."""
    done = 0
    while True:
        masked = _masked(sql)
        found = next((m for m in _CAST_TYPE.finditer(sql, done) if masked[m.start()] == ":"), None)
        if found is None:
            return sql
        start = _operand_start(masked, found.start())
        if start == found.start():
            done = found.end()  # nothing before it to cast: SQLite says what is wrong
            continue
        operand = sql[start : found.start()].strip()
        if found.group(3):  # to an array type: `'{1,2}'::int[]`
            cast = f"pg_array_in({operand}, {view_literal(found.group(1))})"
        else:
            cast = timestamps.cast(operand, found.group(1)) or (
                f"CAST({operand} AS {found.group(1)}{found.group(2) or ''})"
            )
        sql = sql[:start] + cast + sql[found.end() :]
        done = start


_ARITHMETIC = re.compile(r"[-+*/](?!-)")
_NO_FACTOR = re.compile(r"\s*(?:FROM\b|,|\)|$)", re.IGNORECASE)  # what follows `*` in SELECT *
_AFTER_OPERAND = re.compile(r"[\w)\"']")
_NUMBERS = ("int", "long")


def _operand_end(masked: str, at: int) -> int:
    """Where the operand that starts at `at` (after spaces) ends: a string, a parenthesised
    group, a name (qualified or quoted), a number, or a call."""
    i = at
    while i < len(masked) and masked[i].isspace():
        i += 1
    if i < len(masked) and masked[i] in "'(":
        close = masked.find("'", i + 1) if masked[i] == "'" else arrays.closing(masked, i, ")")
        return close + 1 if close >= 0 else i
    start = i
    while i < len(masked) and (masked[i].isalnum() or masked[i] in '_.$"'):
        i += 1
    call = i
    while call < len(masked) and masked[call].isspace():
        call += 1
    if i > start and call < len(masked) and masked[call] == "(":
        close = arrays.closing(masked, call, ")")
        return close + 1 if close >= 0 else start
    return i


def _time_operation(operator: str, left: str, right: str, kinds: dict[str, str]) -> str | None:
    """What `left operator right` is when either is a timestamp or a date and the other's type is
    known, as PostgreSQL computes it (a string literal is read as the other's type); None when
    neither is one, or one's type is not known here (a parameter)."""
    left_kind, right_kind = _kind(left, kinds), _kind(right, kinds)
    found = {left_kind, right_kind}
    if not found & {"timestamp", "date", "interval"} or None in found:
        return None
    if "interval" in found:
        return _interval_operation(operator, left, right, left_kind, right_kind)
    return _moment_operation(operator, left, right, left_kind, right_kind)


def _moment_operation(
    operator: str, left: str, right: str, left_kind: str | None, right_kind: str | None
) -> str:
    """`left operator right` where one is a timestamp or a date and neither an interval."""
    found = {left_kind, right_kind}
    if operator in "*/":
        _no_operator(operator, left_kind, right_kind)
    if operator == "-" and "timestamp" in found and found <= {"timestamp", "date", "string"}:
        return f"pg_minus({left}, {right})"  # the interval between them
    if operator == "-" and found <= {"date", "string"}:
        return f"CAST(julianday({left}) - julianday({right}) AS INTEGER)"  # days
    if left_kind == "date" and right_kind in _NUMBERS:  # date ± days: a date
        return f"date({left}, printf('%+d days', {operator}({right})))"
    if operator == "+" and left_kind in _NUMBERS and right_kind == "date":
        return f"date({right}, printf('%+d days', {left}))"
    _no_operator(operator, left_kind, right_kind)


def _interval_operation(
    operator: str, left: str, right: str, left_kind: str | None, right_kind: str | None
) -> str:
    """`left operator right` where one is an interval (a cast, `'1 day'::interval`, or a literal
    beside another operand): a timestamp or a date moved by it, as `t ± interval '...'` is."""
    if operator in "+-" and left_kind in _TIME_KINDS and right_kind == "interval":
        return f"(pg_shift({left}, '{operator}', {right}) COLLATE {timestamps.COLLATION})"
    if operator == "+" and left_kind == "interval" and right_kind in _TIME_KINDS:
        return f"(pg_shift({right}, '+', {left}) COLLATE {timestamps.COLLATION})"
    if left_kind == right_kind == "interval" or {left_kind, right_kind} & set((*_NUMBERS, "double")):
        raise SqlError(
            "0A000", f"interval arithmetic ({operator}) is not served: keep such a length in seconds"
        )
    _no_operator(operator, left_kind, right_kind)


def _no_operator(operator: str, left_kind: str | None, right_kind: str | None) -> NoReturn:
    """42883, PostgreSQL's refusal of an operator for these operand types."""
    shown = {
        "timestamp": "timestamp with time zone",
        "int": "integer",
        "long": "bigint",
        "double": "double precision",
    }
    raise SqlError(
        "42883",
        f"operator does not exist: {shown.get(left_kind or '', left_kind)} {operator} "
        f"{shown.get(right_kind or '', right_kind)} (a timestamp moves by an interval: t + interval '1 h')",
    )


def time_arithmetic(sql: str, kinds: dict[str, str]) -> str:
    """`a - b`, `a + b`, `a * b` and `a / b` where either is a view's timestamp, date or an
    interval (a column, `max(t)`, a cast literal, a parameter: what `kinds` say) as PostgreSQL
    computes them: the interval between two timestamps (`pg_minus`), the days between two dates,
    a date moved by days, a timestamp moved by an interval; a timestamp plus a number, or times
    anything, is refused as in PostgreSQL, and an interval's own arithmetic as not served.
    SQLite would compute with the texts' leading numbers (the years) without a word."""
    masked = _masked(sql)
    for found in reversed(list(_ARITHMETIC.finditer(masked))):
        at = found.start()
        before = masked[:at].rstrip()
        if not before or _AFTER_OPERAND.match(before[-1]) is None or before.endswith("-"):
            continue  # a sign, or a comment's
        if re.search(r"[0-9.][eE]$", before):
            continue  # an exponent: 1e-3
        if found.group(0) == "*" and _NO_FACTOR.match(masked, at + 1):
            continue  # SELECT *: every column, no product
        start, end = _operand_start(masked, at), _operand_end(masked, at + 1)
        left, right = sql[start:at].strip(), sql[at + 1 : end].strip()
        if not left or not right or right.lower().startswith("interval"):
            continue
        replacement = _time_operation(found.group(0), left, right, kinds)
        if replacement is not None:
            sql = sql[:start] + replacement + sql[end:]
            masked = masked[:start] + _masked(replacement) + masked[end:]
    return sql


def first_word(sql: str) -> str:
    """The statement's first word in upper case, after comments and opening parentheses (and
    without a semicolon right after it): what it is."""
    text = uncommented(sql)
    while text.startswith("("):
        text = uncommented(text[1:])
    words = text.split(None, 1)
    return words[0].rstrip(";").upper() if words else ""


class SqlReader:
    """Runs queries over the store's served views (its `infos()`, a new dict whenever one
    changed): a read-only connection per thread, with a table per view. Key lookups go through
    the store's own `get`, as an HTTP pull does. A query that reads a view still `loading` (its
    changelog topic not yet read to its end) is refused with SQLSTATE 57P03, as PostgreSQL
    refuses connections while it starts, rather than answered from part of it: SQLite's
    authorizer names the view each read of the store's rows goes through."""

    def __init__(
        self,
        store: Store,
        *,
        max_rows: int,
        timeout_s: float,
        loading: Callable[[], frozenset[str]] = frozenset,
        max_bytes: int = 33_554_432,
    ) -> None:
        self.path = store.path
        self.infos = store.infos
        self.get = store.get
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.timeout_s = timeout_s
        self.loading = loading
        self._local = threading.local()

    def _refuse_loading(self, names: set[str]) -> None:
        if waiting := sorted(names & self.loading()):
            raise SqlError("57P03", still_loading(waiting[0]))

    def tables(self) -> dict[str, tuple[Column, ...]]:
        """Each view's columns, as a PostgreSQL client sees them."""
        infos = self.infos()
        return {
            view: tuple(pg_column(c["name"], c.get("type", "string")) for c in infos[view]["columns"])
            for view in sorted(served(infos))
        }

    def definitions(self) -> dict[str, str | None]:
        """Each view's SQL, as its marker gives it (None where it does not)."""
        infos = self.infos()
        return {view: getattr(infos[view].get("marker"), "sql", None) for view in sorted(served(infos))}

    def keys(self) -> dict[str, list[str]]:
        """Each view's key columns, in the key's order."""
        infos = self.infos()
        return {view: list(infos[view].get("key") or []) for view in sorted(served(infos))}

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection, with a table per served view. It is made again when the
        views or their columns change, not when only a marker does (the descriptions change
        with every batch a view applies)."""
        infos = self.infos()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._local.infos is infos:
            return conn
        shapes = _shapes(infos)
        if conn is not None and self._local.shapes == shapes:
            self._local.infos = infos
            return conn
        if conn is not None:
            conn.close()
        conn = self._open(shapes, self._local)
        self._local.conn, self._local.infos, self._local.shapes = conn, infos, shapes
        return conn

    def _open(
        self, shapes: dict[str, list[dict[str, str]]], state: Any, cache_kib: int | None = None
    ) -> sqlite3.Connection:
        """A read-only connection with a table per view of `shapes` (and SQLite's page cache,
        or `cache_kib`). Its authorizer refuses a read through a view of `state.loading` (by
        name in lower case), and leaves its name in `state.refused`."""
        # No statement cache: the authorizer runs as a statement is prepared, and a view may be
        # loading again (its local copy rebuilt) under a statement prepared while it was not.
        conn = sqlite3.connect(
            f"file:{self.path}?mode=ro", uri=True, check_same_thread=False, cached_statements=0
        )
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, _MAX_SQL_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        if cache_kib is not None:
            conn.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
        for view, columns in shapes.items():
            conn.execute(_view_sql(view, columns))
        for statement in _information_sql(shapes):
            conn.execute(statement)
        for name, value in _SESSION_FUNCTIONS.items():  # what drivers and tools ask as they connect
            conn.create_function(name, 0, lambda v=value: v, deterministic=True)
        conn.create_collation(timestamps.COLLATION, timestamps.order)
        for arguments in (2, 3):  # LIKE as PostgreSQL's: case-sensitive, `\` its escape
            conn.create_function("like", arguments, _refusing(patterns.like, "22025"), deterministic=True)
        conn.create_function("glob", 2, _refusing(patterns.glob, "22025"), deterministic=True)  # ILIKE
        conn.create_collation(timestamps.INTERVALS, timestamps.interval_order)
        conn.create_function(
            timestamps.INTERVALS, 1, _refusing(timestamps.interval, "22007"), deterministic=True
        )
        conn.create_function("now", 0, timestamps.now)  # PostgreSQL's clock (not deterministic)
        conn.create_function("date_trunc", 2, timestamps.date_trunc, deterministic=True)
        conn.create_function("date_part", 2, timestamps.date_part, deterministic=True)
        conn.create_function("pg_date", 1, timestamps.pg_date, deterministic=True)
        conn.create_function("pg_shift", 3, _refusing(timestamps.shifted, "22007"), deterministic=True)
        conn.create_function("pg_minus", 2, timestamps.between, deterministic=True)
        for arguments in (1, 2):
            conn.create_function("age", arguments, timestamps.age)  # age(t): from today
        conn.create_function("to_char", 2, _refusing(timestamps.to_char, "22007"), deterministic=True)
        for arguments in (1, 2):  # of seconds; of a text and its format (Superset's time filters)
            conn.create_function(
                "to_timestamp", arguments, _refusing(timestamps.to_timestamp, "22007"), deterministic=True
            )
        conn.create_function("to_date", 2, _refusing(timestamps.to_date, "22007"), deterministic=True)
        for arguments in (1, 2):
            conn.create_function("current_setting", arguments, _current_setting)
        for name in ("current_user", "session_user", "current_role"):
            conn.create_function(name, 0, _session_user)
        for name, arguments, function, sqlstate in arrays.FUNCTIONS:
            conn.create_function(name, arguments, _refusing(function, sqlstate), deterministic=True)
        # SQLite connects its table-valued json_each (unnest, ANY) at its first use, and asks the
        # authorizer to write the schema as it does: done here, before there is one.
        conn.execute("SELECT value FROM json_each('[]')").fetchall()
        views = set(shapes)

        def authorize(
            action: int, arg1: str | None, arg2: str | None, db: str | None, inner: str | None
        ) -> int:
            # `inner` is the view a read of the store's rows goes through, as the query spells it:
            # one still loading is refused as the statement is prepared, before a row is read.
            loading = getattr(state, "loading", {})
            if action == sqlite3.SQLITE_READ and inner is not None and inner.lower() in loading:
                state.refused = loading[inner.lower()]
                return sqlite3.SQLITE_DENY
            return _authorize(views, action, arg1, arg2, db)

        conn.set_authorizer(authorize)
        return conn

    def query(self, sql: str, params: Params | None = None, timeout_s: float | None = None) -> Result:
        """The rows of one read-only statement; SqlError when it is refused or fails. `params`
        are the values of its `$1`, `$2`... by number ("1", "2"...), as the extended protocol
        binds them; `timeout_s`, the session's statement_timeout when it is shorter than the
        reader's own bound."""
        return self.key_lookup(sql, params) or self._run(sql, params, timeout_s)

    def describe(self, sql: str) -> tuple[Column, ...]:
        """The columns `sql` gives, without running it (its parameters null): what a client
        that prepares a statement is told before it binds one. A column of a view has the
        view's type; one the query computes, the type its SELECT list's text says
        (`computed_kinds`: count() an int8, avg() a float8, max(ratings) the column's...), and
        text where it says none."""
        self._check_readable(sql)
        body = pg_casts(unqualified(sql)).rstrip().rstrip(";")
        wrapped = self._run(f"SELECT * FROM (\n{body}\n) LIMIT 0", _nulls(body))  # noqa: S608
        ran = self._local.ran
        inner = ran[ran.index("(\n") + 2 : ran.rindex("\n)")]  # the body as SQLite read it
        names = [c.name for c in wrapped.columns]
        every = self.column_kinds()
        said = self._text_kinds(inner, names, every)
        return tuple(
            pg_column(shown, said[i] or every.get(name.lower()) or "string")
            for i, (name, shown) in enumerate(zip(names, pg_names(sql, names), strict=True))
        )

    def column_kinds(self) -> dict[str, str]:
        """Each served view column's type by its name in lower case (where two views have a
        column of that name, the first view's by name): the type of a result column so named,
        and of a parameter compared with one."""
        infos = self.infos()
        kinds: dict[str, str] = {}
        for view in sorted(served(infos)):
            for column in infos[view]["columns"]:
                kinds.setdefault(column["name"].lower(), column.get("type", "string"))
        return kinds

    def key_lookup(self, sql: str, params: Params | None = None) -> Result | None:
        """`SELECT * FROM <view> WHERE <its integer key column> = <n>` (or `= $1` bound to an
        integer) answered from the row's stored JSON, as an HTTP pull is, without SQLite's plan
        and a json_extract a column (a third of the CPU here); None for any other query, or a
        row this path would not give exactly as SQLite gives it. One indexed read: quick enough
        for the event loop, as an HTTP pull is."""
        asked = _KEY_LOOKUP.fullmatch(unqualified(sql))
        number = _key_asked(asked, params) if asked is not None else None
        if asked is None or number is None:
            return None
        view, column = asked.group(1), asked.group(2)
        infos = self.infos()
        info = infos.get(view)
        if info is None or info.get("key") != [column] or view not in served(infos):
            return None
        kinds = {c["name"]: c.get("type", "string") for c in info["columns"]}
        if kinds.get(column) not in ("int", "long"):
            return None
        self._refuse_loading({view})
        found = self.get(view, key_of([number]))
        columns = tuple(pg_column(c["name"], kinds[c["name"]]) for c in info["columns"])
        if found is None:
            return Result(columns, [])
        row = json.loads(found)
        try:
            texts = tuple(_text(_as_sqlite(row.get(c.name), kinds[c.name]), c.pg_type) for c in columns)
        except _Unlike:
            return None
        return Result(columns, [texts])

    @staticmethod
    def _check_readable(sql: str) -> None:
        word = first_word(sql)
        if word in _WRITES and _VIEW_DDL.match(sql):  # a Materialize user's first try
            raise SqlError(
                "25006",
                f"the views are read only here: {word} VIEW is refused. A view is declared in a SQL file "
                "and created, replaced or dropped with `python -m enrichment_job.views create|replace|drop`"
                " (make view); it is then served here",
            )
        if word in _WRITES:
            raise SqlError("25006", f"the views are read only: {word} is refused")
        if word in _NOT_SERVED:
            raise SqlError("0A000", f"only SELECT, WITH and VALUES are served, not {word}")
        if word not in _READABLE:
            raise SqlError("42601", f'syntax error at or near "{word[:40]}"')

    def _execute(  # noqa: PLR0917 - a statement's parts, from three callers
        self,
        conn: sqlite3.Connection,
        state: Any,
        sql: str,
        params: Params | None,
        deadline: float,
        prefix: str = "",
    ) -> sqlite3.Cursor:
        """`sql` run on `conn` (its rows not read yet), ended past `deadline` (monotonic);
        `prefix`: SQLite's words before it (EXPLAIN QUERY PLAN)."""
        sql = information_schema(unqualified(sql))
        self._check_readable(sql)
        sql = pg_casts(sql)
        if _ARITHMETIC.search(sql) is not None:
            kinds = self.column_kinds() | _parameter_kinds(params)
            sql = time_arithmetic(sql, kinds | subquery_kinds(sql, kinds))
        state.ran = sql  # as SQLite reads it: the result's columns are typed from its text
        sql = prefix + sql
        state.loading = {name.lower(): name for name in self.loading()}  # SQLite's names ignore case
        state.refused = None
        timestamps.STATEMENT_TIME.set(datetime.now(UTC))  # now(), the same in the whole statement
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        with self._errors(state):
            return conn.cursor().execute(sql, params or {})

    @contextlib.contextmanager
    def _errors(self, state: Any) -> Iterator[None]:
        """SQLite's errors as PostgreSQL's (SqlError with its SQLSTATE)."""
        try:
            yield
        except sqlite3.ProgrammingError as err:
            if (missing := _MISSING_PARAMETER.search(str(err))) is not None:
                raise SqlError("42P02", f"there is no parameter ${missing.group(1)}") from None
            raise SqlError("42601", "one statement at a time, and no ? parameters ($1, $2... are)") from None
        except sqlite3.Warning:  # more than one statement
            raise SqlError("42601", "one statement at a time") from None
        except sqlite3.DatabaseError as err:
            loading = state.refused or _missing(err, state.loading)
            if loading is not None:
                raise SqlError("57P03", still_loading(loading)) from None
            raise _translated(err, self.timeout_s) from None

    def _columns(self, sql: str, ran: str, names: list[str], rows: list[Any]) -> tuple[Column, ...]:
        """The result's columns, named as PostgreSQL names them (`pg_names`) and typed: a time
        type or a boolean where the text SQLite ran (`ran`) says (`min(hour_start)`, `now()`,
        `a > b`: their values are text, or 1 and 0), else a view's column by its view's type,
        else by the column's values."""
        kinds = self.column_kinds()
        said = self._text_kinds(ran, names, kinds)
        return tuple(
            pg_column(
                shown,
                (said[i] if said[i] in _SAID_KINDS else None) or kinds.get(name.lower()) or _kind_of(rows, i),
            )
            for i, (name, shown) in enumerate(zip(names, pg_names(sql, names), strict=True))
        )

    @staticmethod
    def _text_kinds(ran: str, names: list[str], kinds: dict[str, str]) -> list[str | None]:
        """Each result column's type where the text of its SELECT list item says: by position
        where the list is the result's columns one for one, else by the name SQLite gives it."""
        if not any(name.lower() not in kinds for name in names):
            return [None] * len(names)  # the views' columns: typed by name
        known = kinds | subquery_kinds(ran, kinds)
        items = _aligned(ran, len(names))
        if items is not None:
            return [_kind(aliased(item)[0], known) for item in items]
        computed = computed_kinds(ran, known)
        return [computed.get(name) for name in names]

    def _run(self, sql: str, params: Params | None = None, timeout_s: float | None = None) -> Result:
        conn = self._connection()
        limit = min(self.timeout_s, timeout_s or self.timeout_s)
        own = limit < self.timeout_s  # the session's statement_timeout, not the reader's bound
        try:
            cursor = self._execute(conn, self._local, sql, params, time.monotonic() + limit)
            try:
                rows = self._rows(cursor)
                names = [d[0] for d in cursor.description or ()]
            finally:
                cursor.close()  # a statement left open would hold its read transaction, and the WAL
                conn.set_progress_handler(None, 0)
        except SqlError as err:
            if own and err.sqlstate == "57014":
                raise SqlError("57014", "canceling statement due to statement timeout") from None
            raise
        if len(rows) > self.max_rows:
            raise SqlError(
                "54000",
                f"the query gives more than {self.max_rows} rows (VIEWS_PG_MAX_ROWS): add a WHERE or a "
                "LIMIT, or read it with COPY ... TO STDOUT or through a cursor",
            )
        columns = self._columns(sql, self._local.ran, names, rows)
        return Result(columns, [_texts(row, columns) for row in rows])

    def _rows(self, cursor: sqlite3.Cursor) -> list[Any]:
        """The statement's rows, up to one past `max_rows`; SqlError 54000 once their values
        weigh more than `max_bytes` (UTF-8 bytes of text, bytes of blobs): a row keeps what its
        view keeps (a last message of up to 1 MB each), so the row cap alone let 10 GB in."""
        rows: list[Any] = []
        weight = 0
        while len(rows) <= self.max_rows:
            with self._errors(self._local):
                chunk = cursor.fetchmany(min(_CHUNK, self.max_rows + 1 - len(rows)))
            if not chunk:
                break
            rows += chunk
            weight += sum(utf8_bytes(v) for row in chunk for v in row if isinstance(v, (str, bytes)))
            if weight > self.max_bytes:
                raise SqlError(
                    "54000",
                    f"the query's rows weigh more than {self.max_bytes} bytes (VIEWS_PG_MAX_BYTES): add a"
                    " WHERE or a LIMIT, leave out the long columns, or read it with COPY ... TO STDOUT or"
                    " through a cursor",
                )
        return rows

    def plan(self, sql: str, params: Params | None = None) -> list[tuple[int, int, str]]:
        """SQLite's plan of a query of the views (EXPLAIN QUERY PLAN), without running it: each
        step's id, its parent's and what it does. Parameters not given are null."""
        bound = _nulls(sql) | (params or {})
        conn = self._connection()
        deadline = time.monotonic() + self.timeout_s
        cursor = self._execute(conn, self._local, sql, bound, deadline, "EXPLAIN QUERY PLAN ")
        try:
            with self._errors(self._local):
                return [(int(step[0]), int(step[1]), str(step[3])) for step in cursor.fetchall()]
        finally:
            cursor.close()
            conn.set_progress_handler(None, 0)

    def stream(self, sql: str, params: Params | None = None, *, lasts_s: float) -> "Stream":
        """The rows of a read-only statement, to be read a page at a time from one snapshot of
        the store, for at most `lasts_s` (COPY TO STDOUT, a cursor over a query). The first
        rows are read now, for the types of the columns the query computes."""
        state = SimpleNamespace(loading={}, refused=None)  # the stream's own authorizer's
        conn = self._open(_shapes(self.infos()), state, STREAM_CACHE_KIB)
        deadline = time.monotonic() + lasts_s
        try:
            cursor = self._execute(conn, state, sql, params, min(deadline, time.monotonic() + self.timeout_s))
            with self._errors(state):
                first = cursor.fetchmany(_FIRST_ROWS)
            names = [d[0] for d in cursor.description or ()]
        except BaseException:
            conn.close()
            raise
        columns = self._columns(sql, state.ran, names, first)
        errors = functools.partial(self._errors, state)
        return Stream(
            conn,
            cursor,
            columns=columns,
            first=first,
            page_timeout_s=self.timeout_s,
            errors=errors,
            deadline=deadline,
        )


class Stream:
    """A query's rows from one snapshot of the store (the statement's own read transaction),
    read a page at a time as the client takes them: their number is not capped, their time is
    (each page's work at most VIEWS_PG_TIMEOUT_S, the whole at most the `deadline` it was made
    with). Its connection is its own, so pulls answered meanwhile read the newest rows. `page`
    runs in a worker thread; `close`, from any thread, interrupts a page under way."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        cursor: sqlite3.Cursor,
        *,
        columns: tuple[Column, ...],
        first: list[Any],
        page_timeout_s: float,
        errors: Callable[[], contextlib.AbstractContextManager[None]],
        deadline: float,
    ) -> None:
        self.columns = columns
        self.deadline = deadline
        self._conn, self._cursor = conn, cursor
        self._page_timeout_s, self._errors = page_timeout_s, errors  # SQLite's errors as SqlError
        self._first = first
        self._lock = threading.Lock()
        self._ended: str | None = None  # why it was closed before its end
        self._done = False

    def page(self, rows: int, max_bytes: int = PAGE_BYTES) -> list[tuple[str | None, ...]]:
        """The next rows, at most `rows` of them and about `max_bytes` of text (UTF-8); none at the end.
        SqlError 57014 once the stream is past its deadline or closed."""
        with self._lock:
            if self._ended is not None:
                raise SqlError("57014", self._ended)
            if self._done:
                return []
            now = time.monotonic()
            if now > self.deadline:
                raise SqlError("57014", PAST_DEADLINE)
            until = min(self.deadline, now + self._page_timeout_s)
            self._conn.set_progress_handler(lambda: int(time.monotonic() > until), 10_000)
            out: list[tuple[str | None, ...]] = []
            size = 0
            while len(out) < rows and size < max_bytes:
                raw, self._first = self._first[: rows - len(out)], self._first[rows - len(out) :]
                if not raw:
                    try:
                        with self._errors():
                            raw = self._cursor.fetchmany(min(_FETCH_ROWS, rows - len(out)))
                    except SqlError:
                        if self._ended is not None or time.monotonic() > self.deadline:
                            raise SqlError("57014", self._ended or PAST_DEADLINE) from None
                        raise
                if not raw:
                    self._done = True
                    self._cursor.close()  # its read transaction ends with the rows
                    break
                texts = [_texts(row, self.columns) for row in raw]
                size += sum(utf8_bytes(v) for row in texts for v in row if v is not None)
                out.extend(texts)
            return out

    def close(self, why: str = "the rows are no longer read") -> None:
        """Ends the read transaction (also part way through a page: it is interrupted)."""
        if self._ended is None:
            self._ended = why
        with contextlib.suppress(sqlite3.ProgrammingError):  # closed already
            self._conn.interrupt()
        with self._lock:
            with contextlib.suppress(sqlite3.Error):
                self._cursor.close()
            self._conn.close()


def _parameter_kinds(params: Params | None) -> dict[str, str]:
    """The parameters bound as a timestamp or a date, by their names in the SQL (`$1`)."""
    return {f"${n}": v.kind for n, v in (params or {}).items() if isinstance(v, timestamps.TimeParameter)}


def _nulls(sql: str) -> Params:
    """Every parameter of `sql` ($1, $2...) bound to null: a statement described, not run."""
    return dict.fromkeys(m.group(1) for m in PARAMETER.finditer(sql))


def _shapes(infos: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, str]]]:
    """Each served view's columns, as its table is made from them."""
    return {view: infos[view]["columns"] for view in served(infos)}


def _texts(row: Any, columns: tuple[Column, ...]) -> tuple[str | None, ...]:
    return tuple(_text(v, c.pg_type) for v, c in zip(row, columns, strict=True))


_KEY_LOOKUP = re.compile(
    r"\s*SELECT\s+\*\s+FROM\s+([A-Za-z_][A-Za-z0-9_]*)\s+WHERE\s+([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"
    r"(?:(-?[0-9]{1,18})|\$([1-9][0-9]{0,4})(?:::\s*(?:INTEGER|INT|INT4|BIGINT|INT8))?)\s*;?\s*",
    re.IGNORECASE,
)
PARAMETER = re.compile(r"\$([1-9][0-9]{0,4})")  # $1, $2...: a query's parameters
_MISSING_PARAMETER = re.compile(r"binding parameter :([0-9]+)")


def _key_asked(asked: re.Match[str], params: Params | None) -> int | None:
    """The key a key look-up asks for: its literal, or its parameter bound to an integer."""
    literal, parameter = asked.group(3), asked.group(4)
    if parameter is None:
        return int(literal)
    bound = (params or {}).get(parameter)
    return bound if isinstance(bound, int) and not isinstance(bound, bool) else None


_MASKED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\\*.*?\\*/", re.DOTALL)
_ALIAS = re.compile(r'(.*?\S)\s+(?:AS\s+)?("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_]*)', re.IGNORECASE | re.DOTALL)
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)", re.DOTALL)
_CAST = re.compile(r"CAST\s*\((.*)\s+AS\s+([A-Za-z]+)[^)]*\)", re.IGNORECASE | re.DOTALL)
_CAST_KINDS = {
    **dict.fromkeys(("int", "integer", "bigint", "smallint"), "long"),
    **dict.fromkeys(("real", "double", "float", "numeric"), "double"),
    **dict.fromkeys(("text", "varchar"), "string"),
    **dict.fromkeys(("boolean", "bool"), "boolean"),
}
_FUNCTION_KINDS = {
    **dict.fromkeys(("count", "length", "instr"), "long"),
    **dict.fromkeys(("age", "pg_minus"), "string"),  # an interval, as text
    **dict.fromkeys(("avg", "total", "round", "date_part"), "double"),
    **dict.fromkeys(("date", "pg_date", "to_date"), "date"),
    **dict.fromkeys(("now", "date_trunc", "to_timestamp"), "timestamp"),
    **dict.fromkeys(
        ("upper", "lower", "substr", "trim", "replace", "printf", "format", "group_concat"), "string"
    ),
}
_SAME_KIND = {"sum", "min", "max", "abs", "coalesce", "ifnull"}  # the kind of their first argument


def _masked(sql: str) -> str:
    """`sql` with its strings, quoted names and comments blanked (the same length): what is left
    is its structure."""
    return _MASKED.sub(lambda m: m.group(0)[0] + "_" * (len(m.group(0)) - 2) + m.group(0)[-1], sql)


def select_list(sql: str) -> list[str]:
    """The items of the main SELECT list of `sql` (after any WITH), as written."""
    masked, depth, items, start = _masked(sql), 0, [], None
    for i, char in enumerate(masked):
        depth += (char == "(") - (char == ")")
        if depth:
            continue
        word = masked[i : i + 7].upper()
        if start is None and word[:6] == "SELECT" and not masked[i + 6 : i + 7].isalnum():
            start = i + 6
        elif start is not None and char == ",":
            items.append(sql[start:i])
            start = i + 1
        elif (
            start is not None
            and word[:4] == "FROM"
            and not masked[i - 1].isalnum()
            and not word[4:5].isalnum()
        ):
            break
    else:
        i = len(sql)
    if start is not None:
        items.append(sql[start:i])
    first = re.sub(r"^\s*(?:DISTINCT|ALL)\s+", "", items[0], flags=re.IGNORECASE) if items else ""
    return [first, *items[1:]] if items else []


def _enclosed(text: str) -> bool:
    """Whether `text` is one parenthesised whole: `(a + b)`, not `(a) + (b)`."""
    if not text.startswith("("):
        return False
    masked, depth = _masked(text), 0
    for i, char in enumerate(masked):
        depth += (char == "(") - (char == ")")
        if depth == 0:
            return i == len(masked) - 1
    return False


_EXPONENT = re.compile(r"[0-9]*\.?[0-9]+[eE]")  # 2.5e-3: its sign is not an operator


def _operands(text: str) -> tuple[list[str], set[str]]:
    """`text` split at its outermost operators (+ - * / % ||), and those operators; a sign
    with nothing before it is not one (`-x`, `2 * -x`)."""
    masked, depth, parts, operators, start, i = _masked(text), 0, [], set(), 0, 0
    while i < len(masked):
        char, before = masked[i], masked[start:i].strip()
        depth += (char == "(") - (char == ")")
        width = 2 if masked.startswith("||", i) else 1
        if depth == 0 and (width == 2 or char in "*/%" or (char in "+-" and before)):
            if not (char in "+-" and _EXPONENT.fullmatch(before)):
                parts.append(text[start:i])
                operators.add(masked[i : i + width])
                start = i + width
        i += width
    return [*parts, text[start:]], operators


def _arithmetic_kind(parts: list[str], operators: set[str], columns: dict[str, str]) -> str | None:
    """What `a + b * 2` gives: text for a concatenation, else the widest of its numeric operands
    (double over long over int), or nothing said when one of them says nothing."""
    if "||" in operators:
        return "string"
    # an integer literal is an int where it fits one, as in PostgreSQL: user_id + 1 stays an int
    kinds = ["int" if _small_integer(part) else _kind(part, columns) for part in parts]
    if any(kind not in ("int", "long", "double") for kind in kinds):
        return None
    return next(kind for kind in ("double", "long", "int") if kind in kinds)


def _small_integer(text: str) -> bool:
    return re.fullmatch(r"\s*-?[0-9]{1,10}\s*", text) is not None and abs(int(text)) < 2**31


_TIMESTAMP_COLLATED = f"collate {timestamps.COLLATION}"
_INTERVAL_COLLATED = f"collate {timestamps.INTERVALS}"  # an interval, as `timestamps` writes one


def _kind(expression: str, columns: dict[str, str]) -> str | None:
    """What an expression of the SELECT list gives, where its text says."""
    text = expression.strip()
    while _enclosed(text):
        text = text[1:-1].strip()
    return "boolean" if _is_condition(text) else _expression_kind(text, columns)


def _expression_kind(text: str, columns: dict[str, str]) -> str | None:
    """What an expression that is no condition gives, where its text says."""
    parts, operators = _operands(text)
    if not operators and text[:1] in ("-", "+") and _literal_kind(text) is None:
        parts, operators = [text[1:]], {text[0]}  # a sign: the kind of what it signs
    if operators:
        return _arithmetic_kind(parts, operators, columns)
    if (cast := _CAST.fullmatch(text)) is not None:
        return _CAST_KINDS.get(cast.group(2).lower())
    if (call := _CALL.fullmatch(text)) is not None:
        name = call.group(1).lower()
        if name in _SAME_KIND:
            first = call.group(2).split(",", 1)[0]
            return _kind(first, columns)
        return _FUNCTION_KINDS.get(name)
    literal = _literal_kind(text)
    if literal is not None:
        return literal
    name = text.rsplit(".", 1)[-1]
    return columns.get((name[1:-1].replace('""', '"') if name.startswith('"') else name).lower())


_NOT_COMPARISONS = re.compile(r"->>?|<<|>>")  # SQLite's JSON and bit-shift operators
_COMPARISON = re.compile(
    r"[<>=!]|\b(?:AND|OR|NOT|IS|IN|LIKE|ILIKE|GLOB|REGEXP|MATCH|BETWEEN|EXISTS)\b", re.IGNORECASE
)
_CASE = re.compile(r"\bCASE\b(?:(?!\bCASE\b).)*?\bEND\b", re.IGNORECASE | re.DOTALL)


def _is_condition(text: str) -> bool:
    """Whether an expression is a comparison or a condition (`a > b`, `x IS NULL`, `NOT y`,
    `a = ANY (...)`) outside its parentheses and CASE ... END: PostgreSQL's boolean, which
    SQLite gives as 1 or 0."""
    masked, depth, top = _NOT_COMPARISONS.sub("  ", _masked(text)), 0, []
    for char in masked:
        depth += (char == "(") - (char == ")")
        top.append(char if depth == 0 and char not in "()" else " ")
    outer = "".join(top)
    while (without := _CASE.sub(" ", outer)) != outer:
        outer = without
    return _COMPARISON.search(outer) is not None


def _literal_kind(text: str) -> str | None:
    """A literal's kind; or a timestamp's, as `timestamps` writes now() and x::timestamptz."""
    if text.lower().endswith(_TIMESTAMP_COLLATED):
        return "timestamp"
    if text.lower().startswith("pg_interval(") and text.lower().endswith(_INTERVAL_COLLATED):
        return "interval"
    if re.fullmatch(r"-?[0-9]+", text):
        return "long"
    if re.fullmatch(r"-?[0-9]*\.[0-9]+(?:[eE][-+]?[0-9]+)?", text):
        return "double"
    return "string" if text.startswith("'") else None


_AS_ALIAS = re.compile(r'\s+AS\s+("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_]*)\s*$', re.IGNORECASE)
_BARE_ALIAS = re.compile(r'(?<=[\w)"\'\]])\s+("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_]*)\s*$')
# words that end an expression or join two, never a bare alias (`x IS NOT NULL`, `CASE ... END`)
_NOT_ALIASES = frozenset(
    "end null true false and or not is in like ilike glob regexp match between escape isnull notnull"
    " collate then else when case asc desc distinct all".split()
)
_STAR = re.compile(r'\s*(?:(?:[A-Za-z_][A-Za-z0-9_]*|"(?:[^"]|"")+")\.)?\*\s*')
_NAME = r'(?:[A-Za-z_][A-Za-z0-9_$]*|"(?:[^"]|"")+")'
_COLUMN_REF = re.compile(rf"(?:{_NAME}\s*\.\s*)*({_NAME})")
_CALLED = re.compile(rf"(?:{_NAME}\s*\.\s*)*({_NAME})\s*\(")
_TYPED_LITERAL = re.compile(r"(interval|date|timestamptz|timestamp|time)\s*'[^']*'", re.IGNORECASE)
_TYPE_NAMES = {
    **dict.fromkeys(("int", "integer", "int4"), "int4"),
    **dict.fromkeys(("smallint", "int2"), "int2"),
    **dict.fromkeys(("bigint", "int8"), "int8"),
    **dict.fromkeys(("real", "float4"), "float4"),
    **dict.fromkeys(("float", "float8", "double", "double precision"), "float8"),
    **dict.fromkeys(("numeric", "decimal"), "numeric"),
    **dict.fromkeys(("boolean", "bool"), "bool"),
    **dict.fromkeys(("varchar", "character varying"), "varchar"),
    **dict.fromkeys(("timestamptz", "timestamp with time zone"), "timestamptz"),
    **dict.fromkeys(("timestamp", "timestamp without time zone"), "timestamp"),
}
_UNNAMED = "?column?"
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_$]*")


def aliased(item: str) -> tuple[str, str | None]:
    """A SELECT list's item as its expression and its alias as written, None when it has none:
    `x AS y`, `x y`, `x "Y"`; not `x IS NOT NULL`, `CASE ... END` or `a + b`."""
    masked = _masked(item)
    found = _AS_ALIAS.search(masked)
    if found is None:
        found = _BARE_ALIAS.search(masked)
        last = re.search(r"([A-Za-z_]+)\s*$", masked[: found.start()]) if found is not None else None
        if (
            found is None
            or found.group(1).lower() in _NOT_ALIASES
            or (last and last.group(1).lower() in _NOT_ALIASES)
        ):
            return item.strip(), None
    return item[: found.start()].strip(), item[found.start(1) : found.end(1)]


def _written(name: str) -> str:
    """An identifier as SQLite names a column by it: a quoted one unquoted, any other as written."""
    return name[1:-1].replace('""', '"') if name.startswith('"') else name


def pg_name(expression: str) -> str:
    """The name PostgreSQL gives the column of a SELECT list's item without an alias: a column's
    name, a function's (`count(*)`: count), a cast's operand's or its type's (`'1'::int`:
    int4), `case`, `exists`, `array`, a scalar subquery's first column's, else `?column?`."""
    name, strength = _figured(expression)
    return name if strength else _UNNAMED


def _figured(expression: str) -> tuple[str, int]:  # noqa: PLR0911, PLR0912 - PostgreSQL's cases, one by one
    """PostgreSQL's name for an expression, with how strongly it names it: 2 a column's or a
    function's, 1 a cast's type or `case`, 0 none."""
    text = expression.strip()
    while _enclosed(text):
        inner = text[1:-1].strip()
        if re.match(r"(?:SELECT|WITH)\b", inner, re.IGNORECASE):  # a scalar subquery: its first column
            items = select_list(inner)
            if not items:
                return _UNNAMED, 0
            first, alias = aliased(items[0])
            return (identifier(alias), 2) if alias is not None else _figured(first)
        text = inner
    masked = _masked(text)
    if (column := _COLUMN_REF.fullmatch(masked)) is not None:  # the commonest: a name
        word = identifier(text[column.start(1) : column.end(1)])
        return (_UNNAMED, 0) if word == "null" else ("bool", 1) if word in ("true", "false") else (word, 2)
    cast = _last_cast(masked) if "::" in masked else None
    if cast is not None:
        name, strength = _figured(text[:cast])
        if strength > 1:
            return name, strength
        type_name = re.sub(r"\s*(\(.*\)|\[\s*\])\s*$", "", " ".join(text[cast + 2 :].lower().split()))
        return _TYPE_NAMES.get(type_name, type_name.rsplit(".", 1)[-1]), 1
    if (collated := re.search(r"\s+COLLATE\s+\S+\s*$", masked, re.IGNORECASE)) is not None:
        return _figured(text[: collated.start()])
    if (typed := _TYPED_LITERAL.fullmatch(masked)) is not None:  # interval '1 day'
        return _TYPE_NAMES.get(typed.group(1).lower(), typed.group(1).lower()), 1
    if _whole(masked, r"CAST\s*\(", ")") and (called := _CAST.fullmatch(text)) is not None:
        name, strength = _figured(called.group(1))
        type_name = called.group(2).lower()
        return (name, strength) if strength > 1 else (_TYPE_NAMES.get(type_name, type_name), 1)
    if _whole(masked, r"CASE\b", "END"):
        return "case", 1
    if _whole(masked, r"ARRAY\s*\[", "]"):
        return "array", 2
    if _whole(masked, r"EXISTS\s*\(", ")"):
        return "exists", 2
    if (call := _CALLED.match(masked)) is not None:
        close = arrays.closing(masked, call.end() - 1, ")")
        rest = masked[close + 1 :].strip() if close > 0 else "?"
        if not rest or re.match(r"(?:OVER|FILTER)\b", rest, re.IGNORECASE):
            word = identifier(text[call.start(1) : call.end(1)])
            return word, 2
    return _UNNAMED, 0


def _whole(masked: str, opening: str, close: str) -> bool:
    """Whether an expression is one construct: `opening` at its start, and the bracket (or the
    CASE's END) it opens closing at its end (`CAST(...)`, not `CAST(a AS int) + CAST(b AS int)`)."""
    found = re.match(opening, masked, re.IGNORECASE)
    if found is None:
        return False
    if close == "END":
        depth = 0
        for word in re.finditer(r"\b(CASE|END)\b", masked, re.IGNORECASE):
            depth += 1 if word.group(1).upper() == "CASE" else -1
            if depth == 0:
                return word.end() == len(masked)
        return False
    return arrays.closing(masked, found.end() - 1, close) == len(masked) - 1


def _last_cast(masked: str) -> int | None:
    """Where the outermost `::` of an expression is, when it is the expression's last operator."""
    depth, found = 0, None
    for i, char in enumerate(masked):
        depth += (char == "(") - (char == ")")
        if depth == 0 and masked.startswith("::", i) and masked[i - 1 : i] != ":":
            found = i
    if found is None or re.search(r"[-+*/%<>=|]|\b(?:AND|OR|IS|NOT)\b", masked[found + 2 :], re.IGNORECASE):
        return None
    return found


def pg_names(sql: str, names: list[str]) -> list[str]:
    """The result's column names as PostgreSQL gives them: an alias as written (unquoted), an
    item without one named by `pg_name`; `names` (SQLite's) where the SELECT list is not the
    result's columns one for one (`*`, a set operation of several lists, VALUES)."""
    if all(_PLAIN_NAME.fullmatch(name) and name not in ("true", "false", "null") for name in names):
        return names  # columns by their names, or aliases in lower case: PostgreSQL's names too
    items = _aligned(_without_comments(sql).rstrip().rstrip(";"), len(names))
    if items is None:
        return names
    return [identifier(alias) if (alias := aliased(item)[1]) is not None else pg_name(item) for item in items]


def _without_comments(sql: str) -> str:
    """`sql` with each comment a space; strings and quoted names as they are."""
    return _MASKED.sub(lambda m: " " if m.group(0)[0] in "-/" else m.group(0), sql)


def _aligned(sql: str, count: int) -> list[str] | None:
    """The items of the main SELECT list of `sql` when they are the result's `count` columns, one
    for one (none is a `*`)."""
    items = select_list(sql)
    if len(items) != count or any(_STAR.fullmatch(_masked(item)) for item in items):
        return None
    return items


def computed_kinds(sql: str, columns: dict[str, str]) -> dict[str, str]:
    """The types of the columns the main SELECT of `sql` computes, by the name SQLite gives each
    (its alias, or its text), where the expression says (`columns`: each view column's type by
    its name in lower case)."""
    kinds: dict[str, str] = {}
    for item in select_list(sql):
        expression, alias = aliased(item)
        if (kind := _kind(expression, columns)) is not None:
            kinds[_written(alias) if alias else item.strip()] = kind
    return kinds


_SUBQUERY = re.compile(r"\(\s*(?:SELECT|WITH|VALUES)\b", re.IGNORECASE)


def subquery_kinds(sql: str, columns: dict[str, str]) -> dict[str, str]:
    """The timestamps and dates that the subqueries and common table expressions of `sql`
    compute, by the names they give them in lower case (`(SELECT max(hour_start) AS last ...)`:
    `last`), inner ones first, so that a query over them types them as it types a view's
    columns (`columns`)."""
    if "(" not in sql:
        return {}
    masked = _masked(sql)
    spans = sorted(
        (close, found.start())
        for found in _SUBQUERY.finditer(masked)
        if (close := arrays.closing(masked, found.start(), ")")) > found.start()
    )
    known, timed = dict(columns), {}
    for close, start in spans:
        for name, kind in computed_kinds(sql[start + 1 : close], known).items():
            if kind in _TIME_KINDS:
                known[name.lower()] = timed[name.lower()] = kind
    return timed


class _Unlike(Exception):
    """A value SQLite's typed column would give otherwise than this conversion does."""


def _as_sqlite(value: Any, kind: str) -> Any:
    """A JSON value as the view's typed column (`store.column_sql`) gives it: CAST to INTEGER or
    REAL, JSON true and false as 1 and 0; _Unlike for what is better left to SQLite."""
    if value is None:
        return None
    if isinstance(value, dict | list):
        raise _Unlike
    if kind in ("int", "long"):
        if not isinstance(value, int | float):
            raise _Unlike
        return int(value)
    if kind == "double":
        if not isinstance(value, int | float):
            raise _Unlike
        return float(value)
    return int(value) if isinstance(value, bool) else value


def _authorize(views: set[str], action: int, arg1: str | None, arg2: str | None, db: str | None) -> int:
    if action == sqlite3.SQLITE_READ:
        # A view's table reads the store's rows; a common table expression is no database's.
        allowed = (
            db is None
            or arg1 == "rows"
            or arg1 in views
            or arg1 in _INFORMATION_VIEWS
            or arg1 in _TABLE_FUNCTIONS
        )
        return sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in _BLOB_FUNCTIONS else sqlite3.SQLITE_OK
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def _missing(err: sqlite3.DatabaseError, loading: dict[str, str]) -> str | None:
    """The view still loading that `err` says is no table: one whose rows have not come yet,
    before its first marker has made it a table."""
    text = str(err)
    if not text.startswith("no such table: "):
        return None
    return loading.get(text.removeprefix("no such table: ").rpartition(".")[2].lower())


# SQLite's error text -> PostgreSQL's SQLSTATE, by how the text starts (first match).
_SQLSTATES = (
    ("no such table", "42P01"),
    ("no such column", "42703"),
    ("no such function", "42883"),
    ("incomplete input", "42601"),
    ("string or blob too big", "54000"),
)


def _translated(err: sqlite3.DatabaseError, timeout_s: float) -> SqlError:
    text = str(err)
    refused, _REFUSED.error = getattr(_REFUSED, "error", None), None
    if isinstance(refused, SqlError) and text.startswith("user-defined function raised exception"):
        return refused
    if text == "interrupted":
        return SqlError("57014", f"the query ran longer than {timeout_s:g} s (VIEWS_PG_TIMEOUT_S)")
    if text.startswith("not authorized") or text.endswith("is prohibited"):
        return SqlError("42501", "the query reads something other than the views, or writes: refused")
    if "syntax error" in text:
        return SqlError("42601", text)
    code = next((code for start, code in _SQLSTATES if text.startswith(start)), "42000")
    return SqlError(code, text.replace("no such table", "no such view"))


def pg_column(name: str, kind: str) -> Column:
    pg_type, oid, size = PG_TYPES.get(kind, PG_TYPES["string"])
    return Column(name, pg_type, oid, size)


def _kind_of(rows: list[Any], index: int) -> str:
    """A computed column's type from its first non-null value."""
    for row in rows:
        value = row[index]
        if value is not None:
            return "long" if isinstance(value, int) else "double" if isinstance(value, float) else "string"
    return "string"


def _text(value: Any, pg_type: str) -> str | None:
    """A value in PostgreSQL's text format for its column's type."""
    if pg_type == "bool" and value is not None:
        return "t" if value in (1, "true", True) else "f"
    if value is None or type(value) is str:  # most values: first, as a COPY asks this of every one
        return timestamps.pg_text(value) if value and pg_type == "timestamptz" else value
    if isinstance(value, float):
        return numbers.float8_text(value)
    if isinstance(value, bytes):
        return arrays.text(value) if arrays.is_array(value) else "\\x" + value.hex()
    return str(value)
