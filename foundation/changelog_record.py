"""A view's changed row, as its changelog topic (`view.<name>`, compacted) carries it: what the
views job writes and the query service, the demo and the tests read.

- The record's key: the row's key columns as a compact JSON object, in the view's key order
  (`{"user_id":42}`, `{"club_status":"gold","channel":"web","hour":"2026-11-18T10"}`).
- Its value: the whole row as a compact JSON object with its nulls kept, or none (a
  tombstone) when the row left the view (a window past its retention).

The views job writes it with Spark SQL (`to_json` over the key columns and the row); the
`encode` here gives the same bytes for the rows a view holds (a unit test compares the two;
Spark spells very large and very small doubles its own way, 1.0E20 for 1e+20, which JSON
readers take alike). Readers take a record apart with `decode`, which keeps the row as its
JSON text (the query service stores it as it came).
"""

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["BadChangelogRecord", "ChangelogRecord"]

# The key of a view keyed by one integer column, as Spark's to_json writes it. Parsing it as
# JSON and encoding the key's values again cost several times what this match does, and the
# query service reads every change of every view.
_ONE_INT_KEY = re.compile(rb'\{"([A-Za-z_][A-Za-z0-9_]*)":(-?(?:0|[1-9][0-9]*))\}')
_COMPACT = (",", ":")


class BadChangelogRecord(ValueError):
    """A record of a changelog topic that is not a changed row: its reason says why."""


@dataclass(frozen=True)
class ChangelogRecord:
    key_columns: tuple[str, ...]
    key_values: str  # the key's values as a compact JSON array, in key_columns' order: [42]
    value: str | None  # the row as JSON text; None: a tombstone

    @classmethod
    def of(cls, key: dict[str, Any], row: dict[str, Any] | None) -> "ChangelogRecord":
        """The record of a row (`key`: its key columns and values, in the view's key order)."""
        value = None if row is None else json.dumps(row, separators=_COMPACT, ensure_ascii=False)
        return cls(tuple(key), json.dumps(list(key.values()), separators=_COMPACT), value)

    @property
    def key(self) -> dict[str, Any]:
        return dict(zip(self.key_columns, json.loads(self.key_values), strict=True))

    @property
    def row(self) -> dict[str, Any] | None:
        return None if self.value is None else json.loads(self.value)

    def encode(self) -> tuple[bytes, bytes | None]:
        """The record's key and value, as the views job writes them."""
        key = json.dumps(self.key, separators=_COMPACT, ensure_ascii=False).encode()
        return key, None if self.value is None else self.value.encode()

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> "ChangelogRecord":
        """The record of a changelog topic's key and value; BadChangelogRecord when the key is
        not a JSON object of key columns, or the value is not UTF-8."""
        try:
            text = None if value is None else value.decode()
        except UnicodeDecodeError as err:
            raise BadChangelogRecord(f"a value that is not UTF-8: {err}") from None
        simple = _ONE_INT_KEY.fullmatch(key) if key is not None else None
        if simple is not None:  # as a parse and an encode would give it
            column, number = simple.groups()
            return cls((column.decode(),), f"[{number.decode()}]", text)
        try:
            parsed = None if key is None else json.loads(key)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or not parsed:
            raise BadChangelogRecord("a key that is not a JSON object of the view's key columns")
        return cls(tuple(parsed), json.dumps(list(parsed.values()), separators=_COMPACT), text)
