"""Pure DataFrame transforms of the job: no I/O, no Python per record, all Spark SQL expressions.

Raw Kafka rows (key, value, topic, partition, offset, timestamp) come in; readable records
and dead letters with their reason go out. The job parses on the driver with Arrow and leaves
to these the records Arrow cannot read (`rating_values`, `change_events`), where Spark says
what is wrong with each; the views job parses the enriched stream with them.

Each PySpark column expression costs round trips to the JVM: the expressions are built once
(`@cache`), and their lists handed to the JVM once (`plans.Columns`).
"""

from collections.abc import Sequence
from functools import cache

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from enrichment_job.records.schemas import (
    CDC_ENVELOPE,
    CORRUPT,
    CUSTOMER_FIELDS,
    RATING_FIELDS,
    RATING_PARSE_SCHEMA,
    RATING_TEXT_SCHEMA,
    REQUIRED_RATING_FIELDS,
)
from enrichment_job.runtime.plans import Columns, drop, select

__all__ = [
    "DRIFT",
    "HEARTBEAT_TABLE",
    "KAFKA_META",
    "MAX_RATING_BYTES",
    "NOT_JSON",
    "NOT_UTF8",
    "PARSE_OPTIONS",
    "VERSION_ORDER",
    "dead_letter_headers",
    "dead_letters",
    "future_reason",
    "parse_cdc",
    "parse_ratings",
    "with_validity",
]

KAFKA_META = ("key", "value", "topic", "partition", "offset", "timestamp")
PARSE_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
HEARTBEAT_TABLE = "debezium_heartbeat"
# The reason of a change event whose row lacks customer columns, before their names.
DRIFT = "change event without customer columns (renamed or dropped in the database?): "


def _first_reason(checks: Sequence[tuple[Column, str | Column]]) -> Column:
    """The reason of the first failing check, or null when every check passes."""
    reason = F.lit(None).cast("string")
    for failed, text in reversed(checks):
        reason = F.when(failed, F.lit(text) if isinstance(text, str) else text).otherwise(reason)
    return reason


MAX_RATING_BYTES = 900_000
# What the job writes is UTF-8 JSON: a value that is not UTF-8 would carry its bytes into it.
NOT_UTF8 = "value is not valid UTF-8"
NOT_JSON = "not a JSON object"


def future_reason(max_future_ms: int) -> str:
    """Why a rating_time too far ahead is a dead letter. The bound starts at the record's Kafka
    timestamp or at the job's clock, whichever is earlier: a producer sets the timestamp of a
    topic with CreateTime, and one set ahead would otherwise let its ratings through, each
    holding its customer's later ratings until that time."""
    return (
        f"rating_time more than {max_future_ms} ms after the record's Kafka timestamp or the job's "
        "clock, the earlier (ENRICH_MAX_FUTURE_MS)"
    )


def parse_ratings(raw: DataFrame, max_future_ms: int, max_bytes: int = MAX_RATING_BYTES) -> DataFrame:
    """Rating fields plus `dlq_reason`: null for a readable rating, else why it is not. A
    rating_time before 1970 or more than `max_future_ms` after its Kafka record's timestamp (or
    the job's clock, when that is earlier) is not readable: it would hold back its customer's
    later ratings until that time, and near the top of the long range it overflows the join's
    arithmetic. A value over `max_bytes` is not either: its enriched copy would be over Kafka's
    limit for a record, and fail every retry.

    One typed parse of each value. Only a value that parse cannot take whole (not JSON, or a
    field of the wrong type) is read a second time, every field as text, to say which fields are
    present and which have the wrong type: JSON parsing is the largest cost per rating."""
    typed, text, fields = _rating_parse(max_future_ms, max_bytes)
    return select(select(select(raw, typed), text), fields)


@cache
def _rating_parse(max_future_ms: int, max_bytes: int) -> tuple[Columns, Columns, Columns]:
    value = F.col("value").cast("string")
    typed = Columns(
        *[F.col(c) for c in KAFKA_META],
        F.from_json(value, RATING_PARSE_SCHEMA, PARSE_OPTIONS).alias("_r"),
    )
    suspect = F.col("_r").isNull() | F.col(f"_r.{CORRUPT}").isNotNull()
    text = Columns(
        *[F.col(c) for c in KAFKA_META],
        F.col("_r"),
        F.when(suspect, F.from_json(value, RATING_TEXT_SCHEMA, PARSE_OPTIONS)).alias("_s"),
    )

    def present(name: str) -> Column:  # any JSON value but null
        return F.when(suspect, F.col(f"_s.{name}").isNotNull()).otherwise(F.col(f"_r.{name}").isNotNull())

    checks: list[tuple[Column, str]] = [
        (F.col("value").isNull(), "empty value"),
        (
            F.length("value") > max_bytes,
            f"value over {max_bytes} bytes (ENRICH_MAX_RATING_BYTES): its enriched copy would not fit"
            " in a Kafka record",
        ),
        (~F.is_valid_utf8("value"), NOT_UTF8),
        (suspect & (F.col("_s").isNull() | F.col(f"_s.{CORRUPT}").isNotNull()), NOT_JSON),
    ]
    checks += [(~present(name), f"missing field {name}") for name in REQUIRED_RATING_FIELDS]
    checks += [
        (
            suspect & F.col(f"_s.{field.name}").isNotNull() & F.col(f"_r.{field.name}").isNull(),
            f"field {field.name} is not {field.dataType.simpleString()}",
        )
        for field in RATING_FIELDS.fields
    ]
    checks.append((~F.col("_r.stars").between(1, 5), "stars outside 1..5"))
    checks.append((F.col("_r.rating_time") < 0, "rating_time before 1970-01-01"))
    checks.append(
        (
            F.col("_r.rating_time")
            > F.least(F.unix_millis("timestamp"), F.unix_millis(F.current_timestamp()))
            + F.lit(max_future_ms),
            future_reason(max_future_ms),
        )
    )
    fields = Columns(
        *[F.col(f"_r.{f.name}").alias(f.name) for f in RATING_FIELDS.fields],
        *[F.col(c) for c in KAFKA_META],
        _first_reason(checks).alias("dlq_reason"),
    )
    return typed, text, fields


def parse_cdc(raw: DataFrame) -> DataFrame:
    """Debezium change events: the envelope, `is_tombstone`, and `dlq_reason` (null when readable)."""
    read, fields = _cdc_parse()
    return drop(select(select(raw, read), fields), (CORRUPT,))


@cache
def _cdc_parse() -> tuple[Columns, Columns]:
    text = F.col("value").cast("string")
    read = Columns(
        *[F.col(c) for c in KAFKA_META],
        text.alias("_json"),
        F.from_json(text, CDC_ENVELOPE, PARSE_OPTIONS).alias("_e"),
    )
    row_id = F.when(F.col("_e.op") == "d", F.col("_e.before.id")).otherwise(F.col("_e.after.id"))
    # Debezium writes every column of a row, null or not: a customer column that is not there
    # was renamed or dropped, and reading it as null would change the customer (a club_status
    # gone null turns the alerts off). A heartbeat's row is another table's.
    keys = F.json_object_keys(F.get_json_object("_json", "$.after"))
    row = (F.col("_e.op") != "d") & (F.col("_e.source.table") != HEARTBEAT_TABLE) & keys.isNotNull()
    expected = F.array(*[F.lit(name) for name in CUSTOMER_FIELDS.names])
    missing = F.when(row, F.array_except(expected, keys)).otherwise(F.array().cast("array<string>"))
    checks: list[tuple[Column, str | Column]] = [
        (~F.is_valid_utf8("value"), NOT_UTF8),
        (F.json_object_keys("_json").isNull(), "not a JSON object"),
        (F.col(f"_e.{CORRUPT}").isNotNull(), "unreadable change event"),
        (~F.col("_e.op").isin("c", "r", "u", "d") | F.col("_e.op").isNull(), "unknown op"),
        (row_id.isNull(), "change event without a customer id"),
        (F.col("_e.source.ts_ms").isNull(), "change event without source.ts_ms"),
        (F.size(missing) > 0, F.concat(F.lit(DRIFT), F.array_join(missing, ", "))),
    ]
    tombstone = F.col("value").isNull()
    heartbeat = F.col("_e.source.table") == HEARTBEAT_TABLE
    # The heartbeat row's ts is the database clock in milliseconds; change events only carry
    # whole seconds (the binlog's resolution). A snapshot read is no reading: it carries the
    # snapshot's time while rows of the snapshot are still to come, valid from their own older
    # update_ts; the clock starts with the first change streamed after the snapshot.
    beat_ms = F.unix_millis(F.try_to_timestamp(F.get_json_object("_json", "$.after.ts")))
    fields = Columns(
        F.col("_e.*"),
        row_id.alias("customer_id"),
        heartbeat.alias("is_heartbeat"),
        F.when(F.col("_e.op") == "r", F.lit(None).cast("long"))
        .when(heartbeat, F.coalesce(beat_ms, F.col("_e.source.ts_ms")))
        .otherwise(F.col("_e.source.ts_ms"))
        .alias("reading_ms"),
        tombstone.alias("is_tombstone"),
        *[F.col(c) for c in KAFKA_META],
        F.when(tombstone, F.lit(None)).otherwise(_first_reason(checks)).alias("dlq_reason"),
    )
    return read, fields


VERSION_ORDER = ("valid_from", "cdc_partition", "cdc_offset")


def with_validity(versions: DataFrame) -> DataFrame:
    """The customer history as people read it: each version with `valid_to` (the next version's
    valid_from, null for the current one). The job itself joins without it (`versions.py`)."""
    order = Window.partitionBy("id").orderBy(*VERSION_ORDER)
    return versions.withColumn("valid_to", F.lead("valid_from").over(order))


def dead_letters(bad: DataFrame, stage: str, keep: tuple[str, ...] = ()) -> DataFrame:
    """The original key and bytes, with the reason and origin as headers (Kafka Connect style),
    plus the `keep` columns unchanged."""
    return select(bad, _dead_letter_columns(stage, keep))


@cache
def _dead_letter_columns(stage: str, keep: tuple[str, ...]) -> Columns:
    return Columns(
        F.col("key"),
        F.col("value"),
        dead_letter_headers(stage).alias("headers"),
        *[F.col(c) for c in keep],
    )


@cache
def dead_letter_headers(stage: str, partition: str = "partition", offset: str = "offset") -> Column:
    """dlq.reason, dlq.stage, dlq.topic, dlq.partition, dlq.offset, from the columns dlq_reason,
    topic, `partition` and `offset`."""

    def header(name: str, value: Column) -> Column:
        return F.struct(F.lit(f"dlq.{name}").alias("key"), value.cast("string").cast("binary").alias("value"))

    return F.array(
        header("reason", F.col("dlq_reason")),
        header("stage", F.lit(stage)),
        header("topic", F.col("topic")),
        header("partition", F.col(partition)),
        header("offset", F.col(offset)),
    )
