"""Schemas of what flows through the job: ratings, Debezium change events, customer versions."""

from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

__all__ = [
    "CDC_ENVELOPE",
    "CORRUPT",
    "CUSTOMER_COLUMNS",
    "CUSTOMER_FIELDS",
    "RATING_FIELDS",
    "RATING_PARSE_SCHEMA",
    "RATING_TEXT_SCHEMA",
    "REQUIRED_RATING_FIELDS",
    "VERSION_FIELDS",
]

CORRUPT = "_corrupt_record"

# A rating as the web site writes it (DESIGN.md, "Records").
RATING_FIELDS = StructType(
    [
        StructField("rating_id", LongType()),
        StructField("user_id", IntegerType()),
        StructField("stars", IntegerType()),
        StructField("route_id", IntegerType()),
        StructField("rating_time", LongType()),
        StructField("channel", StringType()),
        StructField("message", StringType()),
    ]
)
REQUIRED_RATING_FIELDS = ("rating_id", "user_id", "stars", "rating_time")
RATING_PARSE_SCHEMA = StructType([*RATING_FIELDS.fields, StructField(CORRUPT, StringType())])
# The same fields read as text: a field is present when its text is (any JSON value but null).
RATING_TEXT_SCHEMA = StructType(
    [*[StructField(f.name, StringType()) for f in RATING_FIELDS.fields], StructField(CORRUPT, StringType())]
)

# The columns of demo.customers. TIMESTAMP columns arrive from Debezium as ISO-8601 strings.
CUSTOMER_FIELDS = StructType(
    [
        StructField("id", IntegerType()),
        StructField("first_name", StringType()),
        StructField("last_name", StringType()),
        StructField("email", StringType()),
        StructField("gender", StringType()),
        StructField("club_status", StringType()),
        StructField("region", StringType()),
        StructField("comments", StringType()),
        StructField("create_ts", StringType()),
        StructField("update_ts", StringType()),
    ]
)

CUSTOMER_COLUMNS = tuple(
    f.name for f in CUSTOMER_FIELDS.fields if f.name != "id"
)  # a customer's, its id aside

# Debezium's envelope (JSON converter, schemas disabled): the source block of the MariaDB
# connector (binlog file, pos, row, GTID) and of the PostgreSQL one (lsn, sequence).
CDC_SOURCE = StructType(
    [
        StructField("ts_ms", LongType()),
        StructField("db", StringType()),
        StructField("table", StringType()),
        StructField("file", StringType()),
        StructField("pos", LongType()),
        StructField("row", IntegerType()),
        StructField("gtid", StringType()),
        StructField("lsn", LongType()),
        StructField("sequence", StringType()),
        StructField("snapshot", StringType()),
    ]
)
CDC_ENVELOPE = StructType(
    [
        StructField("before", CUSTOMER_FIELDS),
        StructField("after", CUSTOMER_FIELDS),
        StructField("op", StringType()),
        StructField("ts_ms", LongType()),
        StructField("source", CDC_SOURCE),
        StructField(CORRUPT, StringType()),
    ]
)

# One row per version of a customer in the versioned table (Delta).
VERSION_FIELDS = StructType(
    [
        *CUSTOMER_FIELDS.fields,
        StructField("valid_from", LongType()),  # database time of the change, epoch ms
        StructField("deleted", BooleanType()),  # a delete opens a "no customer" version
        StructField("op", StringType()),
        StructField("source_file", StringType()),
        StructField("source_pos", LongType()),
        StructField("source_row", IntegerType()),
        StructField("cdc_partition", IntegerType()),
        StructField("cdc_offset", LongType()),
    ]
)
