"""SUBSCRIBE over PostgreSQL's wire protocol, as Materialize serves it to psql:

    psql -h 127.0.0.1 -p 6875 -c "COPY (SUBSCRIBE customer_ratings) TO STDOUT"

streams the view's rows, then each change, as COPY rows in text format until the client
cancels (Ctrl-C in psql: SQLSTATE 57014, and the session goes on). The stream is the one
`GET /views/<name>/changes` serves (`api.Api.follow`: the same snapshot, gap-free changes,
and bounds); `WITH (SNAPSHOT = false)` leaves the rows out, as there. Each COPY row is
`mz_state` (`upsert`, or `delete` with the key columns set and the others null), then the
view's columns, as Materialize's `ENVELOPE UPSERT` gives them. A stream the service ends (the
view replaced by a new version, or a subscriber that fell too far behind) ends the COPY with
an error that says so.
"""

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from services.views import timestamps
from services.views.sql import IDENTIFIER, Column, identifier

__all__ = [
    "STATE_COLUMN",
    "STREAM_ENDED",
    "Subscribe",
    "changes",
    "copy_line",
    "error_text",
    "events",
    "parse",
    "row_values",
]

STATE_COLUMN = "mz_state"
STREAM_ENDED = "the view's stream ended: subscribe again"
_REPLACED = "the view was replaced by a new version (its columns may differ): subscribe again"
_ASKED = re.compile(
    rf"\s*COPY\s*\(\s*SUBSCRIBE\s+(?:TO\s+)?{IDENTIFIER}"
    r"\s*(?:WITH\s*\(\s*SNAPSHOT\s*=?\s*(TRUE|FALSE)\s*\))?\s*\)\s*TO\s+STDOUT\s*;?\s*",
    re.IGNORECASE,
)
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


@dataclass(frozen=True)
class Subscribe:
    view: str
    snapshot: bool


def parse(sql: str) -> Subscribe | None:
    """`COPY (SUBSCRIBE [TO] <view> [WITH (SNAPSHOT = false)]) TO STDOUT`, or None."""
    asked = _ASKED.fullmatch(sql)
    if asked is None:
        return None
    return Subscribe(identifier(asked.group(1)), (asked.group(2) or "true").lower() == "true")


def events(text: str) -> Iterator[tuple[str, str]]:
    """The (event, data) pairs of a piece of an SSE stream (whole events, as the API yields
    them); comments (keep-alives) are left out."""
    for block in text.split("\n\n"):
        event, data = "message", None
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        if data is not None:
            yield event, data


def changes(text: str) -> tuple[list[str], str | None]:
    """The data of a piece's rows and changes, and why the stream ends, if the piece ends it
    (the view replaced, or an `error` event): the rows before the end are given."""
    found: list[str] = []
    for event, data in events(text):
        if event in ("snapshot", "change"):
            found.append(data)
        elif event == "replaced":
            return found, _REPLACED
        elif event == "error":
            return found, error_text(data)
    return found, None


def _value(value: Any, pg_type: str) -> str | None:
    """A JSON value in PostgreSQL's text format: booleans t/f, objects and arrays as JSON, a
    timestamp as PostgreSQL shows one (the JSON's is ISO 8601)."""
    if value is None:
        return None
    if pg_type == "timestamptz" and isinstance(value, str):
        return timestamps.pg_text(value)
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def row_values(data: str, columns: tuple[Column, ...]) -> tuple[str | None, ...]:
    """A change's SSE data (`{"key": {...}, "row": {...} or null}`) as a row: its state
    (`upsert` or `delete`), then the view's columns in text format (a deleted row's key columns
    only, the others null)."""
    change = json.loads(data)
    row, key = change.get("row"), change.get("key") or {}
    state, values = ("upsert", row) if row is not None else ("delete", key)
    return (state, *(_value(values.get(c.name), c.pg_type) for c in columns))


def copy_line(data: str, columns: tuple[Column, ...]) -> bytes:
    """A change's SSE data as one COPY row in text format (`row_values`, escaped)."""
    cells = ["\\N" if v is None else v.translate(_ESCAPES) for v in row_values(data, columns)]
    return ("\t".join(cells) + "\n").encode()


def error_text(data: str) -> str:
    """What an `error` event of the stream says."""
    try:
        return str(json.loads(data).get("error", data))
    except (ValueError, AttributeError):
        return data
