"""The extended protocol's parameters read as the values SQLite binds, by their declared type
and format, and refused with PostgreSQL's SQLSTATE when they cannot be read."""

import struct
from decimal import Decimal

import pytest

from services.views.portals import Bind, Statement, bound, inferred_types, parameter_count, read_bind
from services.views.sql import SqlError

INT2, INT4, INT8, TEXT, FLOAT8, BOOL, NUMERIC, UNKNOWN, DATE = 21, 23, 20, 25, 701, 16, 1700, 0, 1082
TIMESTAMP, TIMESTAMPTZ, INTERVAL = 1114, 1184, 1186


def _numeric(value: Decimal) -> bytes:
    """PostgreSQL's binary numeric, as psycopg writes it."""
    sign, digits, exponent = value.as_tuple()
    text = "".join(map(str, digits)) + "0" * max(int(exponent), 0)
    scale = max(-int(exponent), 0)
    whole, fraction = (text[:-scale] or "0", text[-scale:]) if scale else (text, "")
    whole = whole.zfill((len(whole) + 3) // 4 * 4)
    fraction = fraction.ljust((len(fraction) + 3) // 4 * 4, "0")
    groups = [int(whole[i : i + 4]) for i in range(0, len(whole), 4)] + [
        int(fraction[i : i + 4]) for i in range(0, len(fraction), 4)
    ]
    weight = len(whole) // 4 - 1
    head = struct.pack("!hhHh", len(groups), weight, 0x4000 if sign else 0, scale)
    return head + struct.pack(f"!{len(groups)}H", *groups)


def _bind(types: tuple[int, ...], values: tuple[bytes | None, ...], formats: tuple[int, ...] = ()) -> dict:
    return bound(Statement("SELECT 1", types), Bind("", "", formats, values, ()))


def test_text_parameters_are_read_by_their_declared_type() -> None:
    types = (INT4, INT8, FLOAT8, BOOL, BOOL, NUMERIC, NUMERIC, TEXT, UNKNOWN)
    values = (b"42", b"-9000000000", b"2.5", b"t", b"off", b"12.000", b"1.25", b"web", b"42")
    assert _bind(types, values) == {
        "1": 42,
        "2": -9_000_000_000,
        "3": 2.5,
        "4": 1,
        "5": 0,
        "6": 12,
        "7": 1.25,
        "8": "web",
        "9": "42",  # no type declared: text, which SQLite compares with a typed column by its type
    }
    assert _bind((INT4,), (None,)) == {"1": None}


def test_binary_parameters_are_read_by_their_declared_type() -> None:
    values = (
        struct.pack("!h", -7),
        struct.pack("!i", 42),
        struct.pack("!q", 2**40),
        struct.pack("!d", 0.5),
        b"\x01",
        "café".encode(),
        _numeric(Decimal("123456789.5")),
        _numeric(Decimal("-20000")),
    )
    types = (INT2, INT4, INT8, FLOAT8, BOOL, TEXT, NUMERIC, NUMERIC)
    assert _bind(types, values, (1,)) == {
        "1": -7,
        "2": 42,
        "3": 2**40,
        "4": 0.5,
        "5": 1,
        "6": "café",
        "7": 123456789.5,
        "8": -20000,
    }


@pytest.mark.parametrize(
    ("types", "values", "formats", "sqlstate", "text"),
    [
        ((INT4,), (b"4_2x",), (), "22P02", "parameter $1: not a value of type oid 23"),
        ((BOOL,), (b"maybe",), (), "22P02", "invalid input syntax for type boolean"),
        ((INTERVAL,), (b"\0" * 16,), (1,), "0A000", "binary values of type oid 1186 are not served"),
        ((INT4,), (struct.pack("!i", 1),), (2,), "22023", "format code 2"),
        ((INT4, INT4), (b"1",), (), "08P01", "supplies 1 parameters, but the statement requires 2"),
        ((INT4,), (b"1",), (0, 0), "08P01", "2 parameter formats for 1 parameters"),
    ],
)
def test_a_parameter_that_cannot_be_read_is_refused_with_its_sqlstate(
    types: tuple[int, ...], values: tuple[bytes, ...], formats: tuple[int, ...], sqlstate: str, text: str
) -> None:
    with pytest.raises(SqlError) as refused:
        _bind(types, values, formats)
    assert refused.value.sqlstate == sqlstate and text in str(refused.value)


def test_timestamps_and_dates_sent_in_binary_are_read_as_text_the_views_compare() -> None:
    hour = struct.pack("!q", (27 * 365 + 7) * 86_400_000_000 + 5 * 3_600_000_000 + 120_000)  # since 2000
    assert _bind((TIMESTAMPTZ, TIMESTAMP, DATE), (hour, hour, struct.pack("!i", -1)), (1,)) == {
        "1": "2027-01-01 05:00:00.12+00",
        "2": "2027-01-01 05:00:00.12+00",  # without a zone: UTC
        "3": "1999-12-31",
    }
    assert _bind((TIMESTAMPTZ, DATE), (b"2026-12-07 05:00+01", b"2026-12-07"), ()) == {
        "1": "2026-12-07 05:00+01",  # text: as sent, compared by instant
        "2": "2026-12-07",
    }


def test_a_statement_takes_its_highest_parameter_or_as_many_as_it_declares() -> None:
    assert parameter_count("SELECT * FROM v WHERE a = $1 AND b = $3", ()) == 3
    assert parameter_count("SELECT 1", (23, 23)) == 2
    with pytest.raises(SqlError) as refused:
        parameter_count("SELECT $99999", ())
    assert refused.value.sqlstate == "54000"


def test_a_bind_message_shorter_than_it_says_is_a_protocol_violation() -> None:
    body = b"\0\0" + struct.pack("!hh", 0, 1) + struct.pack("!i", 10) + b"abc"
    with pytest.raises(SqlError) as refused:
        read_bind(body)
    assert refused.value.sqlstate == "08P01"


def test_a_parameter_not_declared_takes_the_type_of_the_column_it_is_compared_with() -> None:
    columns = {"user_id": INT4, "ratings": INT8, "average_stars": FLOAT8, "channel": TEXT, "odd name": BOOL}
    sql = (
        "SELECT * FROM v WHERE v.user_id = $1 AND $2 < ratings AND average_stars BETWEEN $3 AND $4"
        ' AND channel NOT IN ($5, $6) AND "Odd Name" = $7 AND channel LIKE $8 AND unknown = $9'
        " AND abs(ratings - $12) < 5 AND $13 * average_stars > 1 AND channel || $14 = 'x'"
        " AND user_id = $15::BIGINT AND $16::double precision > 0 AND $17::varchar = ''"
        " ORDER BY 1 LIMIT $10 OFFSET $11"
    )
    assert inferred_types(sql, columns) == {
        1: INT4,
        2: INT8,
        3: FLOAT8,
        4: FLOAT8,
        5: TEXT,
        6: TEXT,
        7: BOOL,
        8: TEXT,
        10: INT8,
        11: INT8,
        12: INT8,
        13: FLOAT8,
        14: TEXT,
        15: INT8,  # its cast says, before the column it is compared with
        16: FLOAT8,
        17: TEXT,
    }  # $9: no column of that name, left to the client (text)
