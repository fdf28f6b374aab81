"""The extended query protocol's pieces, for `pgwire`: a client prepares a statement (Parse),
binds its parameters into a portal (Bind), and runs it (Execute), in text or binary formats.
This module reads those messages, turns the parameters into the values SQLite binds to `$1`,
`$2`... and writes rows in the formats the client asked for.

A parameter the client does not declare takes the type of the view's column it is compared
with, where the statement's text says (`inferred_types`). Parameters in text are read by their
type: an integer type as an integer, a floating one as a float, `numeric` as an integer when it
is whole, bool as 1 or 0; one of no type is bound as text, which SQLite compares with a view's
typed column by the column's type (a timestamp column compares by instant: `timestamps`).
Binary parameters are read for bool, the integer and floating types, numeric, the text types,
timestamptz, timestamp (taken as UTC) and date; any other binary type is refused with SQLSTATE
0A000, never guessed.
"""

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from services.views import arrays, timestamps
from services.views.cursors import Rows
from services.views.sql import PARAMETER, PG_TYPES, Column, Params, Result, SqlError

__all__ = [
    "MAX_PARAMETERS",
    "Bind",
    "Parse",
    "Portal",
    "Statement",
    "bound",
    "data_rows",
    "inferred_types",
    "parameter_count",
    "parameter_description",
    "read_bind",
    "read_cstr",
    "read_parse",
    "row_description",
]

TEXT, BINARY = 0, 1
_BOOL, _INT8, _INT4, _TEXT, _FLOAT8 = (
    PG_TYPES[kind][1] for kind in ("boolean", "long", "int", "string", "double")
)
_INT2, _FLOAT4, _NUMERIC = 21, 700, 1700  # no view's column has these; drivers send them
_TIMESTAMPTZ, _DATE = PG_TYPES["timestamp"][1], PG_TYPES["date"][1]
_TIMESTAMP = 1114  # without a zone: no view's column has it; a driver may send one (taken as UTC)
_TEXTS = {0, 18, 19, 25, 1042, 1043}  # unknown, char, name, text, bpchar, varchar
_INTEGERS = {_INT2: "!h", _INT4: "!i", _INT8: "!q"}
_FLOATS = {_FLOAT4: "!f", _FLOAT8: "!d"}
# Each type's array type: `$1::int[]` is declared so, and pgx or Npgsql then send a list in binary.
_ARRAY_OF = {
    _BOOL: 1000,
    _INT2: 1005,
    _INT4: 1007,
    _TEXT: 1009,
    _INT8: 1016,
    _FLOAT4: 1021,
    _FLOAT8: 1022,
    _TIMESTAMP: 1115,
    _DATE: 1182,
    _TIMESTAMPTZ: 1185,
    _NUMERIC: 1231,
}
_ELEMENT_OF = {array: element for element, array in _ARRAY_OF.items()} | {1015: 1043}  # varchar[]
_TRUE = {"t", "true", "1", "yes", "on", "y"}
_FALSE = {"f", "false", "0", "no", "off", "n"}


@dataclass(frozen=True)
class Parse:
    name: str
    sql: str
    types: tuple[int, ...]  # the parameters' type oids the client declared (0: not declared)


@dataclass(frozen=True)
class Bind:
    portal: str
    statement: str
    formats: tuple[int, ...]  # the parameters' formats: none (all text), one for all, or one each
    values: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]


@dataclass(frozen=True)
class Statement:
    sql: str
    types: tuple[int, ...]  # one per parameter, as declared (0: not declared)

    @property
    def size(self) -> int:
        return len(self.sql) + 4 * len(self.types)


@dataclass
class Portal:
    """A statement with its parameters bound, and once run, its rows and how many went out
    (`result`), or, executed with a row limit, the stream its rows are read from (`rows`).
    `described`: the columns the client was told its statement gives, which its rows then keep
    (a computed column's type from the statement's text, not from the values found)."""

    statement: Statement
    params: Params
    result_formats: tuple[int, ...]
    described: tuple[Column, ...] | None = None
    result: Result | None = None
    sent: int = 0
    rows: Rows | None = None  # read from one snapshot a page at a time, once executed with a row limit
    # Opened by a Describe past VIEWS_PG_MAX_ROWS, for its types: an Execute with a row limit reads it
    ahead: Rows | None = None

    def close(self) -> None:
        """Its streams' snapshots let go, if it has any."""
        for rows in (self.rows, self.ahead):
            if rows is not None:
                rows.close()
        self.rows = self.ahead = None


def read_cstr(body: bytes, at: int) -> tuple[str, int]:
    """The NUL-ended UTF-8 string at `at`, and where the next field starts."""
    end = body.find(b"\0", at)
    if end < 0:
        raise SqlError("08P01", "a message ends inside a string")
    try:
        return body[at:end].decode(), end + 1
    except UnicodeDecodeError:
        raise SqlError("22021", "a string that is not valid UTF-8") from None


def _int16s(body: bytes, at: int) -> tuple[tuple[int, ...], int]:
    (count,) = struct.unpack_from("!h", body, at)
    if count < 0:
        raise SqlError("08P01", "a negative count")
    return struct.unpack_from(f"!{count}h", body, at + 2), at + 2 + 2 * count


def read_parse(body: bytes) -> Parse:
    try:
        name, at = read_cstr(body, 0)
        sql, at = read_cstr(body, at)
        (count,) = struct.unpack_from("!h", body, at)
        types = struct.unpack_from(f"!{max(count, 0)}I", body, at + 2)
    except struct.error:
        raise SqlError("08P01", "a Parse message shorter than it says") from None
    return Parse(name, sql, tuple(types))


def read_bind(body: bytes) -> Bind:
    try:
        portal, at = read_cstr(body, 0)
        statement, at = read_cstr(body, at)
        formats, at = _int16s(body, at)
        (count,) = struct.unpack_from("!h", body, at)
        at += 2
        values: list[bytes | None] = []
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from("!i", body, at)
            at += 4
            if length < 0:
                values.append(None)
                continue
            if at + length > len(body):
                raise struct.error
            values.append(body[at : at + length])
            at += length
        result_formats, at = _int16s(body, at)
    except struct.error:
        raise SqlError("08P01", "a Bind message shorter than it says") from None
    return Bind(portal, statement, formats, tuple(values), result_formats)


MAX_PARAMETERS = 32_767  # what a Bind message can count


def parameter_count(sql: str, declared: Sequence[int]) -> int:
    """How many parameters a statement takes: its highest `$n`, or more when declared."""
    count = max([len(declared), *(int(m.group(1)) for m in PARAMETER.finditer(sql))])
    if count > MAX_PARAMETERS:
        raise SqlError("54000", f"more than {MAX_PARAMETERS} parameters")
    return count


_NAME = r'(?:"((?:[^"]|"")+)"|([A-Za-z_][A-Za-z0-9_]*))'
_OPERATOR = r"(?:==?|<>|!=|<=|>=|<|>|[-+*/%]|\|\||\s+(?:NOT\s+)?LIKE\s+)"  # compared or computed with
_COLUMN_FIRST = re.compile(_NAME + r"\s*" + _OPERATOR + r"\s*\$([1-9][0-9]*)", re.IGNORECASE)
_PARAMETER_FIRST = re.compile(r"\$([1-9][0-9]*)\s*" + _OPERATOR + r"\s*" + _NAME, re.IGNORECASE)
_BETWEEN = re.compile(
    _NAME + r"\s+(?:NOT\s+)?BETWEEN\s+\$([1-9][0-9]*)\s+AND\s+\$([1-9][0-9]*)", re.IGNORECASE
)
_IN = re.compile(_NAME + r"\s+(?:NOT\s+)?IN\s*\(([^()]*)\)", re.IGNORECASE)
_COUNTS = re.compile(r"\b(?:LIMIT|OFFSET)\s+\$([1-9][0-9]*)", re.IGNORECASE)
_CAST = re.compile(
    r"\$([1-9][0-9]*)\s*::\s*([A-Za-z_][A-Za-z0-9_]*(?:\s+(?:precision|varying))?)(\s*\[\s*\])?",
    re.IGNORECASE,
)
_CAST_TYPES = {
    **dict.fromkeys(("int", "integer", "int4"), _INT4),
    **dict.fromkeys(("bigint", "int8"), _INT8),
    **dict.fromkeys(("smallint", "int2"), _INT2),
    **dict.fromkeys(("real", "float4"), _FLOAT4),
    **dict.fromkeys(("float", "float8", "double precision"), _FLOAT8),
    **dict.fromkeys(("numeric", "decimal"), _NUMERIC),
    **dict.fromkeys(("text", "varchar", "character varying", "char", "character", "name"), _TEXT),
    **dict.fromkeys(("bool", "boolean"), _BOOL),
    "timestamptz": _TIMESTAMPTZ,
    "timestamp": _TIMESTAMP,
    "date": _DATE,
}


def inferred_types(sql: str, columns: dict[str, int]) -> dict[int, int]:
    """The types of a statement's parameters that the client left undeclared, where the text
    says: a parameter cast to a type (`$1::integer`) has it; one compared or computed with a
    view's column (`user_id = $1`, `$1 < ratings`, `ratings BETWEEN $1 AND $2`, `channel IN ($1,
    $2)`, `ratings - $1`) takes the column's type (`columns`: name, in lower case, -> type oid),
    one of LIMIT or OFFSET an int8. A driver that prepares, then encodes each value by the type
    it is told (pgx), needs it, as PostgreSQL infers it."""
    types: dict[int, int] = {}
    for number, name, array in _CAST.findall(sql):  # $1::INTEGER: the type it is cast to, first
        if (oid := _CAST_TYPES.get(" ".join(name.lower().split()))) is not None:
            types.setdefault(int(number), _ARRAY_OF.get(oid, 0) if array else oid)

    def column(quoted: str, bare: str) -> int | None:
        return columns.get((quoted.replace('""', '"') if quoted else bare).lower())

    for quoted, bare, number in _COLUMN_FIRST.findall(sql):
        if (oid := column(quoted, bare)) is not None:
            types.setdefault(int(number), oid)
    for number, quoted, bare in _PARAMETER_FIRST.findall(sql):
        if (oid := column(quoted, bare)) is not None:
            types.setdefault(int(number), oid)
    for quoted, bare, low, high in _BETWEEN.findall(sql):
        if (oid := column(quoted, bare)) is not None:
            types.setdefault(int(low), oid)
            types.setdefault(int(high), oid)
    for quoted, bare, listed in _IN.findall(sql):
        if (oid := column(quoted, bare)) is not None:
            for number in PARAMETER.findall(listed):
                types.setdefault(int(number), oid)
    for number in _COUNTS.findall(sql):
        types.setdefault(int(number), _INT8)
    return types


def parameter_description(statement: Statement) -> bytes:
    """ParameterDescription's payload: each parameter's type, text where none was declared."""
    types = [t or _TEXT for t in statement.types]
    return struct.pack(f"!h{len(types)}I", len(types), *types)


def _format(formats: Sequence[int], index: int) -> int:
    if not formats:
        return TEXT
    chosen = formats[0] if len(formats) == 1 else formats[index]
    if chosen not in (TEXT, BINARY):
        raise SqlError("22023", f"format code {chosen} is neither text (0) nor binary (1)")
    return chosen


def bound(statement: Statement, bind: Bind) -> Params:
    """The values of a Bind's parameters, by number, for SQLite."""
    if len(bind.values) != len(statement.types):
        raise SqlError(
            "08P01",
            f"bind message supplies {len(bind.values)} parameters, but the statement requires"
            f" {len(statement.types)}",
        )
    if len(bind.formats) not in (0, 1, len(bind.values)):
        raise SqlError("08P01", f"{len(bind.formats)} parameter formats for {len(bind.values)} parameters")
    params: Params = {}
    for i, (value, oid) in enumerate(zip(bind.values, statement.types, strict=True)):
        kind = _format(bind.formats, i)
        params[str(i + 1)] = None if value is None else _value(value, oid, kind, i + 1)
    return params


def _value(data: bytes, oid: int, kind: int, number: int) -> Any:
    try:
        return _binary(data, oid, number) if kind == BINARY else _text(data.decode(), oid, number)
    except (ValueError, struct.error, UnicodeDecodeError):
        raise SqlError("22P02", f"parameter ${number}: not a value of type oid {oid}") from None


def _text(text: str, oid: int, number: int) -> Any:
    if oid in _INTEGERS:
        return int(text)
    if oid in _FLOATS:
        return float(text)
    if oid == _NUMERIC:
        exact = Decimal(text)
        return int(exact) if exact == exact.to_integral_value() and exact.is_finite() else float(exact)
    if oid == _BOOL:
        word = text.strip().lower()
        if word not in _TRUE | _FALSE:
            raise SqlError("22P02", f"parameter ${number}: invalid input syntax for type boolean: {text!r}")
        return int(word in _TRUE)
    return _TIME_PARAMETERS.get(oid, str)(text)  # a time's text, marked for time arithmetic


def _binary(data: bytes, oid: int, number: int) -> Any:
    if oid in _INTEGERS:
        return struct.unpack(_INTEGERS[oid], data)[0]
    if oid in _FLOATS:
        return struct.unpack(_FLOATS[oid], data)[0]
    if oid == _BOOL:
        return int(data != b"\0")
    if oid in _TEXTS:
        return data.decode()
    if (decoded := _DECODED.get(oid)) is not None:
        value = decoded(data)
        return _TIME_PARAMETERS[oid](value) if oid in _TIME_PARAMETERS else value  # marked, as in text
    if oid in _ELEMENT_OF:
        return _binary_array(data, number)
    raise SqlError(
        "0A000", f"parameter ${number}: binary values of type oid {oid} are not served; send it as text"
    )


def _binary_array(data: bytes, number: int) -> str:
    """PostgreSQL's binary array (dimensions, a null flag, the elements' type, each dimension's
    size and lower bound, then each element's length and bytes) of one dimension, as its text
    (`{1,2}`), which the SQL reader's arrays read as a text parameter's."""
    dimensions, _nulls, element = struct.unpack_from("!iiI", data)
    if dimensions == 0:
        return "{}"
    if dimensions != 1:
        raise SqlError("0A000", f"parameter ${number}: arrays of {dimensions} dimensions are not served")
    (count,) = struct.unpack_from("!i", data, 12)
    at, elements = 20, []
    for _ in range(count):
        (length,) = struct.unpack_from("!i", data, at)
        at += 4
        elements.append(None if length < 0 else _binary(data[at : at + length], element, number))
        at += max(length, 0)
    return arrays.list_text(elements)


def _numeric(data: bytes) -> int | float:
    """PostgreSQL's binary numeric: digits in base 10,000, the first one's weight, the sign."""
    count, weight, sign, _scale = struct.unpack_from("!hhHh", data)
    digits = struct.unpack_from(f"!{count}H", data, 8)
    if sign == 0xC000:
        return float("nan")
    exact = sum((Decimal(d) * Decimal(10_000) ** (weight - i) for i, d in enumerate(digits)), Decimal(0))
    exact = -exact if sign == 0x4000 else exact
    return int(exact) if exact == exact.to_integral_value() else float(exact)


_DECODED: dict[int, Callable[[bytes], Any]] = {
    _NUMERIC: _numeric,
    _TIMESTAMPTZ: timestamps.timestamp_of_binary,
    _TIMESTAMP: timestamps.timestamp_of_binary,
    _DATE: timestamps.date_of_binary,
}
_TIME_PARAMETERS: dict[int, Callable[[str], str]] = {
    _TIMESTAMPTZ: timestamps.TimeParameter,
    _TIMESTAMP: timestamps.TimeParameter,
    _DATE: timestamps.DateParameter,
}


def row_description(columns: Sequence[Column], formats: Sequence[int] = ()) -> bytes:
    """RowDescription's payload, each column in its format (text unless asked otherwise)."""
    head = struct.pack("!H", len(columns))
    for i, c in enumerate(columns):
        head += c.name.encode().replace(b"\0", b"") + b"\0"
        head += struct.pack("!IhIhih", 0, 0, c.oid, c.size, -1, _format(formats, i))
    return head


def data_rows(result: Result, formats: Sequence[int], start: int, end: int) -> list[bytes]:
    """DataRow payloads of rows [start, end), each value in its column's format."""
    kinds = [_format(formats, i) for i in range(len(result.columns))]
    out = []
    for row in result.rows[start:end]:
        cells = [struct.pack("!H", len(row))]
        for value, column, kind in zip(row, result.columns, kinds, strict=True):
            if value is None:
                cells.append(struct.pack("!i", -1))
                continue
            try:
                data = _binary_of(value, column.oid) if kind == BINARY else value.encode()
            except ValueError:
                raise SqlError(
                    "22P02", f"column {column.name}: {value[:40]!r} is not a {column.pg_type}"
                ) from None
            cells.append(struct.pack("!i", len(data)) + data)
        out.append(b"".join(cells))
    return out


def _binary_of(text: str, oid: int) -> bytes:
    """A value in PostgreSQL's text format as its type's binary format."""
    if oid in _INTEGERS:
        return struct.pack(_INTEGERS[oid], int(text))
    if oid in _FLOATS:
        return struct.pack(_FLOATS[oid], float(text))
    if oid == _BOOL:
        return b"\x01" if text == "t" else b"\x00"
    if oid == _TIMESTAMPTZ:
        return timestamps.binary_timestamp(text)
    if oid == _DATE:
        return timestamps.binary_date(text)
    return text.encode()
