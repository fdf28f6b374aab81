"""Pure transforms: an enriched rating -> its daily index, its _id and its document, and the
index template for a family of daily indices. No I/O here."""

import copy
import functools
import json
from datetime import UTC, datetime
from typing import Any

from services.core.enriched import EnrichedRating

Document = dict[str, Any]


DAY_MS = 86_400_000


def daily_index(prefix: str, rating_time_ms: int) -> str:
    """`<prefix>YYYY.MM.DD` of the UTC day of rating_time: a replay lands in the same index."""
    return prefix + _utc_day(rating_time_ms // DAY_MS)


@functools.lru_cache(maxsize=256)
def _utc_day(days_since_epoch: int) -> str:
    return f"{datetime.fromtimestamp(days_since_epoch * DAY_MS / 1000, tz=UTC):%Y.%m.%d}"


def document(record: EnrichedRating) -> Document:
    """Every field of the record, nulls included (the mapping declares each of them)."""
    return record.model_dump()


def bulk_lines(records: list[tuple[str, EnrichedRating]]) -> list[bytes]:
    """NDJSON lines of a bulk request: an `index` action and the source per (index prefix,
    record), `_id` = rating_id, so indexing twice overwrites the same document. Serialized by
    pydantic-core straight to bytes (the client passes bytes through untouched)."""
    lines: list[bytes] = []
    for prefix, record in records:
        action = {"index": {"_index": daily_index(prefix, record.rating_time), "_id": str(record.rating_id)}}
        lines += [json.dumps(action).encode(), record.model_dump_json().encode()]
    return lines


def index_template(base: Document, index_prefix: str, alias: str) -> Document:
    """The shared template (ratings-index-template.json) for one family: its pattern and its alias."""
    template = copy.deepcopy(base)
    template["index_patterns"] = [f"{index_prefix}*"]
    template["template"]["aliases"] = {alias: {}}
    return template
