"""Doubles in PostgreSQL's text format, as psql and every text-format client read them."""

import math

import pytest

from services.views.numbers import float8_text


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (4.0, "4"),  # Python's repr says 4.0
        (-0.0, "-0"),
        (3.5, "3.5"),
        (0.1, "0.1"),
        (1e-4, "0.0001"),
        (1.5e-5, "1.5e-05"),
        (123456789012345.0, "123456789012345"),
        (1e15, "1e+15"),  # Python's repr keeps 1000000000000000.0 up to 1e16
        (-1234567890123456.8, "-1.2345678901234568e+15"),
        (1e16, "1e+16"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
    ],
)
def test_a_double_is_written_as_postgresql_writes_it(value: float, shown: str) -> None:
    assert float8_text(value) == shown


def test_what_is_written_reads_back_as_the_same_double() -> None:
    for value in (2.0 / 3, 1e15 + 0.5, 5e-324, 9007199254740993.0, 1e22, -7.25):
        assert float(float8_text(value)) == value
