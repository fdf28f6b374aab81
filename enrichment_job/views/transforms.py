"""Pure DataFrame transforms of the views job: enriched records in, the rows each view counts
out, with the reason for each record a view cannot count."""

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

from enrichment_job.records.schemas import CORRUPT
from enrichment_job.records.transforms import KAFKA_META, PARSE_OPTIONS
from foundation.enriched import ENRICHED_FIELDS as RECORD_FIELDS

__all__ = [
    "ENRICHED_FIELDS",
    "EVERY_FIELD",
    "FIELDS",
    "HOUR_MS",
    "REQUIRED",
    "hour_start",
    "late_for_hour",
    "parse_enriched",
]

HOUR_MS = 3_600_000

# What the views read of an enriched rating (the job's output; foundation/enriched.py).
ENRICHED_FIELDS = StructType(
    [
        StructField("rating_id", LongType()),
        StructField("user_id", IntegerType()),
        StructField("stars", IntegerType()),
        StructField("rating_time", LongType()),
        StructField("channel", StringType()),
        StructField("message", StringType()),
        StructField("club_status", StringType()),
        StructField("full_name", StringType()),
        StructField("customer_matched", BooleanType()),
        StructField("cdc_watermark_ms", LongType()),
    ]
)
REQUIRED = ("rating_id", "user_id", "stars", "rating_time", "customer_matched", "cdc_watermark_ms")
FIELDS = tuple(f.name for f in ENRICHED_FIELDS.fields)
_SPARK_TYPES = {int: LongType(), str: StringType(), bool: BooleanType()}
# Every field of the enriched record, for the views declared in SQL (users select any of them);
# those the built-in views read keep their types here.
EVERY_FIELD = StructType(
    [
        next((f for f in ENRICHED_FIELDS.fields if f.name == field.name), None)
        or StructField(field.name, _SPARK_TYPES[field.kind])
        for field in RECORD_FIELDS
    ]
)


def parse_enriched(raw: DataFrame, fields: StructType = ENRICHED_FIELDS) -> DataFrame:
    """Kafka rows -> their Kafka columns, the enriched `fields` (the built-in views' by default;
    `EVERY_FIELD`), and `dlq_reason` (null when the record is readable).

    The value is parsed once, inside a generator (`inline`): as a projection, the optimizer
    inlines the parse into every field and every check that reads it, and into the filters
    pushed down to it, which parsed each record about six times (22 us a record instead of 4)."""
    schema = StructType([*fields.fields, StructField(CORRUPT, StringType())])
    parsed = F.from_json(F.col("value").cast("string"), schema, PARSE_OPTIONS)
    checks: list[tuple[Column, str]] = [
        (F.col("value").isNull(), "empty value"),
        (F.col(CORRUPT).isNotNull(), "not an enriched rating (JSON)"),
        *[(F.col(name).isNull(), f"missing {name}") for name in REQUIRED],
    ]
    reason = F.lit(None).cast("string")
    for failed, text in reversed(checks):
        reason = F.when(failed, F.lit(text)).otherwise(reason)
    return raw.select(*KAFKA_META, F.inline(F.array(parsed))).select(
        *KAFKA_META, *(f.name for f in fields.fields), reason.alias("dlq_reason")
    )


def hour_start() -> Column:
    """The UTC hour of `rating_time`, as a timestamp."""
    return F.date_trunc("hour", F.timestamp_millis("rating_time"))


def late_for_hour(lateness_ms: int) -> Column:
    """Why a rating is not counted in its hour, or null. An hour's window closes `lateness_ms`
    after the hour ends, on the clock of the database as the enrichment job knew it when it
    released the rating (`cdc_watermark_ms`, on the record): so a replay decides the same, and
    the decision does not depend on how the records fall into batches."""
    closes = F.unix_millis(hour_start()) + F.lit(HOUR_MS + lateness_ms)
    text = F.concat(
        F.lit("late: the window of hour "),
        F.date_format(hour_start(), "yyyy-MM-dd'T'HH"),
        F.lit(" closed at "),
        F.date_format(F.timestamp_millis(closes), "yyyy-MM-dd'T'HH:mm:ss'Z'"),
        F.lit("; the rating was released at "),
        F.date_format(F.timestamp_millis("cdc_watermark_ms"), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"),
    )
    return F.when(F.col("cdc_watermark_ms") >= closes, text)
