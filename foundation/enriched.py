"""The enriched rating as the enrichment job writes it (to `ratings-with-customer-data`, and the
same shape to the alert topic), read strictly: a record that does not fit is a RecordError."""

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Message
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from foundation.errors import RecordError

__all__ = [
    "ENRICHED_FIELDS",
    "ENRICHED_NAMES",
    "RATING_NAMES",
    "REQUIRED_NAMES",
    "EnrichedField",
    "EnrichedRating",
    "decode_enriched",
    "differs_from",
    "rating_digest",
]


@dataclass(frozen=True)
class EnrichedField:
    name: str
    kind: type  # int, str or bool: the JSON type (numbers are integers)
    required: bool  # never null
    doc: str


_RATING = "the rating, as it came in"
_CUSTOMER = "the customer version it joined (null when unmatched)"

# The enriched rating, declared once. The enrichment job writes these fields in this order, as
# one JSON object per record with nulls kept (to the enriched topic, and the same records to the
# alert topic); `EnrichedRating` reads them in the services, the lake reads them against the
# Arrow schema made from this (services/s3_sink/schema.py), the Elasticsearch template maps each
# of them, and the views read some of them. Unit tests hold every one of those to this list, and
# an integration test feeds the job's real output through each.
ENRICHED_FIELDS: tuple[EnrichedField, ...] = (
    EnrichedField("rating_id", int, True, _RATING),
    EnrichedField("user_id", int, True, f"{_RATING}: the customer id"),
    EnrichedField("stars", int, True, f"{_RATING}: 1..5"),
    EnrichedField("route_id", int, False, _RATING),
    EnrichedField("rating_time", int, True, f"{_RATING}: epoch ms"),
    EnrichedField("channel", str, False, _RATING),
    EnrichedField("message", str, False, f"{_RATING}: text the customer typed"),
    EnrichedField("first_name", str, False, _CUSTOMER),
    EnrichedField("last_name", str, False, _CUSTOMER),
    EnrichedField("email", str, False, _CUSTOMER),
    EnrichedField("gender", str, False, _CUSTOMER),
    EnrichedField("club_status", str, False, _CUSTOMER),
    EnrichedField("region", str, False, _CUSTOMER),
    EnrichedField("comments", str, False, _CUSTOMER),
    EnrichedField("create_ts", str, False, f"{_CUSTOMER}: ISO-8601 UTC"),
    EnrichedField("update_ts", str, False, f"{_CUSTOMER}: ISO-8601 UTC"),
    EnrichedField("full_name", str, False, f"{_CUSTOMER}: first and last name"),
    EnrichedField("customer_matched", bool, True, "a customer version was valid at rating_time"),
    EnrichedField("customer_version", str, False, "the version's source position (binlog or LSN)"),
    EnrichedField("customer_valid_from", int, False, "epoch ms the version became valid"),
    EnrichedField("rating_kafka_ts", str, False, "the rating's Kafka timestamp, ISO-8601 UTC"),
    EnrichedField("rating_partition", int, False, "the rating's Kafka partition"),
    EnrichedField("rating_offset", int, False, "the rating's Kafka offset"),
    EnrichedField("cdc_watermark_ms", int, False, "the CDC watermark the rating was released at"),
    EnrichedField("enriched_ms", int, False, "epoch ms the job enriched it"),
)
ENRICHED_NAMES = tuple(f.name for f in ENRICHED_FIELDS)
# What the rating itself says: two records alike in these are one rating (a producer's retry, a
# replay); two with one rating_id that differ in them are two ratings that share an id.
RATING_NAMES = tuple(f.name for f in ENRICHED_FIELDS if f.doc.startswith(_RATING))
REQUIRED_NAMES = tuple(f.name for f in ENRICHED_FIELDS if f.required)


class EnrichedRating(BaseModel):
    """One enriched rating, read strictly: the fields of ENRICHED_FIELDS (checked below), and no
    others: a field the declaration does not have is an error, not silently dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # the rating
    rating_id: int
    user_id: int
    stars: int = Field(ge=1, le=5)
    route_id: int | None = None
    rating_time: int = Field(description="epoch ms")
    channel: str | None = None
    message: str | None = None
    # the customer version it joined (all null when unmatched)
    first_name: str | None = None
    last_name: str | None = None
    email: str | None = None
    gender: str | None = None
    club_status: str | None = None
    region: str | None = None
    comments: str | None = None
    create_ts: str | None = None
    update_ts: str | None = None
    full_name: str | None = None
    customer_matched: bool
    customer_version: str | None = None
    customer_valid_from: int | None = None
    # latency stamps
    rating_kafka_ts: str | None = None
    rating_partition: int | None = None
    rating_offset: int | None = None
    cdc_watermark_ms: int | None = None
    enriched_ms: int | None = None


def _check_model() -> None:
    """EnrichedRating has exactly the declared fields, in order, of the declared types."""
    declared = [(f.name, f.kind if f.required else f.kind | None) for f in ENRICHED_FIELDS]
    model = [(name, info.annotation) for name, info in EnrichedRating.model_fields.items()]
    if model != declared:
        raise TypeError(f"EnrichedRating does not match ENRICHED_FIELDS: {model} != {declared}")


_check_model()


def decode_enriched(message: Message) -> EnrichedRating:
    value = message.value()
    if value is None:
        raise RecordError("empty value")
    try:
        return EnrichedRating.model_validate_json(value)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise RecordError(f"{where}: {first['msg']}") from None


def differs_from(one: "EnrichedRating", other: Mapping[str, Any]) -> str | None:
    """How `other` (a stored record of the same rating_id) is another rating than `one`: the
    first field of RATING_NAMES in which they differ, with both values; None when they agree."""
    for name in RATING_NAMES:
        mine, theirs = getattr(one, name), other.get(name)
        if mine != theirs:
            return f"{name} {theirs!r} there, {mine!r} here"
    return None


def rating_digest(record: "EnrichedRating") -> str:
    """A short digest of what the rating says (RATING_NAMES): alike for the same rating again,
    different for another rating under the same id."""
    said = json.dumps([getattr(record, name) for name in RATING_NAMES])
    return hashlib.sha256(said.encode()).hexdigest()[:32]
