"""A view's timestamps and dates as PostgreSQL serves them, over a store that keeps them as the
views job writes them (Spark's JSON: `2026-12-07T05:00:00.000Z`, a date `2026-12-07`).

- Out: a timestamp column is `timestamptz` in PostgreSQL's text format in UTC
  (`2026-12-07 05:00:00+00`, fractions only when there are some), a date column `date`; in
  binary, microseconds (days) since 2000-01-01, as PostgreSQL sends them.
- Compared: a timestamp column compares by instant (SQLite's collation `pg_timestamp`), so that
  a literal in any ISO 8601 or PostgreSQL spelling (`'2026-12-07 04:00'`, `'2026-12-07T04:00:00Z'`,
  `'2026-12-07 06:00:00+01'`, what Grafana's `$__timeFilter` writes) selects the same rows; a
  literal without a zone is UTC, as the service's TimeZone is.
- `now()` and `current_timestamp`, `± interval 'N unit'` after them (`rewritten`), and casts to
  `timestamptz`, `timestamp` and `date` (`cast`) are written as SQLite reads them.
"""

import functools
import re
import struct
from datetime import UTC, date, datetime, timedelta

__all__ = [
    "COLLATION",
    "binary_date",
    "binary_timestamp",
    "cast",
    "date_of_binary",
    "order",
    "pg_text",
    "rewritten",
    "timestamp_of_binary",
]

COLLATION = "pg_timestamp"  # the collation of a view's timestamp columns (SqlReader registers it)
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # PostgreSQL's binary formats count from it
_DAY_ZERO = _EPOCH.date()
# now() or current_timestamp, plus or minus an interval literal: '1 hour', '30 minutes', '2 days'.
_SHIFTED = re.compile(
    r"\b(now\s*\(\s*\)|current_timestamp|localtimestamp)(?:\s*([-+])\s*interval\s*'\s*"
    r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*')?",
    re.IGNORECASE,
)
_UNITS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), ("seconds", 1)),
    **dict.fromkeys(("min", "mins", "minute", "minutes"), ("minutes", 1)),
    **dict.fromkeys(("h", "hour", "hours"), ("hours", 1)),
    **dict.fromkeys(("d", "day", "days"), ("days", 1)),
    **dict.fromkeys(("week", "weeks"), ("days", 7)),
    **dict.fromkeys(("mon", "mons", "month", "months"), ("months", 1)),
    **dict.fromkeys(("y", "year", "years"), ("years", 1)),
}
_NOW_SQL = "strftime('%Y-%m-%d %H:%M:%f+00', 'now'{shift})"  # SQLite's clock, in UTC


@functools.lru_cache(maxsize=8192)
def _instant(text: str) -> datetime | None:
    """A timestamp's or a date's text as an aware datetime (UTC when it names no zone); None
    for text that is neither."""
    try:
        found = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return found.replace(tzinfo=UTC) if found.tzinfo is None else found


def order(a: str, b: str) -> int:
    """The collation: two timestamps by instant; text that is no timestamp, as text."""
    x, y = _instant(a), _instant(b)
    if x is None or y is None:
        return (a > b) - (a < b)
    return (x > y) - (x < y)


def pg_text(text: str) -> str:
    """A stored timestamp in PostgreSQL's text format, in UTC; text that is none, as it is."""
    found = _instant(text)
    if found is None:
        return text
    found = found.astimezone(UTC)
    fraction = f".{found.microsecond:06d}".rstrip("0") if found.microsecond else ""
    return found.strftime("%Y-%m-%d %H:%M:%S") + fraction + "+00"


def binary_timestamp(text: str) -> bytes:
    """timestamptz's binary format: microseconds since 2000-01-01 UTC (ValueError: no timestamp)."""
    found = _instant(text)
    if found is None:
        raise ValueError(text)
    return struct.pack("!q", (found - _EPOCH) // timedelta(microseconds=1))


def binary_date(text: str) -> bytes:
    """date's binary format: days since 2000-01-01 (ValueError: no date)."""
    return struct.pack("!i", (date.fromisoformat(text.strip()[:10]) - _DAY_ZERO).days)


def timestamp_of_binary(data: bytes) -> str:
    """A timestamp parameter sent in binary, as text the collation compares."""
    (micros,) = struct.unpack("!q", data)
    return pg_text((_EPOCH + timedelta(microseconds=micros)).isoformat())


def date_of_binary(data: bytes) -> str:
    (days,) = struct.unpack("!i", data)
    return (_DAY_ZERO + timedelta(days=days)).isoformat()


def cast(operand: str, type_name: str) -> str | None:
    """`operand::type_name` as SQLite reads it, for a timestamp's or a date's type (SQLite's
    CAST to an unknown type name takes the leading number: 2026); None for other types."""
    name = " ".join(type_name.lower().split())
    if name in ("timestamptz", "timestamp"):
        return f"(CAST({operand} AS TEXT) COLLATE {COLLATION})"
    if name == "date":
        return f"date({operand})"
    return None


def rewritten(sql: str, masked: str) -> str:
    """`sql` with `now()`, `current_timestamp` and `localtimestamp`, and `± interval '...'`
    after them, as SQLite's clock (`masked`: `sql` with its strings and comments blanked, the
    same length: those inside them are left). An interval of another unit is left to SQLite to
    refuse."""
    for found in reversed([m for m in _SHIFTED.finditer(sql) if masked[m.start()] == sql[m.start()]]):
        shift = ""
        if found.group(2) is not None:
            amount, unit = sql[found.start(3) : found.end(3)], sql[found.start(4) : found.end(4)].lower()
            if unit not in _UNITS:
                continue
            word, times = _UNITS[unit]
            number = float(amount) * times
            shown = f"{number:g}" if word == "seconds" else str(int(number))
            if word != "seconds" and number != int(number):
                continue  # '1.5 hours': SQLite takes whole units only here
            shift = f", '{found.group(2)}{shown} {word}'"
        replacement = f"({_NOW_SQL.format(shift=shift)} COLLATE {COLLATION})"
        sql = sql[: found.start()] + replacement + sql[found.end() :]
    return sql
