"""The enriched rating as the enrichment job writes it (to `ratings-with-customer-data`, and the
same shape to the alert topic), read strictly: a record that does not fit is a RecordError."""

from confluent_kafka import Message
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.core.errors import RecordError


class EnrichedRating(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

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
