"""A view's timestamps as PostgreSQL serves them: text, binary, order by instant, the clock."""

import contextvars
import functools
import re
import sqlite3
import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from services.views.timestamps import (
    COLLATION,
    INTERVALS,
    STATEMENT_TIME,
    ZONE,
    age,
    between,
    binary_date,
    binary_timestamp,
    cast,
    date_of_binary,
    date_part,
    date_trunc,
    interval,
    interval_order,
    now,
    order,
    pg_date,
    pg_text,
    rewritten,
    shifted,
    stored,
    timestamp_of_binary,
    to_char,
    to_date,
    to_timestamp,
    zone_named,
)


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("2026-12-07T05:00:00.000Z", "2026-12-07 05:00:00+00"),  # Spark's JSON
        ("2026-12-07T05:00:00.120Z", "2026-12-07 05:00:00.12+00"),
        ("2026-12-07T05:00:00.000", "2026-12-07 05:00:00+00"),  # without a zone: UTC
        ("2026-12-07 06:30:00+01:30", "2026-12-07 05:00:00+00"),
        ("2026-12-07", "2026-12-07 00:00:00+00"),
        ("not a time", "not a time"),
    ],
)
def test_a_stored_timestamp_is_shown_in_postgresql_s_text_format_in_utc(stored: str, shown: str) -> None:
    assert pg_text(stored) == shown


def test_timestamps_order_by_instant_whatever_their_spelling() -> None:
    assert order("2026-12-07T05:00:00.000Z", "2026-12-07 05:00:00+00") == 0
    assert order("2026-12-07T05:00:00.000Z", "2026-12-07 06:00:00+02") == 1  # 04:00 UTC
    assert order("2026-12-07 04:59", "2026-12-07T05:00:00.000Z") == -1
    assert order("2026-12-08", "2026-12-07T23:59:59.999Z") == 1
    assert order("b", "a") == 1  # no timestamp: as text


def test_a_timestamp_column_compares_by_instant_in_sqlite() -> None:
    conn = sqlite3.connect(":memory:")
    conn.create_collation(COLLATION, order)
    hours = ", ".join(f"('2026-12-07T0{h}:00:00.000Z')" for h in range(5))
    conn.execute(f"CREATE TEMP VIEW v AS SELECT column1 COLLATE {COLLATION} AS t FROM (VALUES {hours})")  # noqa: S608
    after = conn.execute("SELECT t FROM v WHERE t >= '2026-12-07 03:00' ORDER BY t DESC").fetchall()
    assert after == [("2026-12-07T04:00:00.000Z",), ("2026-12-07T03:00:00.000Z",)]
    between = "SELECT count(*) FROM v WHERE t BETWEEN '2026-12-07T01:00:00Z' AND '2026-12-07 04:00:00+01'"
    assert conn.execute(between).fetchone() == (3,)  # 01:00, 02:00, 03:00 UTC
    assert conn.execute("SELECT max(t) FROM v").fetchone() == ("2026-12-07T04:00:00.000Z",)


def _masked(sql: str) -> str:
    """`sql` with its strings blanked, as the SQL reader hands it over."""
    return re.sub(r"'[^']*'", lambda m: "'" + "_" * (len(m.group(0)) - 2) + "'", sql)


def _operand_start(text: str, end: int) -> int:
    """Where the operand that ends at `end` starts: a name, or a call with its parentheses (the
    SQL reader's own finds any operand)."""
    i = len(text[:end].rstrip())
    if text[i - 1] == ")":
        depth = 0
        while True:
            i -= 1
            depth += (text[i] == ")") - (text[i] == "(")
            if depth == 0:
                break
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
        i -= 1
    return i


def _clock_connection() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.create_collation(COLLATION, order)
    conn.create_function("now", 0, now)  # as the SQL reader's connections have them
    conn.create_function("pg_shift", 3, shifted)
    return conn


def test_now_shifted_by_an_interval_is_the_statement_s_clock_on_the_session_s_calendar() -> None:
    sql = "SELECT 'now() - 1' AS s, now(), now() - interval '90 seconds', now() + interval '1 day'"
    out = rewritten(sql, _masked, _operand_start)
    assert out.startswith("SELECT 'now() - 1' AS s, now(), (pg_shift(now(), '-', '90 seconds')")
    started = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)  # the eve of Berlin's spring change of clocks

    def run() -> Any:
        STATEMENT_TIME.set(started)
        ZONE.set(lambda: zone_named("Europe/Berlin"))
        return _clock_connection().execute(out).fetchone()

    assert contextvars.copy_context().run(run) == (
        "now() - 1",
        "2026-03-28 13:00:00+01",
        "2026-03-28 12:58:30+01",  # the same statement's instant, 90 s earlier
        "2026-03-29 13:00:00+02",  # a calendar day, as PostgreSQL adds it: 23 hours that day
    )


def test_an_interval_postgresql_refuses_refuses_a_shift_of_the_clock_too() -> None:
    sql = rewritten("SELECT now() - interval '1 fortnight'", _masked, _operand_start)
    with pytest.raises(sqlite3.OperationalError):  # the reader turns it into SQLSTATE 22007
        _clock_connection().execute(sql).fetchone()


def test_casts_to_time_types_are_written_for_sqlite_and_others_left() -> None:
    assert (
        cast("'2026-12-07 05:00'", "timestamptz") == f"(CAST('2026-12-07 05:00' AS TEXT) COLLATE {COLLATION})"
    )
    assert cast("hour_start", "TIMESTAMP") == f"(CAST(hour_start AS TEXT) COLLATE {COLLATION})"
    assert cast("hour_start", "date") == "pg_date(hour_start)"  # its date in the session's zone
    assert cast("x", "bigint") is None
    conn = sqlite3.connect(":memory:")
    conn.create_function("pg_date", 1, pg_date)
    assert conn.execute("SELECT " + cast("'2026-12-07T05:00:00.000Z'", "date")).fetchone() == ("2026-12-07",)


def test_binary_formats_count_from_2000_as_postgresql_s_do() -> None:
    assert binary_timestamp("2000-01-01 00:00:01+00") == struct.pack("!q", 1_000_000)
    assert binary_timestamp("1999-12-31T23:59:59.000Z") == struct.pack("!q", -1_000_000)
    assert timestamp_of_binary(struct.pack("!q", 1_500_000)) == "2000-01-01 00:00:01.5+00"
    assert binary_date("2000-01-02") == struct.pack("!i", 1)
    assert date_of_binary(struct.pack("!i", 9_837)) == "2026-12-07"
    with pytest.raises(ValueError):
        binary_timestamp("soon")


@pytest.mark.parametrize(
    ("field", "start"),
    [
        ("milliseconds", "2026-12-09 05:34:21.164+00"),
        ("second", "2026-12-09 05:34:21+00"),
        ("minute", "2026-12-09 05:34:00+00"),
        ("HOUR", "2026-12-09 05:00:00+00"),
        ("day", "2026-12-09 00:00:00+00"),
        ("week", "2026-12-07 00:00:00+00"),  # its Monday
        ("month", "2026-12-01 00:00:00+00"),
        ("quarter", "2026-10-01 00:00:00+00"),
        ("year", "2026-01-01 00:00:00+00"),
        ("fortnight", None),  # no field of PostgreSQL's: null
    ],
)
def test_date_trunc_gives_the_start_of_the_field_in_utc(field: str, start: str | None) -> None:
    assert date_trunc(field, "2026-12-09T07:34:21.164567+02:00") == start


def test_date_trunc_of_no_timestamp_is_null() -> None:
    assert date_trunc("hour", None) is None
    assert date_trunc("hour", "soon") is None


def test_extract_is_date_part_and_one_inside_another_or_a_string_is_handled() -> None:
    sql = (
        "SELECT floor(extract(epoch FROM hour_start) / 300) * 300 AS time, 'extract(day from x)',"
        " EXTRACT ( hour from date_trunc('day', extract(epoch from t)) ) FROM v"
    )
    assert rewritten(sql, _masked, _operand_start) == (
        "SELECT floor(date_part('epoch', hour_start) / 300) * 300 AS time, 'extract(day from x)',"
        " date_part('hour', date_trunc('day', date_part('epoch', t))) FROM v"
    )
    assert (
        rewritten("SELECT extract(day FROM t", _masked, _operand_start) == "SELECT extract(day FROM t"
    )  # SQLite's error


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("epoch", 1_796_794_461.164567),
        ("year", 2026.0),
        ("quarter", 4.0),
        ("month", 12.0),
        ("week", 50.0),
        ("day", 9.0),
        ("dow", 3.0),  # a Wednesday
        ("isodow", 3.0),
        ("doy", 343.0),
        ("HOUR", 5.0),
        ("minute", 34.0),
        ("second", 21.164567),
        ("milliseconds", 21_164.567),
        ("microseconds", 21_164_567.0),
        ("fortnight", None),
    ],
)
def test_date_part_gives_postgresql_s_fields_in_utc(field: str, value: float | None) -> None:
    found = date_part(field, "2026-12-09T07:34:21.164567+02:00")
    assert found == pytest.approx(value) if value is not None else found is None


def test_a_filter_s_timestamp_takes_the_stored_form_which_compares_as_text_by_instant() -> None:
    assert stored("2026-12-07 06:30:00.1234+01:30") == "2026-12-07T05:00:00.123Z"
    assert stored("2026-12-07") == "2026-12-07T00:00:00.000Z"
    assert stored("soon") is None


def _in(zone: str, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` in a session whose TimeZone is `zone`, as a connection's task runs it."""

    def run() -> Any:
        ZONE.set(lambda: zone_named(zone))
        return function(*args)

    return contextvars.copy_context().run(run)


@pytest.mark.parametrize(
    ("value", "zone"),
    [
        ("UTC", UTC),
        ("DEFAULT", UTC),
        ("Europe/Berlin", ZoneInfo("Europe/Berlin")),
        ("-7", timezone(timedelta(hours=-7))),  # a number of hours: ISO's sign
        ("5.5", timezone(timedelta(hours=5, minutes=30))),
        ("UTC+3", timezone(timedelta(hours=-3))),  # POSIX's sign: west of Greenwich
        ("+05:30", timezone(timedelta(hours=-5, minutes=-30))),
    ],
)
def test_a_time_zone_is_read_as_postgresql_reads_its_timezone_setting(value: str, zone: Any) -> None:
    assert zone_named(value) == zone


@pytest.mark.parametrize("value", ["Europe/Nowhere", "../../etc/passwd", "16", "UTC+16", "", "1 hour"])
def test_a_time_zone_postgresql_would_refuse_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(value))):
        zone_named(value)


def test_a_session_s_zone_shows_reads_truncates_and_dates_timestamps() -> None:
    late = "2026-12-07T23:30:00.000Z"  # Monday 8 December, 00:30, in Berlin
    assert _in("Europe/Berlin", pg_text, late) == "2026-12-08 00:30:00+01"
    assert _in("Asia/Kathmandu", pg_text, late) == "2026-12-08 05:15:00+05:45"
    assert _in("America/St_Johns", pg_text, late) == "2026-12-07 20:00:00-03:30"
    assert _in("Europe/Berlin", pg_date, late) == "2026-12-08" and pg_date(late) == "2026-12-07"
    assert _in("Europe/Berlin", date_trunc, "day", late) == "2026-12-08 00:00:00+01"
    assert _in("Europe/Berlin", date_part, "hour", late) == 0.0
    assert _in("Europe/Berlin", date_part, "epoch", late) == date_part("epoch", late)  # an instant's
    # a literal without a zone is in the session's: 00:30 in Berlin is 23:30 UTC
    assert _in("Europe/Berlin", order, "2026-12-08 00:30", late) == 0
    assert order("2026-12-08 00:30", late) == 1
    # a day the clocks change: it starts at +01 and its noon is at +02
    spring = "2026-03-29T12:00:00.000Z"
    assert _in("Europe/Berlin", pg_text, spring) == "2026-03-29 14:00:00+02"
    assert _in("Europe/Berlin", date_trunc, "day", spring) == "2026-03-29 00:00:00+01"
    assert _in("Europe/Berlin", date_trunc, "hour", spring) == "2026-03-29 14:00:00+02"


@pytest.mark.parametrize(
    ("pattern", "shown"),
    [
        ("YYYY-MM-DD HH24:MI:SS.MS", "2026-12-07 05:04:03.120"),
        ("yyyy-mm-dd", "2026-12-07"),  # numbers in any case
        ("FMMonth DD, YYYY", "December 07, 2026"),  # FM: the next pattern only
        ("Month|MONTH|month", "December |DECEMBER |december "),  # padded to 9, in the pattern's case
        ("Dy, FMDD Mon", "Mon, 7 Dec"),
        ("HH12:MI AM", "05:04 AM"),
        ('IYYY-"W"IW', "2026-W50"),  # a quoted text is itself
        ("Q YYYY", "4 2026"),
        ("DDD D ID", "341 2 1"),  # day of the year; of the week, Sunday 1; ISO's, Monday 1
        ("OF TZ", "+00 UTC"),
    ],
)
def test_to_char_formats_a_timestamp_as_postgresql_does(pattern: str, shown: str) -> None:
    assert to_char("2026-12-07T05:04:03.120Z", pattern) == shown


def test_to_char_is_in_the_session_s_zone_and_refuses_what_is_no_time() -> None:
    assert _in("Asia/Kolkata", to_char, "2026-12-07T23:04:00.000Z", "YYYY-MM-DD HH24:MI OF TZ") == (
        "2026-12-08 04:34 +05:30 IST"
    )
    assert to_char(None, "YYYY") is None and to_char("2026-12-07", None) is None
    with pytest.raises(ValueError, match="is not a timestamp or a date"):
        to_char(3.14, "999.99")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("start", "sign", "interval", "shown"),
    [
        ("2026-12-07T05:00:00.000Z", "+", "1 day", "2026-12-08 05:00:00+00"),
        ("2026-12-07T05:00:00.000Z", "-", "90 minutes", "2026-12-07 03:30:00+00"),
        (
            "2026-12-07T05:00:00.000Z",
            "+",
            "-30 day",
            "2026-11-07 05:00:00+00",
        ),  # Metabase's "previous 30 days"
        ("2026-12-07T05:00:00.000Z", "+", "1 day 02:30", "2026-12-08 07:30:00+00"),
        ("2026-12-07T05:00:00.000Z", "+", "@ 2 hours ago", "2026-12-07 03:00:00+00"),
        ("2026-12-07T05:00:00.000Z", "+", "1.5 days", "2026-12-08 17:00:00+00"),
        ("2026-12-07T05:00:00.000Z", "+", "250 ms", "2026-12-07 05:00:00.25+00"),
        ("2026-01-31T10:00:00.000Z", "+", "1 mon", "2026-02-28 10:00:00+00"),  # the month's last day
        ("2024-02-29T10:00:00.000Z", "+", "1 year", "2025-02-28 10:00:00+00"),
        ("2026-12-07", "+", "1 week", "2026-12-14 00:00:00+00"),  # a date: its midnight
        ("not a time", "+", "1 day", None),
        (None, "+", "1 day", None),
    ],
)
def test_an_interval_shifts_a_timestamp_as_postgresql_adds_one(
    start: str | None, sign: str, interval: str, shown: str | None
) -> None:
    assert shifted(start, sign, interval) == shown


def test_a_day_is_a_day_on_the_session_s_calendar_and_24_hours_are_24_hours() -> None:
    before_spring = "2026-03-28T11:00:00.000Z"  # noon in Berlin, the day before the clocks change
    assert _in("Europe/Berlin", shifted, before_spring, "+", "1 day") == "2026-03-29 12:00:00+02"
    assert _in("Europe/Berlin", shifted, before_spring, "+", "24 hours") == "2026-03-29 13:00:00+02"
    assert shifted(before_spring, "+", "1 day") == "2026-03-29 11:00:00+00"  # UTC has no such day


@pytest.mark.parametrize("interval", ["banana", "1 fortnight", "1 day and 2 hours", "12:xx"])
def test_an_interval_postgresql_would_refuse_is_refused(interval: str) -> None:
    with pytest.raises(ValueError, match="invalid input syntax for type interval"):
        shifted("2026-12-07T05:00:00.000Z", "+", interval)


def test_any_operand_plus_an_interval_is_shifted_and_strings_are_left_alone() -> None:
    sql = "SELECT date_trunc('week', t + interval '1 day') - INTERVAL '1 day', 'x - interval 1' FROM v"
    assert rewritten(sql, _masked, _operand_start) == (
        f"SELECT (pg_shift(date_trunc('week', (pg_shift(t, '+', '1 day') COLLATE {COLLATION})), '-', '1 day')"  # noqa: S608
        f" COLLATE {COLLATION}), 'x - interval 1' FROM v"
    )


@pytest.mark.parametrize(
    ("later", "earlier", "shown"),
    [
        ("2026-12-09T05:30:00.000Z", "2026-12-07T02:30:00.000Z", "2 days 03:00:00"),
        ("2026-12-08T05:00:00.000Z", "2026-12-07T05:00:00.000Z", "1 day"),
        ("2026-12-07T05:00:05.250Z", "2026-12-07T05:00:00.000Z", "00:00:05.25"),
        ("2026-12-07T02:30:00.000Z", "2026-12-08T05:00:00.000Z", "-1 days -02:30:00"),
        ("2026-12-07 06:00:00+01", "2026-12-07T05:00:00.000Z", "00:00:00"),  # one instant
        ("not a time", "2026-12-07T05:00:00.000Z", None),
        (None, "2026-12-07T05:00:00.000Z", None),
    ],
)
def test_the_difference_of_two_timestamps_is_postgresql_s_interval(
    later: str | None, earlier: str, shown: str | None
) -> None:
    assert between(later, earlier) == shown


@pytest.mark.parametrize(
    ("field", "value"),
    [("epoch", 183_600.0), ("day", 2.0), ("hour", 3.0), ("minute", 0.0), ("second", 0.0), ("dow", None)],
)
def test_date_part_reads_an_interval_s_fields(field: str, value: float | None) -> None:
    assert date_part(field, "2 days 03:00:00") == value
    assert date_part(field, between("2026-12-09T05:30:00.000Z", "2026-12-07T02:30:00.000Z")) == value


@pytest.mark.parametrize(
    ("later", "earlier", "shown"),
    [
        ("2026-12-07T05:00:00.000Z", "2025-10-31T06:30:00.000Z", "1 year 1 mon 6 days 22:30:00"),
        ("2025-10-31T06:30:00.000Z", "2026-12-07T05:00:00.000Z", "-1 years -1 mons -6 days -22:30:00"),
        ("2026-03-01T00:00:00.000Z", "2026-01-31T00:00:00.000Z", "1 mon 1 day"),  # January's days borrowed
        ("2026-12-07T05:00:00.000Z", "2026-12-07T05:00:00.000Z", "00:00:00"),
        ("2026-12-07T05:00:00.000Z", "not a time", None),
    ],
)
def test_age_subtracts_field_by_field_as_postgresql_does(later: str, earlier: str, shown: str | None) -> None:
    assert age(later, earlier) == shown


def test_age_of_one_timestamp_is_from_today_s_midnight_and_its_fields_can_be_extracted() -> None:
    midnight = date_trunc("day", now())
    assert midnight is not None
    assert age(shifted(midnight, "-", "3 days")) == "3 days"
    assert date_part("year", age("2026-12-07T05:00:00.000Z", "2025-10-31T06:30:00.000Z")) == 1.0
    assert date_part("day", age("2026-12-07T05:00:00.000Z", "2025-10-31T06:30:00.000Z")) == 6.0


@pytest.mark.parametrize(
    ("literal", "shown"),
    [
        ("90 minutes", "01:30:00"),
        ("1 mon 2 days", "1 mon 2 days"),
        ("@ 2 hours ago", "-02:00:00"),
        ("1.5 days", "1 day 12:00:00"),
        ("0", None),  # PostgreSQL refuses a number without a unit too
    ],
)
def test_an_interval_literal_is_written_as_postgresql_writes_it(literal: str, shown: str | None) -> None:
    if shown is None:
        with pytest.raises(ValueError, match="invalid input syntax for type interval"):
            interval(literal)
    else:
        assert interval(literal) == shown


def test_intervals_compare_by_length_a_month_thirty_days_and_text_that_is_none_after_them() -> None:
    ordered = ["-1 days -02:30:00", "00:00:05.25", "23:00:00", "1 day", "1 mon", "1 year", "no interval"]
    assert sorted(reversed(ordered), key=functools.cmp_to_key(interval_order)) == ordered
    assert interval_order("1 mon", "30 days") == 0 and interval_order("1 day", "24:00:00") == 0


def test_an_interval_literal_standing_alone_is_typed_as_an_interval() -> None:
    sql = "SELECT interval '90 min', now() - t > interval '10 minutes', 'interval ''1 day''' FROM v"
    typed = f"COLLATE {INTERVALS})"
    assert rewritten(sql, _masked, _operand_start) == (  # the SQL reader's arithmetic takes `now() - t`
        f"SELECT (pg_interval('90 min') {typed}, now() - t > (pg_interval('10 minutes') {typed},"  # noqa: S608
        " 'interval ''1 day''' FROM v"
    )
    assert cast("'1 day'", "interval") == f"(pg_interval('1 day') COLLATE {INTERVALS})"


def test_to_timestamp_reads_seconds_or_text_by_its_format_in_the_session_s_zone() -> None:
    superset = "YYYY-MM-DD HH24:MI:SS.US"  # what Superset's time filters write
    assert to_timestamp("2026-12-07 13:05:09.000000", superset) == "2026-12-07 13:05:09+00"
    assert (
        to_timestamp("2026-12-07 13:05:09.5", superset) == "2026-12-07 13:05:09.5+00"
    )  # .5 s, as PostgreSQL
    assert to_timestamp("07/12/2026 1:05", "DD/MM/YYYY HH12:MI") == "2026-12-07 01:05:00+00"
    assert to_timestamp("2026-12-07T13:05", 'YYYY-MM-DD"T"HH24:MI') == "2026-12-07 13:05:00+00"
    assert to_timestamp(1_700_000_000.25) == to_timestamp("1700000000.25") == "2023-11-14 22:13:20.25+00"
    assert to_date("2026-12-07", "YYYY-MM-DD") == "2026-12-07"
    assert to_timestamp(None) is None and to_timestamp("2026", None) is None and to_date(None, "YYYY") is None

    def in_berlin() -> tuple[str | None, str | None]:
        ZONE.set(lambda: zone_named("Europe/Berlin"))
        return to_timestamp("2026-12-07 13:00", "YYYY-MM-DD HH24:MI"), to_timestamp(0)

    assert contextvars.copy_context().run(in_berlin) == ("2026-12-07 13:00:00+01", "1970-01-01 01:00:00+01")


@pytest.mark.parametrize(
    ("text", "format_text", "says"),
    [
        ("Dec 2026", "Mon YYYY", "the pattern Mon is not served"),
        ("2026-13-01", "YYYY-MM-DD", "is no date"),
        ("2026-12-07 x", "YYYY-MM-DD", "goes on past its format"),
        ("x", "YYYY", "has no number for YYYY at 1"),
    ],
)
def test_text_that_does_not_fit_its_format_is_refused_and_says_why(
    text: str, format_text: str, says: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        to_timestamp(text, format_text)
    with pytest.raises(ValueError, match="not a number of seconds"):
        to_timestamp("banana")
