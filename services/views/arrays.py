"""PostgreSQL's one-dimensional arrays and functions in FROM, over SQLite, for `sql`.

What tools ask of PostgreSQL as they list tables and columns (Grafana's query builder reads the
schemas of `search_path` with `string_to_array`, `generate_series` and `s[i]`, and a table's
columns with `parse_ident(...)[1]`), and what users write by hand (`ARRAY[1, 2]`,
`x = ANY(ARRAY[...])`, `unnest(...)`), on SQLite, which has no arrays:

- an array is a BLOB: `_MAGIC` then its elements as JSON (text, numbers or null), shown in
  PostgreSQL's text format (`{a,b,"c d",NULL}`); no view column is one;
- `x[i]` (1-based, null out of range) and `ARRAY[...]` become calls of `pg_subscript` and
  `pg_array`; `= ANY (...)` becomes an `IN` over its elements;
- a function in a FROM list (`generate_series(1, 3) AS i`, `string_to_array(...) s`,
  `unnest(...) AS x`) becomes a subquery of the rows PostgreSQL gives for it, named as
  PostgreSQL names them (its alias, or its column list, or else the function's name). Its
  arguments cannot name the FROM items before it (SQLite has no LATERAL).
"""

import json
import re
from collections.abc import Callable
from typing import Any

from services.views import numbers

__all__ = ["FUNCTIONS", "Refused", "closing", "is_array", "list_text", "quote_ident", "rewritten", "text"]


class Refused(ValueError):
    """A statement the rewrite cannot give SQLite, with PostgreSQL's SQLSTATE for it."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


_MAGIC = b"\x00pg-array\x00"


def _array(elements: list[Any]) -> bytes:
    return _MAGIC + json.dumps(elements, ensure_ascii=False, separators=(",", ":")).encode()


def is_array(value: object) -> bool:
    return isinstance(value, bytes) and value.startswith(_MAGIC)


def _elements(value: object) -> list[Any] | None:
    if not is_array(value):
        return None
    elements: list[Any] = json.loads(value[len(_MAGIC) :])  # type: ignore[index]
    return elements


def _element_text(element: Any) -> str:
    if element is None:
        return "NULL"
    shown = numbers.float8_text(element) if isinstance(element, float) else str(element)
    if shown == "" or shown.upper() == "NULL" or re.search(r'[{},"\\\s]', shown):
        return '"' + shown.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return shown


def text(value: bytes) -> str:
    """An array in PostgreSQL's text format: `{a,b,"c d",NULL}`."""
    return list_text(_elements(value) or [])


def list_text(elements: list[Any]) -> str:
    """Values as an array in PostgreSQL's text format (a driver's binary array parameter, as the
    text one it could have sent)."""
    return "{" + ",".join(_element_text(e) for e in elements) + "}"


def _pg_array(*elements: Any) -> bytes:
    if any(isinstance(e, bytes) for e in elements):
        raise ValueError("arrays of arrays are not served: one dimension only")
    return _array(list(elements))


def _string_to_array(value: Any, separator: Any, null: Any = None) -> bytes | None:
    if value is None:
        return None
    text_value = str(value)
    if text_value == "":
        return _array([])
    if separator is None:
        parts = list(text_value)
    elif separator == "":
        parts = [text_value]
    else:
        parts = text_value.split(str(separator))
    return _array([None if null is not None and part == str(null) else part for part in parts])


def _dimension(value: Any, dimension: Any) -> list[Any] | None:
    """The elements of an array asked of its dimension 1; None for any other or an empty one."""
    elements = _elements(value)
    return elements if elements and dimension == 1 else None


def _array_lower(value: Any, dimension: Any) -> int | None:
    return 1 if _dimension(value, dimension) else None


def _array_length(value: Any, dimension: Any) -> int | None:
    elements = _dimension(value, dimension)
    return len(elements) if elements else None


def _cardinality(value: Any) -> int | None:
    elements = _elements(value)
    return None if elements is None else len(elements)


def _subscript(value: Any, index: Any) -> Any:
    elements = _elements(value)
    if elements is None or not isinstance(index, int) or not 1 <= index <= len(elements):
        return None
    return elements[index - 1]


_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _json(value: Any) -> str | None:
    """An array's elements as JSON, for json_each (unnest, ANY). A driver's array parameter
    comes as PostgreSQL's text (`{2,4}`, psycopg's `= ANY(%s)` of a list): its elements that are
    numbers are numbers, as the column they are compared with is."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        texts = _elements(_array_in(value, "text")) or []
        numbers = [
            _typed(t, "int" if t.lstrip("-").isdigit() else "float") if t and _NUMBER.fullmatch(t) else t
            for t in texts
        ]
        return json.dumps(numbers, ensure_ascii=False)
    elements = _elements(value)
    if elements is None and value is not None:
        raise ValueError("the argument is not an array")
    return None if elements is None else json.dumps(elements, ensure_ascii=False)


_ELEMENT = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^,{}"\s][^,{}"]*?))\s*([,}])')
_INTEGERS = frozenset(("int", "integer", "int2", "int4", "int8", "smallint", "bigint"))
_FLOATS = frozenset(("float", "float4", "float8", "real", "double precision", "numeric", "decimal"))


def _typed(element: str, type_name: str) -> Any:
    try:
        if type_name in _INTEGERS:
            return int(element)
        if type_name in _FLOATS:
            return float(element)
    except ValueError:
        raise ValueError(f'invalid input syntax for type {type_name}: "{element}"') from None
    return element


def _array_in(value: Any, type_name: Any) -> bytes | None:
    """PostgreSQL's `'{1,2,NULL}'::int[]`: an array from its text, its elements of the type."""
    if value is None or is_array(value):
        return value  # type: ignore[no-any-return]
    text_value, kind = str(value).strip(), " ".join(str(type_name).lower().split())
    malformed = f'malformed array literal: "{text_value}"'
    if not (text_value.startswith("{") and text_value.endswith("}")):
        raise ValueError(malformed)
    body, elements, at = text_value[1:], [], 0
    if body[:-1].strip():
        while True:
            found = _ELEMENT.match(body, at)
            if found is None:
                raise ValueError(malformed)
            quoted, bare = found.group(1), found.group(2)
            if quoted is not None:
                elements.append(_typed(re.sub(r"\\(.)", r"\1", quoted), kind))
            else:
                elements.append(None if bare.upper() == "NULL" else _typed(bare, kind))
            at = found.end()
            if found.group(3) == "}":
                break
    if at != len(body) and body[:-1].strip():
        raise ValueError(malformed)
    return _array(elements)


_IDENT_PART = re.compile(r'\s*("(?:[^"]|"")+"|[A-Za-z_\x80-\U0010ffff][\w$\x80-\U0010ffff]*)\s*')


def _parse_ident(value: Any, strict: Any = True) -> bytes | None:
    """PostgreSQL's parse_ident: a qualified name's parts, quoted ones as written, bare ones in
    lower case."""
    if value is None:
        return None
    text_value, parts, at = str(value), [], 0
    while True:
        found = _IDENT_PART.match(text_value, at)
        if found is None:
            raise ValueError(f'string is not a valid identifier: "{text_value}"')
        part = found.group(1)
        parts.append(part[1:-1].replace('""', '"') if part.startswith('"') else part.lower())
        at = found.end()
        if at < len(text_value) and text_value[at] == ".":
            at += 1
            continue
        if at < len(text_value) and strict:
            raise ValueError(f'string is not a valid identifier: "{text_value}"')
        return _array(parts)


# The words quote_ident quotes: PostgreSQL's keywords that are not "unreserved" (reserved ones,
# those that may not name a function or a type, and those that may not name a column).
_KEYWORDS = frozenset(
    """all analyse analyze and any array as asc asymmetric authorization between bigint binary bit
    boolean both case cast char character check coalesce collate collation column concurrently
    constraint create cross current_catalog current_date current_role current_schema current_time
    current_timestamp current_user dec decimal default deferrable desc distinct do else end except
    exists extract false fetch float for foreign freeze from full grant greatest group grouping
    having ilike in initially inner inout int integer intersect interval into is isnull join
    lateral leading least left like limit localtime localtimestamp national natural nchar none not
    notnull null nullif numeric offset on only or order out outer overlaps overlay placing position
    precision primary real references returning right row select session_user setof similar
    smallint some substring symmetric system_user table tablesample then time timestamp to
    trailing treat trim true union unique user using values varchar variadic verbose when where
    window with""".split()
)


def quote_ident(name: Any) -> str | None:
    """PostgreSQL's quote_ident: `name` as it must be written in SQL, quoted when it is not a
    lower-case name or is a keyword."""
    if name is None:
        return None
    text_value = str(name)
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", text_value) and text_value not in _KEYWORDS:
        return text_value
    return '"' + text_value.replace('"', '""') + '"'


def _quote_literal(value: Any) -> str | None:
    if value is None:
        return None
    text_value = str(value)
    quoted = "'" + text_value.replace("'", "''").replace("\\", "\\\\") + "'"
    return ("E" + quoted) if "\\" in text_value else quoted


# Whether a statement may have a function in a FROM list (after FROM or JOIN, or a comma after a
# FROM): the others are not read token by token.
_MAYBE_FROM_CALL = re.compile(
    r"\b(?:FROM|JOIN)(?:\s|\s.*,\s*)(?:LATERAL\s+)?[A-Za-z_]\w*\s*\(", re.IGNORECASE | re.DOTALL
)
_MAX_BRACKETS = 1_000  # each is rewritten in a pass over the statement: bounded
Masking = Callable[[str], str]
OperandStart = Callable[[str, int], int]


_BRACKETS = re.compile(r"[\[\]()]")


def closing(masked: str, opening: int, close: str) -> int:
    """Where the bracket that closes the one at `opening` is; -1 if none does."""
    stack: list[str] = []
    for found in _BRACKETS.finditer(masked, opening):
        char = found.group(0)
        if char in "([":
            stack.append(")" if char == "(" else "]")
        elif not stack or char != stack.pop():
            return -1
        elif not stack:
            return found.start() if char == close else -1
    return -1


_ARRAY_WORD = re.compile(r"(?<![\w.$\"])ARRAY\s*\[", re.IGNORECASE)


def _constructors(sql: str, masking: Masking) -> str:
    """`ARRAY[a, b]` as `pg_array(a, b)`, innermost first."""
    while True:
        masked = masking(sql)
        found = [m for m in _ARRAY_WORD.finditer(masked)]
        if not found:
            return sql
        last = found[-1]
        close = closing(masked, last.end() - 1, "]")
        if close < 0:
            return sql  # SQLite says what is wrong
        sql = sql[: last.start()] + "pg_array(" + sql[last.end() : close] + ")" + sql[close + 1 :]


# A subscript's bracket: after a name, a string, a group or a call; not `text[]`, a type's suffix.
_OPENING = re.compile(r"(?<=[\w\")'])\s*(\[)(?!\s*\])")


def _subscripts(sql: str, masking: Masking, operand_start: OperandStart) -> str:
    """`x[i]` as `pg_subscript(x, i)`, the last first (so that an inner one is done before the
    subscript of what contains it)."""
    while True:
        masked = masking(sql)
        openings = [found.start(1) for found in _OPENING.finditer(masked)]
        if not openings:
            return sql
        opening = openings[-1]
        close = closing(masked, opening, "]")
        start = operand_start(masked, opening)
        if close < 0 or start == opening or ":" in masked[opening:close]:
            return sql  # a slice, or nothing to subscript: SQLite says what is wrong
        operand, index = sql[start:opening].strip(), sql[opening + 1 : close].strip()
        sql = f"{sql[:start]}pg_subscript({operand}, {index}){sql[close + 1 :]}"


_ANY = re.compile(r"(?<![<>!=])(=|<>|!=)\s*(ANY|SOME|ALL)\s*\(", re.IGNORECASE)


def _any(sql: str, masking: Masking) -> str:
    """`x = ANY (array)` as `x IN (its elements)`, `x <> ALL (array)` as `x NOT IN (...)`; the
    other forms (`= ALL`, `<> ANY`) are left to SQLite to refuse."""
    masked = masking(sql)
    for found in reversed(list(_ANY.finditer(masked))):
        operator, word = found.group(1), found.group(2).upper()
        negated = operator in ("<>", "!=")
        if negated != (word == "ALL"):
            continue
        close = closing(masked, found.end() - 1, ")")
        if close < 0:
            continue
        inner = sql[found.end() : close].strip()
        if re.match(r"(?:SELECT|WITH|VALUES)\b", inner, re.IGNORECASE):
            replacement = f"{'NOT IN' if negated else 'IN'} ({inner})"
        else:
            elements = f"SELECT value FROM json_each(pg_array_json({inner}))"  # noqa: S608 (the query's own text)
            replacement = f"{'NOT IN' if negated else 'IN'} ({elements})"
        sql = sql[: found.start()] + replacement + sql[close + 1 :]
    return sql


# Words that end a FROM item or start the clause after it: never an alias.
_NOT_ALIASES = frozenset(
    """where group having order limit offset fetch window union intersect except join inner left
    right full cross natural on using returning for with""".split()
)
_ALIAS = re.compile(r"\s*(?:(AS)\s+)?(\"(?:[^\"]|\"\")+\"|[A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)
_COLUMNS = re.compile(r"\s*\(\s*(\"(?:[^\"]|\"\")+\"|[A-Za-z_][A-Za-z0-9_]*)\s*(?:,[^)]*)?\)")
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*|\S")
_CLAUSES = frozenset(
    (
        "SELECT FROM JOIN ON USING WHERE GROUP HAVING ORDER LIMIT OFFSET UNION INTERSECT EXCEPT WINDOW VALUES"
    ).split()
)
_FROM_CLAUSES = frozenset(("FROM", "JOIN", "ON", "USING"))
# Words after which a parenthesis opens a group or a subquery, not a call's arguments.
_BEFORE_GROUPS = frozenset(
    """AND OR NOT IN EXISTS ANY ALL SOME AS ON USING FROM JOIN LATERAL SELECT WHERE HAVING VALUES
    WHEN THEN ELSE CASE BETWEEN LIKE IS UNION INTERSECT EXCEPT WITH RECURSIVE BY""".split()
)


def _from_calls(masked: str) -> list[tuple[int, int, int]]:
    """The function calls that are items of a FROM list (after FROM, JOIN or a comma of one,
    LATERAL or not), in one pass: (where the item starts, where its name starts, its `(`). A
    FROM inside a call's parentheses (`extract(epoch FROM t)`, `substring(s FROM 2)`) starts
    no list."""
    calls, clauses = [], ["SELECT"]  # the clause each open parenthesis is in ("CALL": a call's)
    tokens: list[tuple[str, int]] = []  # the last three: (text, where), a call's FROM as "IN CALL"
    for token in _TOKEN.finditer(masked):
        text, at = token.group(0), token.start()
        upper = text.upper()
        if text == "(":
            named = bool(tokens) and (tokens[-1][0][:1].isalpha() or tokens[-1][0][:1] == "_")
            if named:
                before = [t for t, _ in tokens[:-1]]
                item = tokens[-1][1]
                if before and before[-1].upper() == "LATERAL":
                    before, item = before[:-1], tokens[-2][1]
                last = before[-1].upper() if before else ""
                if last in ("FROM", "JOIN") or (last == "," and clauses[-1] in _FROM_CLAUSES):
                    calls.append((item, tokens[-1][1], at))
            called = named and tokens[-1][0].upper() not in _BEFORE_GROUPS
            clauses.append("CALL" if called else "SELECT")
        elif text == ")":
            if len(clauses) > 1:
                clauses.pop()
        elif upper in _CLAUSES:
            if clauses[-1] == "CALL" and upper != "SELECT":
                text = "IN CALL"
            else:
                clauses[-1] = upper
        tokens = [*tokens[-2:], (text, at)]
    return calls


def _split(masked: str, text: str) -> list[str]:
    """The comma-separated parts of `text` (its masked form `masked`), at its top level."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(masked):
        depth += (char in "([") - (char in ")]")
        if char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [part for part in parts if part] if any(parts) else []


def _series(arguments: list[str], column: str) -> str:
    if len(arguments) not in (2, 3):
        raise Refused("42883", "generate_series takes a start, a stop and a step (numbers)")
    start, stop = f"({arguments[0]})", f"({arguments[1]})"
    step = f"({arguments[2]})" if len(arguments) == 3 else "1"
    return (
        f'WITH RECURSIVE "_series"(v) AS (SELECT {start} WHERE pg_series_step({step}) IS NOT NULL '  # noqa: S608
        f'UNION ALL SELECT v + {step} FROM "_series" WHERE CASE WHEN {step} > 0 THEN v + {step} <= {stop} '
        f'ELSE v + {step} >= {stop} END) SELECT v AS {column} FROM "_series" '
        f"WHERE CASE WHEN {step} > 0 THEN v <= {stop} ELSE v >= {stop} END"
    )


def _series_step(step: Any) -> int | float:
    if step == 0:
        raise ValueError("step size cannot equal zero")
    if isinstance(step, bool) or not isinstance(step, int | float):
        raise ValueError("generate_series is served for numbers only (not timestamps)")
    return step


def _from_item(name: str, arguments: str, masked_arguments: str, column: str) -> str:
    """The subquery that gives the rows PostgreSQL gives for `name(arguments)` in a FROM list."""
    lowered = name.lower()
    if lowered == "generate_series":
        return _series(_split(masked_arguments, arguments), column)
    if lowered == "unnest":
        return f"SELECT value AS {column} FROM json_each(pg_array_json({arguments}))"  # noqa: S608
    return f"SELECT {name}({arguments}) AS {column}"


def _functions_in_from(sql: str, masking: Masking) -> str:
    """Each function call in a FROM list as the subquery of its rows, the last first."""
    masked = masking(sql)
    for item, name_at, opening in reversed(_from_calls(masked)):
        close = closing(masked, opening, ")")
        name = sql[name_at:opening].strip()
        if close < 0 or name.upper() in ("SELECT", "VALUES", "WITH", "JSON_EACH", "JSON_TREE"):
            continue
        end, alias, column = close + 1, name.lower(), None
        named = _ALIAS.match(masked, end)
        if named is not None and (named.group(1) or named.group(2).lower() not in _NOT_ALIASES):
            alias, end = sql[named.start(2) : named.end(2)], named.end()
            listed = _COLUMNS.match(masked, end)
            if listed is not None:
                column, end = sql[listed.start(1) : listed.end(1)], listed.end()
        quoted_alias = alias if alias.startswith('"') else f'"{alias}"'
        body = _from_item(name, sql[opening + 1 : close], masked[opening + 1 : close], column or quoted_alias)
        sql = f"{sql[:item]}({body}) AS {quoted_alias}{sql[end:]}"
        masked = masking(sql)
    return sql


def rewritten(sql: str, masking: Masking, operand_start: OperandStart) -> str:
    """`sql` with PostgreSQL's arrays, `= ANY (...)` and functions in FROM written for SQLite
    (`masking` blanks strings and comments keeping the length; `operand_start` finds where the
    operand that ends at a position starts); Refused for what it cannot give."""
    if "[" not in sql and "(" not in sql:
        return sql
    if sql.count("[") > _MAX_BRACKETS:
        raise Refused("54001", f"statement too complex: more than {_MAX_BRACKETS} subscripts and arrays")
    if "[" in sql:
        sql = _subscripts(_constructors(sql, masking), masking, operand_start)
    if _MAYBE_FROM_CALL.search(sql) is not None:
        sql = _functions_in_from(sql, masking)
    if re.search(r"\b(?:ANY|SOME|ALL)\s*\(", sql, re.IGNORECASE):
        sql = _any(sql, masking)
    return sql


# The functions, as SQLite is given them: (name, number of arguments (-1: any), the function,
# the SQLSTATE of its refusal).
FUNCTIONS: tuple[tuple[str, int, Callable[..., Any], str], ...] = (
    ("pg_array", -1, _pg_array, "0A000"),
    ("pg_subscript", 2, _subscript, "22000"),
    ("pg_array_json", 1, _json, "42804"),
    ("pg_series_step", 1, _series_step, "22023"),
    ("pg_array_in", 2, _array_in, "22P02"),
    ("string_to_array", 2, _string_to_array, "22000"),
    ("string_to_array", 3, _string_to_array, "22000"),
    ("array_lower", 2, _array_lower, "22000"),
    ("array_upper", 2, _array_length, "22000"),
    ("array_length", 2, _array_length, "22000"),
    ("cardinality", 1, _cardinality, "22000"),
    ("parse_ident", 1, _parse_ident, "22023"),
    ("parse_ident", 2, _parse_ident, "22023"),
    ("quote_ident", 1, quote_ident, "22000"),
    ("quote_literal", 1, _quote_literal, "22000"),
)
