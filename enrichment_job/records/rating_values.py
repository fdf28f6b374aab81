"""Ratings' Kafka records -> rating fields and a dead-letter reason (`PARSED`), with no Spark job.

Arrow's JSON reader parses a batch's values in one call. It stops at the first value it cannot
take whole (not one JSON object, a field of another type, a number out of range), so a batch
that fails is split in halves until each such value stands alone: those few are parsed by
Python's JSON parser (`_python_fields`), which says what is wrong with each. The checks on
readable values (size, UTF-8, required fields, field types, stars, time bounds) are the same on
both paths, in the same order and with the same reasons as Spark's parse
(`transforms.parse_ratings`, which a test holds them to), so a rating gets the
same fields and the same reason whichever path read it. Nothing here needs a Spark session: a
batch with unreadable ratings costs what one without them costs, on the driver or in a task.
"""

import json
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql.pandas.types import to_arrow_schema

from enrichment_job.kafka.reader import KAFKA
from enrichment_job.records.json_columns import object_shaped, read_objects, utf8_valid
from enrichment_job.records.schemas import RATING_FIELDS, REQUIRED_RATING_FIELDS
from enrichment_job.records.transforms import NOT_JSON, NOT_UTF8, future_reason

__all__ = ["FIELDS", "ORDER", "PARSED", "parse"]

FIELDS = to_arrow_schema(RATING_FIELDS)
# A rating as the join takes it: its fields, its Kafka columns and why it is a dead letter (null
# when it is readable). A dead letter keeps its value and has no user_id or rating_time (it
# joins nothing and holds back no customer's ratings); a readable rating's value is dropped.
PARSED = pa.schema([*FIELDS, *KAFKA, ("dlq_reason", pa.string())])
_PARSE = pj.ParseOptions(explicit_schema=FIELDS, unexpected_field_behavior="ignore")
ORDER = [("partition", "ascending"), ("offset", "ascending")]


def parse(raw: pa.Table, max_future_ms: int, max_bytes: int, now_ms: int | None = None) -> pa.Table:
    """`raw` (the Kafka columns) as `PARSED`, in input order (partition, offset). `now_ms`:
    the job's clock (default: now), which bounds a rating_time when the record's Kafka
    timestamp, set by its producer, is later."""
    raw = raw.cast(KAFKA).sort_by(ORDER)
    values = raw.column("value").combine_chunks()
    sizes = pc.fill_null(pc.binary_length(values), 0)
    utf8 = utf8_valid(values)
    readable = pc.and_(pc.and_(pc.is_valid(values), pc.less_equal(sizes, max_bytes)), utf8)
    shaped = object_shaped(values)
    to_arrow = np.asarray(pc.and_(readable, shaped).to_numpy(zero_copy_only=False), bool)
    fields = _arrow_fields(values, to_arrow)
    left = np.flatnonzero(readable.to_numpy(zero_copy_only=False) & ~to_arrow)
    # The reasons known before the checks on fields, in the order Spark's parse checks (after
    # the size): not UTF-8, then what the values Arrow could not read say of themselves.
    early = pc.if_else(utf8, pa.scalar(None, pa.string()), pa.scalar(NOT_UTF8))
    if len(left):
        by_python = [_python_fields(values[int(i)].as_py()) for i in left]
        fields = _replace(fields, left, pa.Table.from_pylist([f for f, _ in by_python], schema=FIELDS))
        reasons = np.full(len(values), None, object)
        reasons[left] = [reason for _, reason in by_python]
        early = pc.coalesce(early, pa.array(reasons, pa.string()))
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return _checked(raw, fields, early, max_future_ms, max_bytes, now_ms=now_ms)


_DECODER = json.JSONDecoder()
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "bigint": (-(2**63), 2**63 - 1)}


def _python_fields(value: bytes) -> tuple[dict[str, object], str | None]:
    """The fields of a value Arrow's reader could not take (UTF-8, within the size), and its
    reason when it is not a rating: no JSON object, a missing field or a field of another type,
    checked in the order Spark's parse checks them (`transforms.parse_ratings`). Python's
    parse, one value at a time: such values are few, and a Spark job for them cost 0.4 to 5.5 s
    a batch. It reads JSON as RFC 8259 writes it: one object and nothing after it but
    whitespace, strings in double quotes (Spark's parse would take single quotes and ignore what
    follows the object). NaN and Infinity are taken, as Arrow's reader and Spark's take them.
    As in Spark's parse, a text field takes any JSON value, a value that is not a string as its
    JSON text."""
    text = value.decode().lstrip()
    try:
        obj, end = _DECODER.raw_decode(text)
    except ValueError:
        return {}, NOT_JSON
    if not isinstance(obj, dict) or text[end:].strip():
        return {}, NOT_JSON
    fields: dict[str, object] = {}
    wrong: str | None = None
    for field in FIELDS:
        given = obj.get(field.name)
        typed = _typed(given, field.type)
        if given is not None and typed is None and wrong is None:
            type_name = "bigint" if pa.types.is_int64(field.type) else "int"
            wrong = f"field {field.name} is not {type_name}"
        fields[field.name] = typed
    missing = next((f"missing field {n}" for n in REQUIRED_RATING_FIELDS if obj.get(n) is None), None)
    return fields, missing or wrong


def _typed(given: object, kind: pa.DataType) -> object:
    """`given` as a field of type `kind`; None when it is null or of another type."""
    if given is None:
        return None
    if pa.types.is_string(kind):
        if isinstance(given, str):
            return given
        return json.dumps(given, separators=(",", ":"), ensure_ascii=False)
    low, high = _INT_RANGE["bigint" if pa.types.is_int64(kind) else "int"]
    if type(given) is not int or not low <= given <= high:  # a bool is an int in Python
        return None
    return given


def _arrow_fields(values: pa.Array, wanted: np.ndarray) -> pa.Table:
    """The fields of each value Arrow reads (rows where `wanted`; all null elsewhere). A value
    Arrow cannot read is left out of `wanted` in place."""
    rows = np.flatnonzero(wanted)
    parsed = _read(values.take(rows)) if len(rows) else FIELDS.empty_table()
    if parsed is None:
        good, bad = _bisect(values, rows)
        wanted[bad] = False
        rows = good
        parsed = _concat([_read(values.take(pa.array(chunk))) for chunk in _runs(good)])
    # Spread over all rows: the others' fields are null.
    spots = np.full(len(values), -1, np.int64)
    spots[rows] = np.arange(len(rows))
    take = pa.array(spots, pa.int64(), mask=spots < 0)
    if not parsed.num_rows:
        return pa.table({f.name: pa.nulls(len(values), f.type) for f in FIELDS}, schema=FIELDS)
    return parsed.take(take)


def _concat(tables: list[pa.Table | None]) -> pa.Table:
    present = [t for t in tables if t is not None]
    return pa.concat_tables(present).combine_chunks() if present else FIELDS.empty_table()


def _runs(rows: np.ndarray, size: int = 50_000) -> list[np.ndarray]:
    return [rows[i : i + size] for i in range(0, len(rows), size)] if len(rows) else []


def _read(values: pa.Array) -> pa.Table | None:
    """The values' fields, or None when Arrow cannot read one of them."""
    table = read_objects(values, _PARSE)
    return table.cast(FIELDS) if table is not None else None


def _bisect(values: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`rows` split into those Arrow reads and those it does not, halving what fails."""
    good: list[np.ndarray] = []
    bad: list[np.ndarray] = []
    pending = [rows]
    while pending:
        part = pending.pop()
        if _read(values.take(pa.array(part))) is not None:
            good.append(part)
        elif len(part) == 1:
            bad.append(part)
        else:
            half = len(part) // 2
            pending += [part[half:], part[:half]]
    empty = np.array([], np.int64)
    return (np.sort(np.concatenate(good)) if good else empty), (np.concatenate(bad) if bad else empty)


def _checked(
    raw: pa.Table, fields: pa.Table, early: pa.Array, max_future_ms: int, max_bytes: int, *, now_ms: int
) -> pa.Table:
    """`PARSED` from the Kafka columns and the fields Arrow read (`early`: a value's reason
    known without a parse, or null), with each rating's reason: the first failing check, in the
    order `transforms.parse_ratings` checks."""
    values = raw.column("value")
    n = raw.num_rows
    reason = pa.nulls(n, pa.string())
    kafka_ms = pc.cast(pc.cast(raw.column("timestamp"), pa.timestamp("ms", tz="UTC")), pa.int64())
    stars, rating_time = fields.column("stars"), fields.column("rating_time")
    checks = [
        (pc.is_null(values), "empty value"),
        (
            pc.greater(pc.binary_length(values), max_bytes),
            f"value over {max_bytes} bytes (ENRICH_MAX_RATING_BYTES): its enriched copy would not fit"
            " in a Kafka record",
        ),
        (pc.is_valid(early), early),
        *[(pc.is_null(fields.column(name)), f"missing field {name}") for name in REQUIRED_RATING_FIELDS],
        (pc.invert(pc.and_(pc.greater_equal(stars, 1), pc.less_equal(stars, 5))), "stars outside 1..5"),
        (pc.less(rating_time, 0), "rating_time before 1970-01-01"),
        (
            pc.greater(rating_time, pc.add(pc.min_element_wise(kafka_ms, now_ms), max_future_ms)),
            future_reason(max_future_ms),
        ),
    ]
    for failed, text in reversed(checks):
        given = pa.scalar(text) if isinstance(text, str) else text
        reason = pc.if_else(pc.fill_null(failed, False), given, reason)
    bad = pc.is_valid(reason)
    columns = {
        **{
            f.name: pc.if_else(bad, pa.nulls(n, f.type), fields.column(f.name))
            if f.name in ("user_id", "rating_time")
            else fields.column(f.name)
            for f in FIELDS
        },
        **{name: raw.column(name) for name in KAFKA.names},
        "dlq_reason": reason,
    }
    columns["value"] = pc.if_else(bad, values, pa.nulls(n, pa.binary()))
    return pa.table(columns, schema=PARSED)


def _replace(parsed: pa.Table, rows: np.ndarray, others: pa.Table) -> pa.Table:
    """`parsed` with its `rows` (in order) taken from `others` (same order)."""
    index = np.arange(parsed.num_rows)
    index[rows] = parsed.num_rows + np.arange(len(rows))
    both = pa.concat_tables([parsed, others])
    return both.take(pa.array(index)).combine_chunks()
