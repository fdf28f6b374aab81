"""A view's timestamps and dates as PostgreSQL serves them, over a store that keeps them as the
views job writes them (Spark's JSON: `2026-12-07T05:00:00.000Z`, a date `2026-12-07`).

- Out: a timestamp column is `timestamptz` in PostgreSQL's text format in UTC
  (`2026-12-07 05:00:00+00`, fractions only when there are some), a date column `date`; in
  binary, microseconds (days) since 2000-01-01, as PostgreSQL sends them.
- Compared: a timestamp column compares by instant (SQLite's collation `pg_timestamp`), so that
  a literal in any ISO 8601 or PostgreSQL spelling (`'2026-12-07 04:00'`, `'2026-12-07T04:00:00Z'`,
  `'2026-12-07 06:00:00+01'`, what Grafana's `$__timeFilter` writes) selects the same rows; a
  literal without a zone is UTC, as the service's TimeZone is.
- `now()`, `date_trunc(field, t)` and `date_part(field, t)` are functions of the reader's
  connections; `extract(field FROM t)` and `± interval 'N unit'` after `now()` or
  `current_timestamp` (`rewritten`), and casts to `timestamptz`, `timestamp` and `date`
  (`cast`), are written as SQLite reads them.
"""

import functools
import re
import struct
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

__all__ = [
    "COLLATION",
    "binary_date",
    "binary_timestamp",
    "cast",
    "date_of_binary",
    "date_part",
    "date_trunc",
    "now",
    "order",
    "pg_text",
    "rewritten",
    "stored",
    "timestamp_of_binary",
]

COLLATION = "pg_timestamp"  # the collation of a view's timestamp columns (SqlReader registers it)
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # PostgreSQL's binary formats count from it
_UNIX = datetime(1970, 1, 1, tzinfo=UTC)
_DAY_ZERO = _EPOCH.date()
# now() or current_timestamp, plus or minus an interval literal: '1 hour', '30 minutes', '2 days'.
_SHIFTED = re.compile(
    r"\b(now\s*\(\s*\)|current_timestamp|localtimestamp)\s*([-+])\s*interval\s*'\s*"
    r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*'",
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
# date_trunc's fields: how many of month, day, hour, minute, second, microsecond each keeps.
_KEPT = {"microseconds": 6, "milliseconds": 6, "second": 5, "minute": 4, "hour": 3, "day": 2, "week": 2}
_KEPT |= {"month": 1, "quarter": 1, "year": 0}
_STARTS = (1, 1, 0, 0, 0, 0)  # each one's first value
_EXTRACT = re.compile(r"\bextract\s*\(\s*([A-Za-z]+)\s+FROM\s+", re.IGNORECASE)
_PARTS: dict[str, Callable[[datetime], float]] = {
    "epoch": lambda t: (t - _UNIX).total_seconds(),
    "year": lambda t: t.year,
    "quarter": lambda t: (t.month - 1) // 3 + 1,
    "month": lambda t: t.month,
    "week": lambda t: t.isocalendar().week,
    "day": lambda t: t.day,
    "dow": lambda t: t.isoweekday() % 7,  # Sunday 0, as PostgreSQL's
    "isodow": lambda t: t.isoweekday(),
    "doy": lambda t: t.timetuple().tm_yday,
    "hour": lambda t: t.hour,
    "minute": lambda t: t.minute,
    "second": lambda t: t.second + t.microsecond / 1e6,
    "milliseconds": lambda t: t.second * 1e3 + t.microsecond / 1e3,
    "microseconds": lambda t: t.second * 1_000_000 + t.microsecond,
}
_NOW_FORMAT = "'%Y-%m-%d %H:%M:%f+00'"  # SQLite's clock (UTC) in PostgreSQL's text format


@functools.lru_cache(maxsize=8192)
def _instant(text: str) -> datetime | None:
    """A timestamp's or a date's text as an aware datetime (UTC when it names no zone); None
    for text that is neither."""
    try:
        found = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return found.replace(tzinfo=UTC) if found.tzinfo is None else found


def _utc(text: str) -> datetime | None:
    """`_instant` in UTC."""
    found = _instant(text)
    return None if found is None else found.astimezone(UTC)


def _shown(found: datetime) -> str:
    """A UTC instant in PostgreSQL's text format: fractions only when there are some."""
    fraction = f".{found.microsecond:06d}".rstrip("0") if found.microsecond else ""
    return found.strftime("%Y-%m-%d %H:%M:%S") + fraction + "+00"


def order(a: str, b: str) -> int:
    """The collation: two timestamps by instant; text that is no timestamp, as text."""
    x, y = _instant(a), _instant(b)
    if x is None or y is None:
        return (a > b) - (a < b)
    return (x > y) - (x < y)


def pg_text(text: str) -> str:
    """A stored timestamp in PostgreSQL's text format, in UTC; text that is none, as it is."""
    found = _utc(text)
    return text if found is None else _shown(found)


def stored(text: str) -> str | None:
    """A timestamp in the views job's JSON form (`2026-12-07T05:00:00.000Z`: UTC, milliseconds),
    which compares with the stored ones as text by instant (HTTP filters); None for no timestamp."""
    found = _utc(text)
    if found is None:
        return None
    return found.strftime("%Y-%m-%dT%H:%M:%S.") + f"{found.microsecond // 1000:03d}Z"


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
    return _shown(_EPOCH + timedelta(microseconds=micros))


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


def now() -> str:
    """PostgreSQL's now() (SqlReader registers it): the service's clock, UTC, in PostgreSQL's
    text format. SQLite's own `current_timestamp` gives the same instant without fractions."""
    moment = datetime.now(UTC)
    return _shown(moment.replace(microsecond=moment.microsecond // 1000 * 1000))  # as SQLite's clock


def date_trunc(field: str | None, value: str | None) -> str | None:
    """PostgreSQL's date_trunc('hour', t) (SqlReader registers it), in UTC: what BI tools group
    a time series by. A field PostgreSQL does not know, or a value that is no timestamp: null."""
    found = _utc(value) if isinstance(value, str) else None
    unit = (field or "").lower()
    if found is None or unit not in _KEPT:
        return None
    parts = (found.month, found.day, found.hour, found.minute, found.second, found.microsecond)
    kept = _KEPT[unit]
    month, day, hour, minute, second, micro = (*parts[:kept], *_STARTS[kept:])
    found = datetime(found.year, month, day, hour, minute, second, micro, tzinfo=UTC)
    if unit == "week":  # its Monday, as PostgreSQL's (ISO) weeks start
        found -= timedelta(days=found.weekday())
    elif unit == "quarter":
        found = found.replace(month=(found.month - 1) // 3 * 3 + 1)
    elif unit == "milliseconds":
        found = found.replace(microsecond=found.microsecond // 1000 * 1000)
    return _shown(found)


def date_part(field: str | None, value: str | None) -> float | None:
    """PostgreSQL's date_part('hour', t), and `extract(hour FROM t)` (`rewritten`), in UTC, as a
    double: what Grafana's `$__timeGroup` (`extract(epoch FROM t)`) and time-of-day groupings
    ask. A field PostgreSQL does not know, or a value that is no timestamp: null."""
    found = _utc(value) if isinstance(value, str) else None
    part = _PARTS.get((field or "").lower())
    if found is None or part is None:
        return None
    return float(part(found))


def rewritten(sql: str, masking: Callable[[str], str]) -> str:
    """`sql` with `extract(field FROM t)` as `date_part('field', t)`, and `now()`,
    `current_timestamp` or `localtimestamp` `± interval '...'` as SQLite's clock shifted, where
    `masking` (which blanks strings and comments, keeping the length) leaves them: none inside a
    string is touched. An interval of another unit is left to SQLite to refuse."""
    sql = _extracts(sql, masking)
    masked = masking(sql)
    for found in reversed([m for m in _SHIFTED.finditer(sql) if masked[m.start()] == sql[m.start()]]):
        unit = found.group(4).lower()
        if unit not in _UNITS:
            continue
        word, times = _UNITS[unit]
        number = float(found.group(3)) * times
        if word != "seconds" and number != int(number):
            continue  # '1.5 hours': SQLite takes whole units only here
        shown = f"{number:g}" if word == "seconds" else str(int(number))
        replacement = (
            f"(strftime({_NOW_FORMAT}, 'now', '{found.group(2)}{shown} {word}') COLLATE {COLLATION})"
        )
        sql = sql[: found.start()] + replacement + sql[found.end() :]
    return sql


def _extracts(sql: str, masking: Callable[[str], str]) -> str:
    """Each `extract(field FROM expression)` as `date_part('field', expression)`, the last
    first (so that one inside another's expression is written before it is moved)."""
    while True:
        masked = masking(sql)
        found = [m for m in _EXTRACT.finditer(masked) if masked[m.start()] == sql[m.start()]]
        if not found:
            return sql
        last = found[-1]
        depth, end = 1, last.end()
        while end < len(masked) and depth:
            depth += (masked[end] == "(") - (masked[end] == ")")
            end += 1
        if depth:
            return sql  # no closing parenthesis: SQLite says what is wrong
        field = sql[last.start(1) : last.end(1)].lower()
        sql = f"{sql[: last.start()]}date_part('{field}', {sql[last.end() : end - 1].strip()}){sql[end:]}"
