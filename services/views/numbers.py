"""Numbers in PostgreSQL's text format, where it differs from Python's."""

import math

__all__ = ["float8_text"]


def float8_text(value: float) -> str:
    """A double as PostgreSQL writes one: its shortest exact digits, as Python's, but no ".0"
    on a whole number (4, not 4.0), and an exponent from 1e+15 on (Python's from 1e+16)."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    shortest = repr(value)
    size = abs(value)
    if size < 1e15 or size >= 1e16:  # Python's notation is PostgreSQL's, bar a whole number's ".0"
        return shortest[:-2] if shortest.endswith(".0") else shortest
    whole, _, fraction = shortest.lstrip("-").partition(".")
    digits = (whole + fraction).rstrip("0")
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{'-' if value < 0 else ''}{mantissa}e+{len(whole) - 1:02d}"
