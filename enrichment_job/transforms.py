"""Pure DataFrame transforms of the job: no I/O, no Python per record, all Spark SQL expressions.

Raw Kafka rows (key, value, topic, partition, offset, timestamp) come in; readable records,
dead letters with their reason, customer versions, and enriched records and alerts go out.

Every micro-batch plans these transforms anew, and each PySpark column expression costs round
trips to the JVM: the expressions are built once (`@cache`), their lists handed to the JVM
once (`plans.Columns`), and a batch's values (watermark, carried clock) come as a one-row table.
"""

from functools import cache
from typing import Any

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from enrichment_job.plans import Columns, aggregate, drop, select, values_row
from enrichment_job.schemas import (
    CDC_ENVELOPE,
    CORRUPT,
    CUSTOMER_FIELDS,
    RATING_FIELDS,
    RATING_PARSE_SCHEMA,
    RATING_TEXT_SCHEMA,
    REQUIRED_RATING_FIELDS,
)

KAFKA_META = ("key", "value", "topic", "partition", "offset", "timestamp")
PARSE_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
CUSTOMER_COLUMNS = [f.name for f in CUSTOMER_FIELDS.fields if f.name != "id"]
HEARTBEAT_TABLE = "debezium_heartbeat"


def _first_reason(checks: list[tuple[Column, str]]) -> Column:
    """The reason of the first failing check, or null when every check passes."""
    reason = F.lit(None).cast("string")
    for failed, text in reversed(checks):
        reason = F.when(failed, F.lit(text)).otherwise(reason)
    return reason


MAX_RATING_BYTES = 900_000


def parse_ratings(raw: DataFrame, max_future_ms: int, max_bytes: int = MAX_RATING_BYTES) -> DataFrame:
    """Rating fields plus `dlq_reason`: null for a readable rating, else why it is not. A
    rating_time before 1970 or more than `max_future_ms` after its Kafka record's timestamp is
    not readable: it would hold back its customer's later ratings until that time, and near the
    top of the long range it overflows the join's arithmetic. A value over `max_bytes` is not
    either: its enriched copy would be over Kafka's limit for a record, and fail every retry.

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
        (suspect & (F.col("_s").isNull() | F.col(f"_s.{CORRUPT}").isNotNull()), "not a JSON object"),
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
            F.col("_r.rating_time") > F.unix_millis("timestamp") + F.lit(max_future_ms),
            f"rating_time more than {max_future_ms} ms after the record's Kafka timestamp"
            " (ENRICH_MAX_FUTURE_MS)",
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
    checks: list[tuple[Column, str]] = [
        (F.json_object_keys("_json").isNull(), "not a JSON object"),
        (F.col(f"_e.{CORRUPT}").isNotNull(), "unreadable change event"),
        (~F.col("_e.op").isin("c", "r", "u", "d") | F.col("_e.op").isNull(), "unknown op"),
        (row_id.isNull(), "change event without a customer id"),
        (F.col("_e.source.ts_ms").isNull(), "change event without source.ts_ms"),
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


def with_batch_values(df: DataFrame, **values: int | None) -> DataFrame:
    """`df` with one column per value, the same on every row: the values of this micro-batch
    (a watermark, a clock). Spark writes a number literal into the Java code it generates, so
    `F.lit` of a value that changes every batch costs compilations every batch (about 6 a batch,
    0.1 to 0.2 s); a column of a one-row local table is data, and the code is compiled once."""
    return df.crossJoin(F.broadcast(values_row(df.sparkSession, **values)))


VERSION_ORDER = ("valid_from", "cdc_partition", "cdc_offset")
POSITION_COLUMNS = ("source_file", "source_pos", "source_row")  # where in the binlog a version is


def with_validity(versions: DataFrame) -> DataFrame:
    """The customer history as people read it: each version with `valid_to` (the next version's
    valid_from, null for the current one). The job itself joins without it (`asof_join`)."""
    order = Window.partitionBy("id").orderBy(*VERSION_ORDER)
    return versions.withColumn("valid_to", F.lead("valid_from").over(order))


def asof_join(
    ratings: DataFrame,
    base: DataFrame,
    grace_ms: int,
    recent: DataFrame | None = None,
    carry: tuple[str, ...] = (),
) -> DataFrame:
    """Each rating with the customer version valid at its rating_time (unmatched ones kept).

    The version valid at t is the customer's latest with valid_from <= t. With none, a rating
    joins the customer's first version if it begins within `grace_ms` after t (the row was
    created a moment after the rating). A deleted version matches no one. `settled` says a
    version valid at t was found (see `release`).

    The versions are append-only (no valid_to to maintain) and come in two parts: `base`, the
    large one, which the caller keeps hash-partitioned and sorted by id like the ratings (so the
    join moves no version), and `recent`, the few versions since, broadcast. Each rating then
    picks its version with one aggregation, in place: its key includes the partitioning column."""
    on_base, on_recent, group, picks, out = _asof_parts(grace_ms, recent is not None, carry)
    joined = ratings.alias("r").join(base.alias("b"), on_base, "left")
    if recent is not None:
        joined = joined.join(F.broadcast(recent.alias("p")), on_recent, "left")
    return select(aggregate(joined, group, picks), out)


@cache
def _asof_parts(
    grace_ms: int, with_recent: bool, carry: tuple[str, ...]
) -> tuple[Column, Column, Columns, Columns, Columns]:
    """asof_join's expressions: the two join conditions, the grouping per rating, the version
    each rating picks, and the output columns."""
    deadline = F.col("r.rating_time") + F.lit(grace_ms)
    on_base = (F.col("b.id") == F.col("r.user_id")) & (F.col("b.valid_from") <= deadline)
    on_recent = (F.col("p.id") == F.col("r.user_id")) & (F.col("p.valid_from") <= deadline)
    sides = ["b", "p"] if with_recent else ["b"]
    # Ordered by VERSION_ORDER first: max/min of these structs pick the latest/earliest version.
    used = [*VERSION_ORDER, "id", *CUSTOMER_COLUMNS, "deleted", "source_file", "source_pos", "source_row"]

    def version(side: str) -> Column:  # null, not a struct of nulls, where the left join found none
        fields = F.struct(*[F.col(f"{side}.{name}").alias(name) for name in used])
        return F.when(F.col(f"{side}.id").isNotNull(), fields)

    def valid_at_time(side: str) -> Column:
        return F.max(F.when(F.col(f"{side}.valid_from") <= F.col("r.rating_time"), version(side)))

    def first(side: str) -> Column:
        return F.min(version(side))

    def across(pick: Any, parts: list[Column]) -> Column:
        return parts[0] if len(parts) == 1 else pick(*parts)

    rating = F.struct(*[F.col(f"r.{name}") for name in (*RATING_FIELDS.names, "timestamp", *carry)])
    group = Columns(F.col("r.user_id"), F.col("r.partition"), F.col("r.offset"))
    picks = Columns(
        F.any_value(rating).alias("rating"),
        across(F.greatest, [valid_at_time(s) for s in sides]).alias("at"),
        across(F.least, [first(s) for s in sides]).alias("first"),
    )
    picked = F.coalesce(F.col("at"), F.col("first"))
    v = F.when(~picked["deleted"], picked)
    matched = v.isNotNull()
    out = Columns(
        # user_id is the grouping column, not the rating's copy: the output then stays
        # partitioned by it and `release` (a window per customer) needs no second shuffle.
        *[
            F.col("user_id") if f.name == "user_id" else F.col(f"rating.{f.name}").alias(f.name)
            for f in RATING_FIELDS.fields
        ],
        *[v[name].alias(name) for name in CUSTOMER_COLUMNS],
        F.when(matched, F.concat_ws(" ", v["first_name"], v["last_name"])).alias("full_name"),
        matched.alias("customer_matched"),
        F.when(matched, F.format_string("%s:%d:%d", *[v[n] for n in POSITION_COLUMNS])).alias(
            "customer_version"
        ),
        v["valid_from"].alias("customer_valid_from"),
        # A version valid at rating_time was found: once the watermark passes rating_time no
        # version still to come can change the pick, whatever the grace.
        F.col("at").isNotNull().alias("settled"),
        F.col("rating.timestamp").alias("rating_kafka_ts"),
        F.col("partition").alias("rating_partition"),
        F.col("offset").alias("rating_offset"),
        *[F.col(f"rating.{name}").alias(name) for name in carry],
    )
    return on_base, on_recent, group, picks, out


def alert_rule(stars_below: int, club_status: str) -> Column:
    """True for enriched ratings that raise an alert: stars < stars_below and the club status."""
    return (F.col("stars") < stars_below) & (F.col("club_status") == club_status)


def alerts(enriched: DataFrame, stars_below: int, club_status: str) -> DataFrame:
    """Enriched ratings that match the alert rule."""
    return enriched.where(alert_rule(stars_below, club_status))


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


def release(joined: DataFrame, grace_ms: int) -> DataFrame:
    """Adds `released` to ratings as `asof_join` gives them, with the batch's `cdc_watermark_ms`
    (`with_batch_values`; null before the first reading): their join can no longer change, and
    every earlier rating of the same customer is released too (order).

    A join is final once the CDC table is complete past rating_time when a version valid at
    rating_time was found (`settled`), else past rating_time + grace: only a customer row created
    within the grace can still come. So the grace delays only ratings of unknown customers."""
    return joined.withColumn("released", _released(grace_ms))


@cache
def _released(grace_ms: int) -> Column:
    watermark = F.col("cdc_watermark_ms")
    final = F.col("rating_time") + F.lit(grace_ms) < watermark
    if grace_ms:
        final = final | (F.col("settled") & (F.col("rating_time") < watermark))
    return F.min(F.coalesce(final, F.lit(False)).cast("int")).over(_earlier()) == 1


@cache
def _earlier() -> WindowSpec:
    """A customer's ratings up to this one, in input order (as `asof_join` names it)."""
    return (
        Window.partitionBy("user_id")
        .orderBy("rating_partition", "rating_offset")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
