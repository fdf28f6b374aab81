"""Pure DataFrame transforms of the job: no I/O, no Python per record, all Spark SQL expressions.

Raw Kafka rows (key, value, topic, partition, offset, timestamp) come in; readable records,
dead letters with their reason, customer versions, and enriched records and alerts go out.
"""

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

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
CDC_ORDER = ("partition", "offset")


def _first_reason(checks: list[tuple[Column, str]]) -> Column:
    """The reason of the first failing check, or null when every check passes."""
    reason = F.lit(None).cast("string")
    for failed, text in reversed(checks):
        reason = F.when(failed, F.lit(text)).otherwise(reason)
    return reason


def parse_ratings(raw: DataFrame) -> DataFrame:
    """Rating fields plus `dlq_reason`: null for a readable rating, else why it is not.

    Two parses of each value, no more: every field read as text says which fields are present
    (and whether the value is a JSON object at all), the typed read says which have their type."""
    text = F.col("value").cast("string")
    parsed = raw.withColumn("_s", F.from_json(text, RATING_TEXT_SCHEMA, PARSE_OPTIONS)).withColumn(
        "_r", F.from_json(text, RATING_PARSE_SCHEMA, PARSE_OPTIONS)
    )
    checks: list[tuple[Column, str]] = [
        (F.col("value").isNull(), "empty value"),
        (F.col("_s").isNull() | F.col(f"_s.{CORRUPT}").isNotNull(), "not a JSON object"),
    ]
    checks += [(F.col(f"_s.{name}").isNull(), f"missing field {name}") for name in REQUIRED_RATING_FIELDS]
    checks += [
        (
            F.col(f"_s.{field.name}").isNotNull() & F.col(f"_r.{field.name}").isNull(),
            f"field {field.name} is not {field.dataType.simpleString()}",
        )
        for field in RATING_FIELDS.fields
    ]
    checks.append((~F.col("_r.stars").between(1, 5), "stars outside 1..5"))
    return parsed.select(
        *[F.col(f"_r.{f.name}").alias(f.name) for f in RATING_FIELDS.fields],
        *KAFKA_META,
        _first_reason(checks).alias("dlq_reason"),
    )


def parse_cdc(raw: DataFrame) -> DataFrame:
    """Debezium change events: the envelope, `is_tombstone`, and `dlq_reason` (null when readable)."""
    text = F.col("value").cast("string")
    parsed = raw.withColumn("_json", text).withColumn("_e", F.from_json(text, CDC_ENVELOPE, PARSE_OPTIONS))
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
    # whole seconds (the binlog's resolution).
    beat_ms = F.unix_millis(F.to_timestamp(F.get_json_object("_json", "$.after.ts")))
    return parsed.select(
        F.col("_e.*"),
        row_id.alias("customer_id"),
        heartbeat.alias("is_heartbeat"),
        F.when(heartbeat, F.coalesce(beat_ms, F.col("_e.source.ts_ms")))
        .otherwise(F.col("_e.source.ts_ms"))
        .alias("reading_ms"),
        tombstone.alias("is_tombstone"),
        *KAFKA_META,
        F.when(tombstone, F.lit(None)).otherwise(_first_reason(checks)).alias("dlq_reason"),
    ).drop(CORRUPT)


def cdc_clock(events: DataFrame, clock_ms: int | None, position: tuple[int, int, int] | None) -> DataFrame:
    """Readable change events (no tombstones) in CDC order, with the database clock and whether
    each is a replayed duplicate. `clock_ms` and `position` carry the state of the events before.

    `clock_ms`: the running maximum of the database times read so far (heartbeat readings in ms,
    change times in whole seconds). The CDC topic is in binlog order, which is commit order, so
    every later change was committed at or after it: it is a lower bound of each change's commit
    time, and the completeness watermark: no change still to come can be valid before it.
    `binlog`: (file number, position, row); a change at or before the furthest position already
    seen is Debezium re-sending it after a restart (at-least-once) and is marked `duplicate`.
    Snapshot reads share the snapshot's position, so they are never duplicates."""
    snapshot = F.col("op") == "r"
    file_no = F.regexp_extract(F.col("source.file"), r"(\d+)$", 1).cast("long")
    binlog = F.struct(
        file_no.alias("file"), F.col("source.pos").alias("pos"), F.col("source.row").cast("long").alias("row")
    )
    upto = Window.orderBy(*CDC_ORDER).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before = Window.orderBy(*CDC_ORDER).rowsBetween(Window.unboundedPreceding, -1)
    carried_clock = F.lit(clock_ms).cast("long")
    carried_pos = (
        F.struct(
            *(F.lit(v).cast("long").alias(n) for v, n in zip(position, ("file", "pos", "row"), strict=True))
        )
        if position is not None
        else F.lit(None).cast(binlog_type())
    )
    seen = F.max(F.when(~snapshot, F.col("binlog"))).over(before)
    furthest = (
        F.when(seen.isNull(), carried_pos)
        .when(carried_pos.isNull(), seen)
        .otherwise(F.greatest(seen, carried_pos))
    )
    return (
        events.withColumn("binlog", binlog)
        .withColumn("clock_ms", F.greatest(F.max("reading_ms").over(upto), carried_clock))
        .withColumn("duplicate", ~snapshot & furthest.isNotNull() & (F.col("binlog") <= furthest))
        .withColumn("furthest", F.max(F.when(~snapshot, F.col("binlog"))).over(upto))
    )


def binlog_type() -> StructType:
    return StructType([StructField(n, LongType()) for n in ("file", "pos", "row")])


def version_columns() -> list[Column]:
    """Change events of `cdc_clock` as versions (VERSION_FIELDS): create/read/update open a
    version with the row's values; a delete opens a `deleted` version, which ends the one before.

    A change is valid from the database clock at its place in the binlog. A snapshot read ("r")
    carries the snapshot's time instead, so it is valid from the row's own update_ts when it has
    one: a customer that existed before the connector started still matches older ratings."""
    deleted = F.col("op") == "d"
    row_time = F.unix_millis(F.to_timestamp(F.col("after.update_ts")))
    valid_from = F.when(F.col("op") == "r", F.coalesce(row_time, F.col("clock_ms"))).otherwise(
        F.col("clock_ms")
    )
    return [
        F.col("customer_id").alias("id"),
        *[
            F.when(deleted, F.lit(None)).otherwise(F.col(f"after.{name}")).alias(name)
            for name in CUSTOMER_COLUMNS
        ],
        valid_from.alias("valid_from"),
        deleted.alias("deleted"),
        F.col("op"),
        F.col("source.file").alias("source_file"),
        F.col("source.pos").alias("source_pos"),
        F.col("source.row").alias("source_row"),
        F.col("partition").alias("cdc_partition"),
        F.col("offset").alias("cdc_offset"),
    ]


def to_versions(events: DataFrame) -> DataFrame:
    """`version_columns` of customer change events that are not duplicates."""
    return events.where((F.col("source.table") == "customers") & ~F.col("duplicate")).select(
        *version_columns()
    )


VERSION_ORDER = ("valid_from", "cdc_partition", "cdc_offset")


def with_validity(versions: DataFrame) -> DataFrame:
    """The customer history as people read it: each version with `valid_to` (the next version's
    valid_from, null for the current one). The job itself joins without it (`asof_join`)."""
    order = Window.partitionBy("id").orderBy(*VERSION_ORDER)
    return versions.withColumn("valid_to", F.lead("valid_from").over(order))


def asof_join(ratings: DataFrame, versions: DataFrame, grace_ms: int) -> DataFrame:
    """Each rating with the customer version valid at its rating_time (unmatched ones kept).

    The version valid at t is the customer's latest with valid_from <= t. With none, a rating
    joins the customer's first version if it begins within `grace_ms` after t (the row was
    created a moment after the rating). A deleted version matches no one.

    The versions are append-only (no valid_to to maintain): the batch's ratings are broadcast
    and the in-memory versions scanned once; one small aggregation per rating picks its version."""
    r, v = ratings.alias("r"), versions.alias("v")
    used = ["id", *CUSTOMER_COLUMNS, "valid_from", "deleted", "source_file", "source_pos", "source_row"]
    keys = r.select("user_id", "rating_time", "partition", "offset")
    condition = (F.col("v.id") == F.col("k.user_id")) & (
        F.col("v.valid_from") <= F.col("k.rating_time") + F.lit(grace_ms)
    )
    hits = v.join(F.broadcast(keys.alias("k")), condition, "inner")
    version = F.struct(*[F.col(f"v.{name}").alias(name) for name in used])
    order = F.struct(*[F.col(f"v.{name}") for name in VERSION_ORDER])
    at_time = F.max_by(version, F.when(F.col("v.valid_from") <= F.col("k.rating_time"), order))
    first = F.min_by(version, order)
    chosen = (
        hits.groupBy(F.col("k.partition").alias("hit_partition"), F.col("k.offset").alias("hit_offset"))
        .agg(F.coalesce(at_time, first).alias("c"))
        .where("NOT c.deleted")
        .select("hit_partition", "hit_offset", "c.*")
    )
    v = chosen.alias("v")
    on_hit = (F.col("r.partition") == F.col("v.hit_partition")) & (F.col("r.offset") == F.col("v.hit_offset"))
    matched = F.col("v.id").isNotNull()
    return r.join(F.broadcast(v), on_hit, "left").select(
        *[F.col(f"r.{f.name}") for f in RATING_FIELDS.fields],
        *[F.col(f"v.{name}") for name in CUSTOMER_COLUMNS],
        F.when(matched, F.concat_ws(" ", "v.first_name", "v.last_name")).alias("full_name"),
        matched.alias("customer_matched"),
        F.when(matched, F.format_string("%s:%d:%d", "v.source_file", "v.source_pos", "v.source_row")).alias(
            "customer_version"
        ),
        F.col("v.valid_from").alias("customer_valid_from"),
        F.col("r.timestamp").alias("rating_kafka_ts"),
        F.col("r.partition").alias("rating_partition"),
        F.col("r.offset").alias("rating_offset"),
    )


def alert_rule(stars_below: int, club_status: str) -> Column:
    """True for enriched ratings that raise an alert: stars < stars_below and the club status."""
    return (F.col("stars") < stars_below) & (F.col("club_status") == club_status)


def alerts(enriched: DataFrame, stars_below: int, club_status: str) -> DataFrame:
    """Enriched ratings that match the alert rule."""
    return enriched.where(alert_rule(stars_below, club_status))


def as_kafka_records(
    df: DataFrame, key: str, keep: tuple[str, ...] = (), value_columns: list[str] | None = None
) -> DataFrame:
    """key (string) and value (JSON of `value_columns`, default every column), plus the `keep`
    columns unchanged."""
    in_value = value_columns if value_columns is not None else df.columns
    return df.select(
        F.col(key).cast("string").alias("key"),
        # Nulls stay in the record (an unmatched rating says club_status: null, not nothing).
        F.to_json(F.struct(*[F.col(c) for c in in_value]), {"ignoreNullFields": "false"}).alias("value"),
        *keep,
    )


def dead_letters(bad: DataFrame, stage: str, keep: tuple[str, ...] = ()) -> DataFrame:
    """The original key and bytes, with the reason and origin as headers (Kafka Connect style),
    plus the `keep` columns unchanged."""

    def header(name: str, value: Column) -> Column:
        return F.struct(F.lit(f"dlq.{name}").alias("key"), value.cast("string").cast("binary").alias("value"))

    return bad.select(
        "key",
        "value",
        F.array(
            header("reason", F.col("dlq_reason")),
            header("stage", F.lit(stage)),
            header("topic", F.col("topic")),
            header("partition", F.col("partition")),
            header("offset", F.col("offset")),
        ).alias("headers"),
        *keep,
    )


def release(ratings: DataFrame, watermark_ms: int | None, grace_ms: int) -> DataFrame:
    """Adds `released`: the CDC table is complete past rating_time + grace (so the join can no
    longer change), and every earlier rating of the same customer is released too (order)."""
    if watermark_ms is None:
        return ratings.withColumn("released", F.lit(False))
    ready = (F.col("rating_time") + F.lit(grace_ms) < F.lit(watermark_ms)).cast("int")
    earlier = (
        Window.partitionBy("user_id")
        .orderBy("partition", "offset")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return ratings.withColumn("released", F.min(ready).over(earlier) == 1)
