"""LIKE and ILIKE as PostgreSQL matches them, over SQLite, whose LIKE ignores the case of ASCII
letters (and only theirs), has no escape character unless one is named, and has no ILIKE.

- `like(pattern, value[, escape])` replaces SQLite's own `like()` on the reader's connections:
  `x LIKE 'Gold%'` is case-sensitive, `\\` escapes `%`, `_` and itself unless an `ESCAPE` names
  another character (`ESCAPE ''` none), as in PostgreSQL.
- `x ILIKE y` (and `NOT ILIKE`) is written as SQLite's `x GLOB y`, and `glob(pattern, value)`
  replaces SQLite's own to match as ILIKE does: case-insensitive in any script. PostgreSQL has
  no GLOB, so none is lost.
"""

import functools
import re
from collections.abc import Callable

from services.views import numbers

__all__ = ["glob", "like", "rewritten"]

_ILIKE = re.compile(r"\bILIKE\b", re.IGNORECASE)


def like(pattern: str | None, value: object, escape: str | None = "\\") -> int | None:
    """`value LIKE pattern`, as PostgreSQL's (SQLite calls like(pattern, value[, escape]))."""
    if pattern is None or value is None or escape is None:
        return None
    return int(_compiled(str(pattern), escape, 0).fullmatch(_text(value)) is not None)


def glob(pattern: str | None, value: object) -> int | None:
    """`value ILIKE pattern` (written as `value GLOB pattern`), as PostgreSQL's."""
    if pattern is None or value is None:
        return None
    return int(_compiled(str(pattern), "\\", re.IGNORECASE).fullmatch(_text(value)) is not None)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, float):
        return numbers.float8_text(value)  # 4.0 matches '4%', as PostgreSQL's text of 4 does
    return str(value)


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str, escape: str, flags: int) -> re.Pattern[str]:
    """A LIKE pattern as a regular expression: `%` any text, `_` one character, the escape
    character the next one as it is. A pattern that ends in the escape character is refused,
    as PostgreSQL refuses it."""
    if len(escape) > 1:
        raise ValueError("invalid escape string: it must be empty or one character")
    parts, chars = [], iter(pattern)
    for char in chars:
        if escape and char == escape:
            following = next(chars, None)
            if following is None:
                raise ValueError("LIKE pattern must not end with escape character")
            parts.append(re.escape(following))
        elif char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), flags | re.DOTALL)


def rewritten(sql: str, masking: Callable[[str], str]) -> str:
    """`sql` with each ILIKE outside strings and comments (`masking` blanks them, keeping the
    length) written as GLOB."""
    masked = masking(sql)
    for found in reversed(list(_ILIKE.finditer(masked))):
        sql = sql[: found.start()] + "GLOB " + sql[found.end() :]
    return sql
