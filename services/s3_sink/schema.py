"""The lake's explicit Arrow schema, and how a batch read from JSON becomes a table of it.

Two schemas: `WIRE_SCHEMA` says how the JSON of an enriched rating is read (JSON numbers as
int64, text as string), `LAKE_SCHEMA` is what the Parquet files hold: narrow integers, UTC
timestamps, dictionary-encoded low-cardinality text, and the Kafka coordinates of each row.
"""

import pyarrow as pa

from foundation.enriched import ENRICHED_FIELDS

__all__ = [
    "ARROW_KINDS",
    "CATEGORY",
    "KAFKA_COLUMNS",
    "LAKE_SCHEMA",
    "TEXT",
    "UTC_MS",
    "WIRE_SCHEMA",
    "to_lake_table",
]

TEXT = pa.string()
CATEGORY = pa.dictionary(pa.int32(), pa.string())
UTC_MS = pa.timestamp("ms", tz="UTC")

# The enriched rating's declared fields, as they are read from JSON.
ARROW_KINDS = {int: pa.int64(), str: TEXT, bool: pa.bool_()}
WIRE_SCHEMA = pa.schema([(f.name, ARROW_KINDS[f.kind]) for f in ENRICHED_FIELDS])

# the Parquet files: (name, type, nullable, the wire column it comes from)
_LAKE_COLUMNS: list[tuple[str, pa.DataType, bool, str]] = [
    ("rating_id", pa.int64(), False, "rating_id"),
    ("user_id", pa.int64(), False, "user_id"),
    ("stars", pa.int8(), False, "stars"),
    ("route_id", pa.int64(), True, "route_id"),
    ("rating_time", UTC_MS, False, "rating_time"),
    ("rating_time_ms", pa.int64(), False, "rating_time"),
    ("channel", CATEGORY, True, "channel"),
    ("message", TEXT, True, "message"),
    ("first_name", TEXT, True, "first_name"),
    ("last_name", TEXT, True, "last_name"),
    ("email", TEXT, True, "email"),
    ("gender", CATEGORY, True, "gender"),
    ("club_status", CATEGORY, True, "club_status"),
    ("region", CATEGORY, True, "region"),
    ("comments", TEXT, True, "comments"),
    ("create_ts", TEXT, True, "create_ts"),
    ("update_ts", TEXT, True, "update_ts"),
    ("full_name", TEXT, True, "full_name"),
    ("customer_matched", pa.bool_(), False, "customer_matched"),
    ("customer_version", TEXT, True, "customer_version"),
    ("customer_valid_from", UTC_MS, True, "customer_valid_from"),
    ("rating_kafka_ts", TEXT, True, "rating_kafka_ts"),
    ("rating_partition", pa.int64(), True, "rating_partition"),
    ("rating_offset", pa.int64(), True, "rating_offset"),
    ("cdc_watermark_ms", pa.int64(), True, "cdc_watermark_ms"),
    ("enriched_ms", pa.int64(), True, "enriched_ms"),
]
KAFKA_COLUMNS = [
    pa.field("kafka_topic", CATEGORY, nullable=False),
    pa.field("kafka_partition", pa.int32(), nullable=False),
    pa.field("kafka_offset", pa.int64(), nullable=False),
]
LAKE_SCHEMA = pa.schema(
    [pa.field(name, kind, nullable=nullable) for name, kind, nullable, _ in _LAKE_COLUMNS] + KAFKA_COLUMNS
)


def to_lake_table(wire: pa.Table, topics: list[str], partitions: list[int], offsets: list[int]) -> pa.Table:
    """Validated wire rows plus their Kafka coordinates (one per row) as a LAKE_SCHEMA table."""
    columns: list[pa.Array | pa.ChunkedArray] = [
        wire.column(source).cast(kind) for _, kind, _, source in _LAKE_COLUMNS
    ]
    columns += [
        pa.array(topics, pa.string()).dictionary_encode(),
        pa.array(partitions, pa.int32()),
        pa.array(offsets, pa.int64()),
    ]
    return pa.Table.from_arrays(columns, schema=LAKE_SCHEMA)
