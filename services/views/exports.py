"""A query's rows, or a view's, as COPY TO STDOUT gives them: psql's `\\copy` to a CSV file, a
driver's copy (psycopg's `cursor.copy(...)`), a shell's export:

    psql -h 127.0.0.1 -p 6875 -c "\\copy (SELECT * FROM customer_ratings) TO 'r.csv' CSV HEADER"
    psql -h 127.0.0.1 -p 6875 -c "COPY customer_ratings (user_id, ratings) TO STDOUT WITH (FORMAT csv)"

The query is any query of the views; its rows are read from one snapshot of the store as the
client takes them, without VIEWS_PG_MAX_ROWS' cap, for at most VIEWS_PG_STREAM_TIMEOUT_S. A
view's name stands for all its rows, or the columns listed. The options are
PostgreSQL's, in either spelling (`WITH (FORMAT csv, HEADER true, DELIMITER ';', NULL 'n/a')`,
or the older `CSV HEADER DELIMITER ';' NULL 'n/a'`), and the rows are written as PostgreSQL
writes them: in text format a tab between values, `\\N` for null and backslash escapes; in CSV
a comma, null as nothing, and a value quoted when it holds the delimiter, a quote, a line break
or would read as null. BINARY, FORCE_QUOTE and the like and COPY TO a file are refused with
0A000 (the service writes no file), COPY FROM with 25006 (it takes no rows: read only).
"""

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from services.views.sql import IDENTIFIER, Column, Result, SqlError

__all__ = ["Export", "header", "lines", "parse"]

_NAME = rf'(?:(?:public|"public")\.)?{IDENTIFIER}'
_COPY = re.compile(r"\s*COPY\b", re.IGNORECASE)
_QUERY = re.compile(r"\s*COPY\s*\((.*)\)\s*TO\s+STDOUT\b(.*)", re.IGNORECASE | re.DOTALL)
_VIEW = re.compile(rf"\s*COPY\s+{_NAME}\s*(?:\(([^()]*)\))?\s*TO\s+STDOUT\b(.*)", re.IGNORECASE | re.DOTALL)
_FROM = re.compile(rf"\s*COPY\s+{_NAME}\s*(?:\([^()]*\))?\s*FROM\b", re.IGNORECASE)
_OPTION = re.compile(r"\s*([A-Za-z_]+)(?:\s+(?:AS\s+)?('(?:[^']|'')*'|[A-Za-z0-9_]+))?\s*", re.IGNORECASE)
_OLD_OPTION = re.compile(
    r"\s*(?:(BINARY|CSV|HEADER)|(DELIMITER|NULL)\s+(?:AS\s+)?('(?:[^']|'')*'))\s*", re.IGNORECASE
)
_TEXT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f", "\v": "\\v"}
_NOT_TEXT_DELIMITERS = "\\.abcdefghijklmnopqrstuvwxyz0123456789"  # PostgreSQL's own refusal


@dataclass(frozen=True)
class Export:
    sql: str  # the query whose rows go out
    csv: bool = False
    header: bool = False
    delimiter: str = "\t"
    null: str = "\\N"


def parse(sql: str) -> Export | None:
    """COPY (<query>) TO STDOUT or COPY <view> [(<columns>)] TO STDOUT, with their options;
    None for a statement that is no COPY, or is SUBSCRIBE's (`subscription`); SqlError for a
    COPY that is not served."""
    if _COPY.match(sql) is None:
        return None
    if (asked := _QUERY.fullmatch(sql)) is not None:
        if re.match(r"\s*SUBSCRIBE\b", asked.group(1), re.IGNORECASE):
            return None
        return _options(asked.group(1).strip(), asked.group(2))
    if (named := _VIEW.fullmatch(sql)) is not None:
        columns = named.group(2)
        listed = ", ".join(c.strip() for c in columns.split(",")) if columns and columns.strip() else "*"
        return _options(f"SELECT {listed} FROM {named.group(1)}", named.group(3))  # noqa: S608 (names only)
    if _FROM.match(sql) is not None:
        raise SqlError(
            "25006", "cannot execute COPY FROM in a read-only transaction: the views are read only"
        )
    raise SqlError(
        "0A000",
        "COPY is served as COPY (<query>) TO STDOUT or COPY <view> TO STDOUT: the service writes no file",
    )


def _unquoted(value: str) -> str:
    return value[1:-1].replace("''", "'") if value.startswith("'") else value


def _options(sql: str, text: str) -> Export:
    """The export of `sql` with the options `text` gives, in either of PostgreSQL's spellings."""
    text = text.strip().rstrip(";").strip()
    if re.match(r"(?:WITH\s*)?\(", text, re.IGNORECASE):
        body = text[text.index("(") + 1 :].rstrip()
        if not body.endswith(")"):
            raise SqlError("42601", "COPY's options: WITH (FORMAT csv, HEADER true, ...)")
        given = [_OPTION.fullmatch(part) for part in body[:-1].split(",")] if body[:-1].strip() else []
        if any(g is None for g in given):
            raise SqlError("42601", f"COPY's options: {body[:-1].strip()!r} is not a list of options")
        return _export(sql, [(g.group(1).lower(), _unquoted(g.group(2) or "true")) for g in given if g])
    text = re.sub(r"^WITH\b", "", text, flags=re.IGNORECASE)
    pairs, at = [], 0
    while at < len(text):
        old = _OLD_OPTION.match(text, at)
        if old is None:
            raise SqlError("42601", f"COPY's options: {text[at:].strip()!r} is not one of them")
        word = (old.group(1) or "").lower()
        if word in ("csv", "binary"):
            pairs.append(("format", word))
        elif word == "header":
            pairs.append(("header", "true"))
        else:
            pairs.append((old.group(2).lower(), _unquoted(old.group(3))))
        at = old.end()
    return _export(sql, pairs)


def _export(sql: str, options: list[tuple[str, str]]) -> Export:
    given = dict(options)
    kind = given.pop("format", "text").lower()
    if kind == "binary" or "binary" in given:
        raise SqlError("0A000", "COPY in binary format is not served: text or csv")
    if kind not in ("text", "csv"):
        raise SqlError("22023", f'COPY format "{kind}" not recognized')
    csv = kind == "csv"
    header = given.pop("header", "false").lower() in ("true", "on", "1", "")
    delimiter = given.pop("delimiter", "," if csv else "\t")
    null = given.pop("null", "" if csv else "\\N")
    if given:
        raise SqlError(
            "0A000", f"COPY option {sorted(given)[0]!r} is not served: FORMAT, HEADER, DELIMITER, NULL"
        )
    if (
        len(delimiter.encode()) != 1
        or delimiter in "\r\n"
        or (delimiter == '"' if csv else delimiter in _NOT_TEXT_DELIMITERS)
    ):
        raise SqlError(
            "22023", f"COPY delimiter {delimiter!r} is not served: one byte, no line break, no quote"
        )
    return Export(sql, csv, header, delimiter, null)


def lines(result: Result, export: Export) -> Iterator[bytes]:
    """The rows as COPY's lines (the column names first when HEADER is asked), each a CopyData."""
    if export.header:
        yield header(result.columns, export)
    for row in result.rows:
        yield _line(row, export)


def header(columns: tuple[Column, ...], export: Export) -> bytes:
    """HEADER's line: the column names."""
    return _line([c.name for c in columns], export)


def _line(values: "list[str] | tuple[str | None, ...]", export: Export) -> bytes:
    if export.csv:
        cells = [export.null if v is None else _csv_value(v, export) for v in values]
    else:
        cells = [export.null if v is None else _text_value(v, export.delimiter) for v in values]
    return (export.delimiter.join(cells) + "\n").encode()


def _csv_value(value: str, export: Export) -> str:
    """Quoted when it holds the delimiter, a quote or a line break, or would read as null."""
    special = export.delimiter in value or '"' in value or "\n" in value or "\r" in value
    if special or value in (export.null, "\\."):
        return '"' + value.replace('"', '""') + '"'
    return value


def _text_value(value: str, delimiter: str) -> str:
    return value.translate(_escapes(delimiter))


@functools.cache
def _escapes(delimiter: str) -> dict[int, str]:
    """str.translate's table of the text format's escapes, the delimiter's among them: one pass
    over a value in C (a character at a time in Python, a COPY took 28 us a row, now 11)."""
    return {ord(delimiter): "\\" + delimiter} | {ord(c): e for c, e in _TEXT_ESCAPES.items()}
