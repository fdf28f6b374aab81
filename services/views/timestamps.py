"""A view's timestamps and dates as PostgreSQL serves them, over a store that keeps them as the
views job writes them (Spark's JSON: `2026-12-07T05:00:00.000Z`, a date `2026-12-07`).

- The session's time zone (`SET TimeZone`, or the start-up exchange's; UTC by default) is
  `ZONE`'s: the PostgreSQL connection sets it to its session's, a thread it starts inherits it,
  anything else (HTTP) has UTC. `zone_named` reads a value as PostgreSQL does.
- Out: a timestamp column is `timestamptz` in PostgreSQL's text format in the session's zone
  (`2026-12-07 06:00:00+01`, fractions only when there are some), a date column `date`; in
  binary, microseconds (days) since 2000-01-01, as PostgreSQL sends them.
- Compared: a timestamp column compares by instant (SQLite's collation `pg_timestamp`), so that
  a literal in any ISO 8601 or PostgreSQL spelling (`'2026-12-07 04:00'`, `'2026-12-07T04:00:00Z'`,
  `'2026-12-07 06:00:00+01'`, what Grafana's `$__timeFilter` writes) selects the same rows; a
  literal without a zone is in the session's zone, as in PostgreSQL.
- `now()`, `date_trunc(field, t)`, `date_part(field, t)`, `to_char(t, format)`,
  `to_timestamp(seconds)`, `to_timestamp(text, format)`, `to_date(text, format)`, `pg_date(t)`,
  `pg_shift(t, sign, interval)` (`shifted`) and `pg_interval(text)` (`interval`) are functions
  of the reader's connections, in the session's zone; `extract(field FROM t)`, `t ± interval
  '...'` and an interval literal standing alone (`rewritten`), and casts to `timestamptz`,
  `timestamp`, `date` and `interval` (`cast`), are written as SQLite reads them.
- An interval is PostgreSQL's text (`1 day 02:30:00`) that compares by length (the collation
  `pg_interval`, `interval_order`); a driver's timestamp or date parameter is text marked with
  its type (`TimeParameter`), so that the reader's arithmetic knows `$1 - t`.
"""

import calendar
import contextvars
import functools
import re
import struct
import zoneinfo
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo

__all__ = [
    "COLLATION",
    "INTERVALS",
    "STATEMENT_TIME",
    "ZONE",
    "DateParameter",
    "TimeParameter",
    "age",
    "between",
    "binary_date",
    "binary_timestamp",
    "cast",
    "date_of_binary",
    "date_part",
    "date_trunc",
    "interval",
    "interval_order",
    "now",
    "order",
    "pg_date",
    "pg_text",
    "rewritten",
    "shifted",
    "stored",
    "timestamp_of_binary",
    "to_char",
    "to_date",
    "to_timestamp",
    "zone_named",
]

COLLATION = "pg_timestamp"  # the collation of a view's timestamp columns (SqlReader registers it)
INTERVALS = "pg_interval"  # the collation of an interval literal, and its function (SqlReader registers both)
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # PostgreSQL's binary formats count from it
_UNIX = datetime(1970, 1, 1, tzinfo=UTC)
_DAY_ZERO = _EPOCH.date()
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
# The session's time zone, as a callable: its current value (a connection's session sets it once;
# a thread started with asyncio.to_thread sees the same).
ZONE: contextvars.ContextVar[Callable[[], tzinfo]] = contextvars.ContextVar("ZONE", default=lambda: UTC)
# When the statement being run started (None: now), for now().
STATEMENT_TIME: contextvars.ContextVar[datetime | None] = contextvars.ContextVar(
    "STATEMENT_TIME", default=None
)
# PostgreSQL's POSIX-style offsets: 'UTC+3' and '+03:00' are three hours WEST of Greenwich.
_POSIX = re.compile(r"(?:UTC|GMT|UT|Z)?([+-])?(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?", re.IGNORECASE)
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*")


def zone_named(value: str) -> tzinfo:
    """A TimeZone setting's value as PostgreSQL reads it: an IANA name (`Europe/Berlin`), UTC
    (or GMT, Z, LOCAL and DEFAULT: the server's), a number of hours (`-7`, `5.5`: ISO's sign),
    or a POSIX-style offset (`UTC+3`, `+05:30`: the sign is POSIX's, so these are west of
    Greenwich, as PostgreSQL's documentation warns). ValueError for any other."""
    text = value.strip()
    if text.upper() in ("UTC", "GMT", "Z", "UT", "LOCAL", "DEFAULT"):
        return UTC
    if _NUMBER.fullmatch(text):
        offset = timedelta(hours=float(text))
    elif (posix := _POSIX.fullmatch(text)) is not None:
        sign, hours, minutes, seconds = posix.groups()
        offset = timedelta(hours=int(hours), minutes=int(minutes or 0), seconds=int(seconds or 0))
        offset = offset if sign == "-" else -offset
    elif _NAME.fullmatch(text):
        try:
            return zoneinfo.ZoneInfo(text)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"{value!r} is not a time zone (an IANA name such as Europe/Berlin, or UTC)"
            ) from None
    else:
        raise ValueError(f"{value!r} is not a time zone (an IANA name such as Europe/Berlin, or UTC)")
    if abs(offset) > timedelta(hours=15):
        raise ValueError(f"{value!r}: an offset of at most 15 hours")
    return timezone(offset) if offset else UTC


@functools.lru_cache(maxsize=8192)
def _instant_in(text: str, zone: tzinfo) -> datetime | None:
    try:
        found = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return found.replace(tzinfo=zone) if found.tzinfo is None else found


def _instant(text: str) -> datetime | None:
    """A timestamp's or a date's text as an aware datetime (in the session's zone when it names
    none); None for text that is neither."""
    return _instant_in(text, ZONE.get()())


def _utc(text: str) -> datetime | None:
    """`_instant` in UTC."""
    found = _instant(text)
    return None if found is None else found.astimezone(UTC)


def _local(text: str) -> datetime | None:
    """`_instant` in the session's zone."""
    found = _instant(text)
    return None if found is None else found.astimezone(ZONE.get()())


def _shown(found: datetime) -> str:
    """An aware datetime in PostgreSQL's text format, with its offset: fractions only when there
    are some, the offset's minutes and seconds only when it has some (`+00`, `+05:30`)."""
    fraction = f".{found.microsecond:06d}".rstrip("0") if found.microsecond else ""
    return found.strftime("%Y-%m-%d %H:%M:%S") + fraction + _offset(found)


def _offset(found: datetime) -> str:
    """The offset as PostgreSQL shows it: `+00`, `-07`, `+05:30`."""
    offset = found.utcoffset() or timedelta(0)
    sign, offset = ("-", -offset) if offset < timedelta(0) else ("+", offset)
    minutes, seconds = divmod(int(offset.total_seconds()), 60)
    hours, minutes = divmod(minutes, 60)
    shown = f"{sign}{hours:02d}" + (f":{minutes:02d}" if minutes or seconds else "")
    return shown + (f":{seconds:02d}" if seconds else "")


def order(a: str, b: str) -> int:
    """The collation: two timestamps by instant; text that is no timestamp, as text."""
    x, y = _instant(a), _instant(b)
    if x is None or y is None:
        return (a > b) - (a < b)
    return (x > y) - (x < y)


def pg_text(text: str) -> str:
    """A stored timestamp in PostgreSQL's text format, in the session's zone; text that is none,
    as it is."""
    found = _local(text)
    return text if found is None else _shown(found)


def pg_date(value: str | None) -> str | None:
    """`t::date` (SqlReader registers it): a timestamp's date in the session's zone, as
    PostgreSQL's; a date as it is; null for text that is neither."""
    if value is None:
        return None
    found = _local(value) if isinstance(value, str) else None
    return None if found is None else found.date().isoformat()


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


class TimeParameter(str):
    """A parameter bound as a timestamp (its declared type's, `timestamptz` or `timestamp`): its
    text, as SQLite gets it, marked so that the SQL reader reads `$1 - t` as time arithmetic, as
    PostgreSQL does (SQLite would subtract the two texts' years)."""

    __slots__ = ()
    kind = "timestamp"


class DateParameter(TimeParameter):
    """A parameter bound as a `date`."""

    __slots__ = ()
    kind = "date"


def timestamp_of_binary(data: bytes) -> str:
    """A timestamp parameter sent in binary, as text the collation compares (UTC: an instant)."""
    (micros,) = struct.unpack("!q", data)
    return _shown(_EPOCH + timedelta(microseconds=micros))


def date_of_binary(data: bytes) -> str:
    (days,) = struct.unpack("!i", data)
    return (_DAY_ZERO + timedelta(days=days)).isoformat()


def cast(operand: str, type_name: str) -> str | None:
    """`operand::type_name` as SQLite reads it, for a timestamp's, a date's or an interval's type
    (SQLite's CAST to an unknown type name takes the leading number: 2026, 1 for '1 day'); None
    for other types."""
    name = " ".join(type_name.lower().split())
    if name in ("timestamptz", "timestamp", "timestamp with time zone", "timestamp without time zone"):
        return f"(CAST({operand} AS TEXT) COLLATE {COLLATION})"
    if name == "date":
        return f"pg_date({operand})"
    if name == "interval":
        return f"(pg_interval({operand}) COLLATE {INTERVALS})"
    return None


def now() -> str:
    """PostgreSQL's now() (SqlReader registers it): the service's clock when the statement
    started (`STATEMENT_TIME`, set by the reader: every call in one statement gives the same
    instant, as PostgreSQL's gives its transaction's start), in the session's zone, in
    PostgreSQL's text format."""
    moment = (STATEMENT_TIME.get() or datetime.now(UTC)).astimezone(ZONE.get()())
    return _shown(moment.replace(microsecond=moment.microsecond // 1000 * 1000))  # as SQLite's clock


def date_trunc(field: str | None, value: str | None) -> str | None:
    """PostgreSQL's date_trunc('hour', t) (SqlReader registers it), in the session's zone (a day
    starts at its midnight): what BI tools group a time series by. A field PostgreSQL does not
    know, or a value that is no timestamp: null."""
    found = _local(value) if isinstance(value, str) else None
    unit = (field or "").lower()
    if found is None or unit not in _KEPT:
        return None
    parts = (found.month, found.day, found.hour, found.minute, found.second, found.microsecond)
    kept = _KEPT[unit]
    month, day, hour, minute, second, micro = (*parts[:kept], *_STARTS[kept:])
    found = datetime(found.year, month, day, hour, minute, second, micro, tzinfo=found.tzinfo)
    if unit == "week":  # its Monday, as PostgreSQL's (ISO) weeks start
        found -= timedelta(days=found.weekday())
    elif unit == "quarter":
        found = found.replace(month=(found.month - 1) // 3 * 3 + 1)
    elif unit == "milliseconds":
        found = found.replace(microsecond=found.microsecond // 1000 * 1000)
    return _shown(found.astimezone(UTC).astimezone(found.tzinfo))  # the offset of that moment


def date_part(field: str | None, value: str | None) -> float | None:
    """PostgreSQL's date_part('hour', t), and `extract(hour FROM t)` (`rewritten`), in the
    session's zone, as a double: what Grafana's `$__timeGroup` (`extract(epoch FROM t)`) and
    time-of-day groupings ask. A field PostgreSQL does not know, or a value that is no
    timestamp: null."""
    found = _local(value) if isinstance(value, str) else None
    if found is None and isinstance(value, str):
        return _interval_part(field, value)
    part = _PARTS.get((field or "").lower())
    if found is None or part is None:
        return None
    return float(part(found))


def _interval_part(field: str | None, value: str) -> float | None:
    """date_part of an interval (`between`'s): its epoch (a month 30 days), or its fields."""
    parsed = _interval(value)
    if parsed is None:
        return None
    months, days, seconds = parsed
    parts = {
        "epoch": months * 30 * 86_400 + days * 86_400 + seconds,
        "year": int(months / 12),
        "month": months - int(months / 12) * 12,
        "day": days,
        "hour": int(seconds / 3600),
        "minute": int(seconds / 60) - int(seconds / 3600) * 60,
        "second": seconds - int(seconds / 60) * 60,
    }
    found = parts.get((field or "").lower())
    return None if found is None else float(found)


# An interval's text as PostgreSQL reads it: quantities with units ('1 day 2 hours', '-30 day',
# '1 mon', '@ 3 days ago') and a time of day ('01:30', '-00:00:05.5').
_QUANTITY = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([A-Za-z]+)")
_TIME_OF_DAY = re.compile(r"([+-])?(\d+):(\d{1,2})(?::(\d{1,2}(?:\.\d+)?))?")
_INTERVAL_UNITS = {
    **dict.fromkeys(("us", "usec", "usecs", "microsecond", "microseconds"), ("seconds", 1e-6)),
    **dict.fromkeys(("ms", "msec", "msecs", "millisecond", "milliseconds"), ("seconds", 1e-3)),
    **{unit: ("seconds", 1) for unit, (word, _) in _UNITS.items() if word == "seconds"},
    **{unit: ("seconds", 60) for unit, (word, _) in _UNITS.items() if word == "minutes"},
    **{unit: ("seconds", 3600) for unit, (word, _) in _UNITS.items() if word == "hours"},
    **{unit: ("days", times) for unit, (word, times) in _UNITS.items() if word == "days"},
    **{unit: ("months", 1) for unit, (word, _) in _UNITS.items() if word == "months"},
    **{unit: ("months", 12) for unit, (word, _) in _UNITS.items() if word == "years"},
    **dict.fromkeys(("decade", "decades"), ("months", 120)),
    **dict.fromkeys(("century", "centuries"), ("months", 1200)),
}


@functools.lru_cache(maxsize=256)
def _interval(text: str) -> tuple[int, float, float] | None:
    """An interval's (months, days, seconds); None for text PostgreSQL would refuse."""
    rest, parts = text.strip().removeprefix("@").strip(), [0.0, 0.0, 0.0]
    ago = rest.lower().endswith(" ago")
    rest = rest[:-4] if ago else rest
    at = 0
    while at < len(rest):
        if rest[at].isspace():
            at += 1
            continue
        quantity = _QUANTITY.match(rest, at)
        clock = _TIME_OF_DAY.match(rest, at)
        if clock is not None and (quantity is None or clock.end() > quantity.end()):
            sign = -1 if clock.group(1) == "-" else 1
            hours, minutes, seconds = int(clock.group(2)), int(clock.group(3)), float(clock.group(4) or 0)
            parts[2] += sign * (hours * 3600 + minutes * 60 + seconds)
            at = clock.end()
        elif quantity is not None and quantity.group(2).lower() in _INTERVAL_UNITS:
            field, times = _INTERVAL_UNITS[quantity.group(2).lower()]
            parts[("months", "days", "seconds").index(field)] += float(quantity.group(1)) * times
            at = quantity.end()
        else:
            return None
    months, days, seconds = (-part if ago else part for part in parts)
    whole_months = int(months)  # a fraction of a month is 30 days, of a day 24 hours, as PostgreSQL's
    days += (months - whole_months) * 30
    whole_days = int(days)
    return whole_months, float(whole_days), seconds + (days - whole_days) * 86_400


def shifted(value: str | None, sign: str | None, interval: str | None) -> str | None:
    """`t + interval '...'` (or `-`; SqlReader registers it as `pg_shift`), as PostgreSQL adds
    one to a timestamptz in the session's zone: months first (the 31st of a month with fewer days
    its last), then days on the calendar (a day across a change of clocks is 23 or 25 hours),
    then the time. Null for a value that is no timestamp; ValueError for an interval PostgreSQL
    would refuse."""
    parsed = _interval(interval or "")
    if parsed is None:
        raise ValueError(f'invalid input syntax for type interval: "{interval}"')
    found = _local(value) if isinstance(value, str) else None
    if found is None:
        return None
    direction = -1 if sign == "-" else 1
    months, days, seconds = (direction * part for part in parsed)
    zone = ZONE.get()()
    year, month = divmod(found.month - 1 + int(months), 12)
    year += found.year
    day = min(found.day, calendar.monthrange(year, month + 1)[1])
    wall = found.replace(tzinfo=None, year=year, month=month + 1, day=day) + timedelta(days=days)
    moment = wall.replace(tzinfo=zone).astimezone(UTC) + timedelta(seconds=seconds)
    return _shown(moment.astimezone(zone))


def _unit(count: int, name: str) -> str:
    return "" if not count else f"{count} {name}{'' if count == 1 else 's'}"


def _interval_text(months: int, days: int, microseconds: int) -> str:
    """An interval in PostgreSQL's text format: `1 year 2 mons 3 days 04:05:06`, `2 days
    03:00:00`, `-1 days -02:30:00`, `00:00:05.25`."""
    years = int(months / 12)
    shown = [
        part for part in (_unit(years, "year"), _unit(months - years * 12, "mon"), _unit(days, "day")) if part
    ]
    if microseconds or not shown:
        seconds, fraction = divmod(abs(microseconds), 1_000_000)
        minutes, seconds = divmod(seconds, 60)
        hours, minutes = divmod(minutes, 60)
        clock = f"{'-' if microseconds < 0 else ''}{hours:02d}:{minutes:02d}:{seconds:02d}"
        shown.append(clock + (f".{fraction:06d}".rstrip("0") if fraction else ""))
    return " ".join(shown)


def interval(text: str | None) -> str | None:
    """`interval '...'` standing alone (SqlReader registers it as `pg_interval`): the interval
    in PostgreSQL's text format (`'90 minutes'`: `01:30:00`); ValueError for text PostgreSQL
    would refuse."""
    if text is None:
        return None
    parsed = _interval(str(text))
    if parsed is None:
        raise ValueError(f'invalid input syntax for type interval: "{text}"')
    months, days, seconds = parsed
    return _interval_text(months, int(days), round(seconds * 1_000_000))


def interval_order(a: str, b: str) -> int:
    """The collation of intervals: two intervals' texts by their length, as PostgreSQL compares
    them (a month 30 days, a day 24 hours: `now() - max(t) > interval '10 minutes'`); text that
    is no interval after every interval, as text."""
    x, y = _interval_key(a), _interval_key(b)
    return (x > y) - (x < y)


def _interval_key(text: str) -> tuple[int, float, str]:
    parsed = _interval(text)
    if parsed is None:
        return 1, 0.0, text
    months, days, seconds = parsed
    return 0, (months * 30 + days) * 86_400 + seconds, ""


_DAY_US = 86_400_000_000


def between(later: str | None, earlier: str | None) -> str | None:
    """`t1 - t2` of two timestamps (SqlReader registers it as `pg_minus`): the interval between
    them, in days and a time, as PostgreSQL gives it (`extract(epoch FROM now() - max(t))`, how
    long ago a view's last row came, is its seconds). Null where either is no timestamp."""
    a = _utc(later) if isinstance(later, str) else None
    b = _utc(earlier) if isinstance(earlier, str) else None
    if a is None or b is None:
        return None
    total = (a - b) // timedelta(microseconds=1)
    days = int(total / _DAY_US)
    return _interval_text(0, days, total - days * _DAY_US)


def age(later: str | None, earlier: str | None = None) -> str | None:
    """PostgreSQL's age(t1, t2) (SqlReader registers it): the interval between them in years,
    months and days of the session's calendar, field by field as PostgreSQL subtracts them;
    age(t) is from today's midnight. Null where either is no timestamp."""
    if earlier is None:
        later, earlier = date_trunc("day", now()), later
    a = _local(later) if isinstance(later, str) else None
    b = _local(earlier) if isinstance(earlier, str) else None
    if a is None or b is None:
        return None
    sign, (a, b) = (1, (a, b)) if a >= b else (-1, (b, a))
    micro = (a.hour - b.hour) * 3_600_000_000 + (a.minute - b.minute) * 60_000_000
    micro += (a.second - b.second) * 1_000_000 + a.microsecond - b.microsecond
    days, months = a.day - b.day, (a.year - b.year) * 12 + a.month - b.month
    if micro < 0:
        micro, days = micro + _DAY_US, days - 1
    if days < 0:  # borrowed from the earlier one's month, as PostgreSQL borrows
        days, months = days + calendar.monthrange(b.year, b.month)[1], months - 1
    return _interval_text(sign * months, sign * days, sign * micro)


# Words before a sign, never an operand: `SELECT - interval '1 day'` negates the interval.
_NO_OPERANDS = frozenset(
    "select where and or not when then else on by as in is between having case like ilike values"
    " distinct return returning".split()
)
# `± interval '...'` after any operand: `pg_shift`'s, compared by instant.
_SHIFT = re.compile(r"([-+])\s*interval\s*'", re.IGNORECASE)


def _shifts(sql: str, masking: Callable[[str], str], operand_start: Callable[[str, int], int]) -> str:
    """Each `operand ± interval '...'` as a call of `pg_shift`, the first first (an operand that
    holds an earlier one, `date_trunc('week', t + interval '1 day') - interval '1 day'`, is
    taken whole once that one is written)."""
    done = 0
    while True:
        masked = masking(sql)
        found = next((m for m in _SHIFT.finditer(masked, done) if masked[m.start()] == sql[m.start()]), None)
        if found is None:
            return sql
        close = masked.find("'", found.end())
        start = operand_start(masked, found.start())
        operand, literal = sql[start : found.start()].strip(), sql[found.end() - 1 : close + 1]
        if close < 0 or not operand or _unary(operand):
            done = found.end()  # no operand (`SELECT - interval '1 day'`, `t + -interval ...`): a sign
            continue
        call = f"(pg_shift({operand}, '{found.group(1)}', {literal}) COLLATE {COLLATION})"
        sql = sql[:start] + call + sql[close + 1 :]
        done = start + len(call)


def rewritten(sql: str, masking: Callable[[str], str], operand_start: Callable[[str, int], int]) -> str:
    """`sql` with `extract(field FROM t)` as `date_part('field', t)`, with `operand_start`
    (where the operand that ends at a position starts) each `t ± interval '...'`, `now()`'s
    too, as `shifted`'s, and any other interval literal as `interval`'s, where `masking` (which
    blanks strings and comments, keeping the length) leaves them: none inside a string is
    touched."""
    return _literals(_shifts(_extracts(sql, masking), masking, operand_start), masking)


_LITERAL = re.compile(r"\binterval\s*'", re.IGNORECASE)


def _unary(before: str) -> bool:
    """Whether a sign after `before` (what precedes it, stripped) is unary: no operand ends there."""
    words = before.split()
    return not words or before.endswith(_NOT_ENDING_OPERANDS) or words[-1].lower() in _NO_OPERANDS


_NOT_ENDING_OPERANDS = ("(", ",", "+", "-", "*", "/", "%", "<", ">", "=", "|")


def _negated(literal: str) -> str:
    """An interval literal's text (quoted) negated, every part of it: PostgreSQL's `ago`."""
    text = literal[1:-1].rstrip()
    return f"'{text[:-4] if text.lower().endswith(' ago') else text + ' ago'}'"


def _literals(sql: str, masking: Callable[[str], str]) -> str:
    """Each `interval '...'` that no shift took (compared, shown, `interval '1 day' + t`), as
    `pg_interval`'s text with its collation, which the SQL reader's arithmetic knows as an
    interval (`* 2` is refused there); a unary minus before it (`- interval '1 day'`, `t +
    -interval '1 day'`) negates it, where SQLite would negate the text's leading number."""
    masked = masking(sql)
    for found in reversed([m for m in _LITERAL.finditer(masked) if masked[m.start()] == sql[m.start()]]):
        close = masked.find("'", found.end())
        before, after = masked[: found.start()].rstrip(), masked[close + 1 :].lstrip()
        negated = before.endswith("-") and _unary(before[:-1].rstrip())
        if close < 0 or (before.endswith(("+", "-")) and not negated) or after.startswith("::"):
            continue
        literal = sql[found.end() - 1 : close + 1]
        start = len(before) - 1 if negated else found.start()
        call = f"(pg_interval({_negated(literal) if negated else literal}) COLLATE {INTERVALS})"
        sql = sql[:start] + call + sql[close + 1 :]
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


# to_char's patterns, longest first; a quoted text, or any other character, is itself.
_PATTERN = re.compile(
    r'FM|"(?:[^"\\]|\\.)*"|HH24|HH12|HH|MI|SS|MS|US|IYYY|YYYY|YYY|YY|Y|MONTH|MON|MM|DAY|DDD|DD|DY|ID|D'
    r"|IW|WW|W|Q|A\.M\.|P\.M\.|AM|PM|TZ|OF|.",
    re.IGNORECASE | re.DOTALL,
)
_NAMES = ("MONTH", "MON", "DAY", "DY", "AM", "PM", "A.M.", "P.M.", "TZ")  # text: in the pattern's case


def _number(pattern: str, t: datetime) -> tuple[int, int] | None:
    """A numeric pattern's value and its width (zero-padded unless FM)."""
    iso = t.isocalendar()
    values = {
        "HH24": (t.hour, 2),
        "HH12": ((t.hour - 1) % 12 + 1, 2),
        "HH": ((t.hour - 1) % 12 + 1, 2),
        "MI": (t.minute, 2),
        "SS": (t.second, 2),
        "MS": (t.microsecond // 1000, 3),
        "US": (t.microsecond, 6),
        "IYYY": (iso.year, 4),
        "YYYY": (t.year, 4),
        "YYY": (t.year % 1000, 3),
        "YY": (t.year % 100, 2),
        "Y": (t.year % 10, 1),
        "MM": (t.month, 2),
        "DDD": (t.timetuple().tm_yday, 3),
        "DD": (t.day, 2),
        "D": (t.isoweekday() % 7 + 1, 1),  # Sunday 1, as PostgreSQL's
        "ID": (t.isoweekday(), 1),
        "IW": (iso.week, 2),
        "WW": ((t.timetuple().tm_yday - 1) // 7 + 1, 2),
        "W": ((t.day - 1) // 7 + 1, 1),
        "Q": ((t.month - 1) // 3 + 1, 1),
    }
    return values.get(pattern.upper())


def _text(pattern: str, t: datetime, fill: bool) -> str:
    """A text pattern's value in the pattern's case (`Month`, `MONTH`, `month`); names padded to
    9 characters unless FM, as PostgreSQL's."""
    upper = pattern.upper()
    if upper in ("AM", "PM", "A.M.", "P.M."):
        value = ("PM" if t.hour >= 12 else "AM") if len(upper) == 2 else ("P.M." if t.hour >= 12 else "A.M.")
    elif upper == "TZ":
        value = t.tzname() or ""
    elif upper in ("MONTH", "DAY"):
        value = t.strftime("%B" if upper == "MONTH" else "%A")
        value = value.ljust(9) if fill else value
    else:
        value = t.strftime("%b" if upper == "MON" else "%a")
    if pattern.isupper():
        return value.upper()
    return value.lower() if pattern.islower() else value  # `Month`, `Dy`: as the C locale spells them


def to_char(value: str | None, format_text: str | None) -> str | None:
    """PostgreSQL's to_char(t, format) (SqlReader registers it) for a timestamp or a date, in the
    session's zone: `YYYY-MM-DD HH24:MI`, `FMMonth DD`, `Dy`, `IYYY-IW`, `"week" IW`... (FM
    drops the next pattern's padding; a quoted text is itself). Null in, null out. ValueError
    for a value that is neither (to_char of a number is not served)."""
    if value is None or format_text is None:
        return None
    t = _local(value) if isinstance(value, str) else None
    if t is None:
        raise ValueError(
            f"to_char: {str(value)[:40]!r} is not a timestamp or a date (numbers are not served)"
        )
    out, fill = [], True
    for found in _PATTERN.finditer(format_text):
        pattern = found.group(0)
        if pattern.upper() == "FM":
            fill = False
            continue
        if pattern.startswith('"'):
            out.append(re.sub(r"\\(.)", r"\1", pattern[1:-1]))
        elif pattern.upper() == "OF":
            out.append(_offset(t))
        elif (number := _number(pattern, t)) is not None:
            out.append(f"{number[0]:0{number[1]}d}" if fill else str(number[0]))
        elif pattern.upper() in _NAMES:
            out.append(_text(pattern, t, fill))
        else:
            out.append(pattern)
        fill = True
    return "".join(out)


# to_timestamp's and to_date's fields: each pattern's digits at most, and what it sets.
_READ_FIELDS = {
    "YYYY": (4, "year"),
    "MM": (2, "month"),
    "DD": (2, "day"),
    "HH24": (2, "hour"),
    "HH12": (2, "hour12"),
    "HH": (2, "hour12"),
    "MI": (2, "minute"),
    "SS": (2, "second"),
    "MS": (3, "ms"),
    "US": (6, "us"),
}
_DIGITS = re.compile(r"\d+")
_UNREAD = frozenset(
    "IYYY YYY YY Y MONTH MON DAY DDD DY ID D IW WW W Q A.M. P.M. AM PM TZ OF".split()
)  # to_char's other patterns


def _read(text: str, format_text: str, function: str) -> datetime:
    """`text` read by a PostgreSQL format of numeric fields (`YYYY-MM-DD HH24:MI:SS.US`, what
    Superset's time filters write), in the session's zone: a field takes up to its digits (fewer
    when a separator comes first), any other character of the format skips one character of the
    text, spaces skip spaces. ValueError naming a pattern that is not served (names of months,
    ISO weeks, time zones) or text that does not fit."""
    fields: dict[str, int] = {}
    at = 0
    for found in _PATTERN.finditer(format_text):
        pattern = found.group(0).upper()
        if pattern == "FM":
            continue
        if pattern in _READ_FIELDS:
            width, field = _READ_FIELDS[pattern]
            digits = _DIGITS.match(text, at, min(len(text), at + width))
            if digits is None:
                raise ValueError(f"{function}: {text[:40]!r} has no number for {found.group(0)} at {at + 1}")
            value = digits.group(0)
            if field in ("ms", "us"):  # a fraction of a second: `SS.MS` reads `12.3` as 300 ms
                value = value.ljust(width, "0")
            fields[field], at = int(value), digits.end()
        elif pattern.startswith('"'):  # a quoted text: as many characters of the text
            at += len(re.sub(r"\\(.)", r"\1", found.group(0)[1:-1]))
        elif pattern in _UNREAD:
            raise ValueError(
                f"{function}: the pattern {found.group(0)} is not served (YYYY, MM, DD, HH24, HH12, MI, SS,"
                " MS, US, quoted text and separators are)"
            )
        elif pattern.isspace():
            while at < len(text) and text[at].isspace():
                at += 1
        elif at < len(text):
            at += 1
    if text[at:].strip():
        raise ValueError(f"{function}: {text[:40]!r} goes on past its format {format_text[:40]!r}")
    hour = fields.get("hour", fields.get("hour12", 0) % 12)
    fraction = fields.get("us", fields.get("ms", 0) * 1000)
    try:
        read = datetime(
            fields.get("year", 1),
            fields.get("month", 1),
            fields.get("day", 1),
            hour,
            fields.get("minute", 0),
            fields.get("second", 0),
            fraction,
        )
    except ValueError as err:
        raise ValueError(f"{function}: {text[:40]!r} is no date: {err}") from None
    return read.replace(tzinfo=ZONE.get()())


def to_timestamp(value: str | float | None, *format_text: str | None) -> str | None:
    """PostgreSQL's to_timestamp (SqlReader registers it): of seconds since 1970 (one argument),
    or of text read by a format (`_read`), as a timestamp in the session's zone. Null in, null out."""
    if value is None or None in format_text:
        return None
    if not format_text:
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"to_timestamp: {str(value)[:40]!r} is not a number of seconds") from None
        try:
            found = _UNIX + timedelta(seconds=seconds)
        except OverflowError:
            raise ValueError(f"to_timestamp: {seconds} seconds is out of range") from None
        return _shown(found.astimezone(ZONE.get()()))
    return _shown(_read(str(value), str(format_text[0]), "to_timestamp"))


def to_date(value: str | None, format_text: str | None) -> str | None:
    """PostgreSQL's to_date(text, format) (SqlReader registers it): the date `_read` reads."""
    if value is None or format_text is None:
        return None
    return _read(str(value), format_text, "to_date").date().isoformat()
