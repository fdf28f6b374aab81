"""Pure transforms: an enriched rating -> its daily index, its _id and its document, and the
index template for a family of daily indices. No I/O here."""

import copy
import functools
import json
from datetime import UTC, date, datetime
from typing import Any

from foundation.enriched import EnrichedRating

__all__ = ["DAILY_DAYS", "DAY_MS", "Document", "bulk_lines", "daily_index", "document", "index_template"]

Document = dict[str, Any]


DAY_MS = 86_400_000
_EPOCH = date(1970, 1, 1)


DAILY_DAYS = 30  # ES_SINK_DAILY_INDEX_DAYS's default


def daily_index(
    prefix: str, rating_time_ms: int, kafka_ts: str | None = None, daily_days: int = DAILY_DAYS
) -> str:
    """`<prefix>YYYY.MM.DD` of the UTC day of rating_time; `<prefix>YYYY`, its year, for a
    rating more than `daily_days` days from its Kafka timestamp's day (`kafka_ts`, ISO-8601),
    so that a history replayed from 1970 makes an index a year, not one a day (about 1,000 of
    them fill a node's shards). Told by the record alone: a replay lands in the same index."""
    day = rating_time_ms // DAY_MS
    if kafka_ts is not None and abs(_kafka_day(kafka_ts[:10]) - day) > daily_days:
        return prefix + _utc_day(day)[:4]
    return prefix + _utc_day(day)


@functools.lru_cache(maxsize=256)
def _utc_day(days_since_epoch: int) -> str:
    return f"{datetime.fromtimestamp(days_since_epoch * DAY_MS / 1000, tz=UTC):%Y.%m.%d}"


@functools.lru_cache(maxsize=64)
def _kafka_day(iso_date: str) -> int:
    """Days since 1970-01-01 of an ISO-8601 date (YYYY-MM-DD)."""
    try:
        return (date.fromisoformat(iso_date) - _EPOCH).days
    except ValueError:
        return -(10**9)  # not a date: a year's index


def document(record: EnrichedRating) -> Document:
    """Every field of the record, nulls included (the mapping declares each of them)."""
    return record.model_dump()


def bulk_lines(records: list[tuple[str, EnrichedRating]], daily_days: int = DAILY_DAYS) -> list[bytes]:
    """NDJSON lines of a bulk request: a `create` action and the source per (index prefix,
    record), `_id` = rating_id: a document is written once, and a second one with its id is
    answered 409 (the sink then tells a replay from another rating under the same id).
    Serialized by pydantic-core straight to bytes (the client passes bytes through untouched)."""
    lines: list[bytes] = []
    for prefix, record in records:
        index = daily_index(prefix, record.rating_time, record.rating_kafka_ts, daily_days)
        action = {"create": {"_index": index, "_id": str(record.rating_id)}}
        lines += [json.dumps(action).encode(), record.model_dump_json().encode()]
    return lines


def index_template(base: Document, index_prefix: str, alias: str) -> Document:
    """The shared template (ratings-index-template.json) for one family: its pattern and its alias."""
    template = copy.deepcopy(base)
    template["index_patterns"] = [f"{index_prefix}*"]
    template["template"]["aliases"] = {alias: {}}
    return template
