"""A views query's batch marker: its word in the views' commits topic, under the query's key
(`<VIEWS_JOB_NAME>-<query>`), in the same Kafka transaction as the batch's changelog records. A
restart reads it back: the run that wrote it (checked against the query's checkpoint) and the
newest rating each view reflects.

One encoding (`as_json`, `decode`), the JSON of markers already in a commits topic: `batch_id`,
`run`, `enriched_to` (the enriched topic's partitions, as strings, to the next offset read),
`rows`, `written_at_ms` and `max_rating_time` (per view for the built-in views' shared query,
one number for a view declared in SQL)."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from enrichment_job.runtime.offsets import partition_offsets

__all__ = ["NewestRating", "QueryMarker"]

NewestRating = int | None | Mapping[str, int | None]  # epoch ms: the query's, or per view


@dataclass(frozen=True)
class QueryMarker:
    batch_id: int
    enriched_to: Mapping[int, int] = field(default_factory=dict)  # partition -> next offset read
    written_at_ms: int = 0
    rows: int = 0  # the records the batch wrote
    max_rating_time: NewestRating = None
    run: str | None = None  # the state folder's run (TransactionalOutput adds it as it writes)

    @property
    def enriched_to_json(self) -> dict[str, int]:
        """`enriched_to` as JSON writes it (a view's marker carries it too), by partition."""
        return {str(p): o for p, o in sorted(self.enriched_to.items())}

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"batch_id": self.batch_id}
        if self.run:
            body["run"] = self.run
        newest = self.max_rating_time
        return body | {
            "enriched_to": self.enriched_to_json,
            "rows": self.rows,
            "written_at_ms": self.written_at_ms,
            "max_rating_time": dict(newest) if isinstance(newest, Mapping) else newest,
        }

    @staticmethod
    def decode(found: Mapping[str, Any]) -> "QueryMarker":
        newest = found.get("max_rating_time")
        return QueryMarker(
            batch_id=int(found.get("batch_id", -1)),
            enriched_to=partition_offsets(dict(found), "enriched_to"),
            written_at_ms=int(found.get("written_at_ms") or 0),
            rows=int(found.get("rows") or 0),
            max_rating_time=dict(newest) if isinstance(newest, Mapping) else newest,
            run=found.get("run"),
        )

    @staticmethod
    def last(found: Mapping[str, Any] | None) -> "QueryMarker | None":
        """The query's last marker (`TransactionalOutput.marker`), None before its first commit."""
        return None if found is None else QueryMarker.decode(found)
