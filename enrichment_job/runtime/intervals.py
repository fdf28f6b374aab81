"""Intervals written the way Spark's processingTime trigger reads them: "500 milliseconds",
"1 second", "0.5 seconds", "interval 1 minute 30 seconds".

One grammar for every interval the product takes in text: the jobs' triggers, a view's
trigger and its retention. It follows Spark's own parser (`IntervalUtils.stringToInterval`)
for what a trigger accepts: a number, then a space, then a unit of fixed length (week, day,
hour, minute, second, millisecond, microsecond; an `s` may follow), as many times as wanted;
a fraction only on seconds; no sign but `+`; no month or year. A value refused here is refused
when the program starts, with the setting's name, rather than by Spark at the first batch.
"""

import re
from typing import Annotated

from pydantic import AfterValidator

__all__ = ["Interval", "interval_ms"]

_UNITS_US = {
    "week": 604_800_000_000,
    "day": 86_400_000_000,
    "hour": 3_600_000_000,
    "minute": 60_000_000,
    "second": 1_000_000,
    "millisecond": 1_000,
    "microsecond": 1,
}
_NUMBER = r"\+?(?:\d+(?:\.\d*)?|\.\d+)"
_PART = re.compile(rf"({_NUMBER})\s+([a-z]+)(?:\s+|$)", re.IGNORECASE)
_EXAMPLE = "e.g. '500 milliseconds', '0.5 seconds' or '1 minute 30 seconds'"


def interval_ms(text: str) -> int:
    """`text` in whole milliseconds (microseconds are rounded down, as a trigger does); a
    ValueError that says why for what a trigger would not take."""
    rest = re.sub(r"^interval\s+", "", text.strip(), flags=re.IGNORECASE)
    if not rest:
        raise ValueError(f"{text!r} is not an interval: {_EXAMPLE}")
    total_us, at = 0, 0
    while at < len(rest):
        part = _PART.match(rest, at)
        if part is None:
            raise ValueError(
                f"{text!r} is not an interval: give numbers, each with a unit after a space (week,"
                f" day, hour, minute, second, millisecond, microsecond), {_EXAMPLE}"
            )
        number, unit = part.group(1).lstrip("+"), part.group(2).lower().removesuffix("s")
        if unit not in _UNITS_US:
            raise ValueError(
                f"{text!r} is not an interval: {part.group(2)!r} is not a unit of fixed length"
                " (week, day, hour, minute, second, millisecond, microsecond)"
            )
        whole, point, fraction = number.partition(".")
        if point and unit != "second":
            raise ValueError(f"{text!r} is not an interval: only seconds take a fraction, {_EXAMPLE}")
        total_us += int(whole or 0) * _UNITS_US[unit]
        if point:  # seconds: the fraction's first six digits are microseconds
            total_us += int((fraction + "000000")[:6])
        at = part.end()
    return total_us // 1_000


def _checked(value: str) -> str:
    interval_ms(value)  # raises for what Spark would not take
    return value


Interval = Annotated[str, AfterValidator(_checked)]
"""A setting's type for an interval in text: pydantic refuses one `interval_ms` refuses, naming
the setting."""
