"""Ratings' Kafka records -> rating fields and a dead-letter reason (`PARSED`), on the driver.

Arrow's JSON reader parses a batch's values in one call. It stops at the first value it cannot
take whole (not one JSON object, a field of another type, a number out of range), so a batch
that fails is split in halves until each such value stands alone: those few are parsed by Spark
(`transforms.parse_ratings`), which says what is wrong with each. The checks on readable values
(size, UTF-8, required fields, stars, time bounds) are the same on both paths, in the same
order, so a rating gets the same fields and the same reason whichever path read it. A value that is not
UTF-8 is not parsed here, nor sent to Spark: it is a dead letter at once.
"""

import json
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from enrichment_job.json_columns import object_shaped, read_objects, utf8_valid
from enrichment_job.kafka_in import KAFKA
from enrichment_job.plans import Columns, select
from enrichment_job.schemas import RATING_FIELDS, REQUIRED_RATING_FIELDS
from enrichment_job.transforms import KAFKA_META, NOT_JSON, NOT_UTF8, parse_ratings

RAW_SCHEMA = "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP"
FIELDS = to_arrow_schema(RATING_FIELDS)
# A rating as the join takes it: its fields, its Kafka columns and why it is a dead letter (null
# when it is readable). A dead letter keeps its value and has no user_id or rating_time (it
# joins nothing and holds back no customer's ratings); a readable rating's value is dropped.
PARSED = pa.schema([*FIELDS, *KAFKA, ("dlq_reason", pa.string())])
_PARSE = pj.ParseOptions(explicit_schema=FIELDS, unexpected_field_behavior="ignore")
ORDER = [("partition", "ascending"), ("offset", "ascending")]


def parse(raw: pa.Table, spark: SparkSession, max_future_ms: int, max_bytes: int) -> pa.Table:
    """`raw` (the Kafka columns) as `PARSED`, in input order (partition, offset)."""
    raw = raw.cast(KAFKA).sort_by(ORDER)
    values = raw.column("value").combine_chunks()
    sizes = pc.fill_null(pc.binary_length(values), 0)
    utf8 = utf8_valid(values)
    readable = pc.and_(pc.and_(pc.is_valid(values), pc.less_equal(sizes, max_bytes)), utf8)
    shaped = object_shaped(values)
    to_arrow = np.asarray(pc.and_(readable, shaped).to_numpy(zero_copy_only=False), bool)
    fields = _arrow_fields(values, to_arrow)
    left = np.flatnonzero(readable.to_numpy(zero_copy_only=False) & ~to_arrow)
    not_json = np.zeros(len(values), bool)
    not_json[left] = [_no_object(values[int(i)].as_py()) for i in left]
    spark_rows = left[~not_json[left]]
    # The reasons known before a parse, in the order Spark's parse checks (after the size).
    early = pc.if_else(utf8, pa.scalar(None, pa.string()), pa.scalar(NOT_UTF8))
    early = pc.if_else(pa.array(not_json), pa.scalar(NOT_JSON), early)
    parsed = _checked(raw, fields, early, max_future_ms, max_bytes)
    if len(spark_rows):
        by_spark = parse_spark(raw.take(spark_rows), spark, max_future_ms, max_bytes)
        parsed = _replace(parsed, spark_rows, by_spark)
    return parsed


_DECODER = json.JSONDecoder()


def _no_object(value: bytes) -> bool:
    """Whether a value Arrow could not read holds no JSON object in any way Spark's parse reads
    JSON: then its reason is known without a Spark job (a batch that started one took 0.4 to
    5.5 s longer). Python's JSON grammar is Spark's with two exceptions, which go to Spark:
    single-quoted strings (Spark reads them) and what follows a first whole value. A value
    whose first value is an array or an object goes to Spark too; one that cannot be parsed, or
    is a lone string, number, true, false or null, holds no object."""
    if b"'" in value:
        return False
    text = value.decode().lstrip()
    try:
        first, end = _DECODER.raw_decode(text)
    except ValueError:
        return True
    return not text[end:].strip() and not isinstance(first, dict | list)


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
    raw: pa.Table, fields: pa.Table, early: pa.Array, max_future_ms: int, max_bytes: int
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
            pc.greater(rating_time, pc.add(kafka_ms, max_future_ms)),
            f"rating_time more than {max_future_ms} ms after the record's Kafka timestamp"
            " (ENRICH_MAX_FUTURE_MS)",
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


def parse_spark(raw: pa.Table, spark: SparkSession, max_future_ms: int, max_bytes: int) -> pa.Table:
    """`PARSED` by Spark's parse (`transforms.parse_ratings`), row for row."""
    df = spark.createDataFrame(raw, RAW_SCHEMA)
    parsed = select(parse_ratings(df, max_future_ms, max_bytes), _flow_columns()).toArrow()
    return parsed.sort_by(ORDER).cast(PARSED)


@cache
def _flow_columns() -> Columns:
    bad = F.col("dlq_reason").isNotNull()
    cleared = ("user_id", "rating_time")
    return Columns(
        *[F.when(~bad, F.col(n)).alias(n) if n in cleared else F.col(n) for n in RATING_FIELDS.names],
        *[F.when(bad, F.col("value")).alias("value") if c == "value" else F.col(c) for c in KAFKA_META],
        F.col("dlq_reason"),
    )


def _replace(parsed: pa.Table, rows: np.ndarray, by_spark: pa.Table) -> pa.Table:
    """`parsed` with its `rows` (in order) taken from `by_spark` (same order)."""
    index = np.arange(parsed.num_rows)
    index[rows] = parsed.num_rows + np.arange(len(rows))
    both = pa.concat_tables([parsed, by_spark])
    return both.take(pa.array(index)).combine_chunks()
