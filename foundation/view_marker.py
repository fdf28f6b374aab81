"""A view's marker: what the views job says of a view, on its commits topic under the view's
key, and what the query service reads to serve it. A batch's marker names the view's key and
column types and how fresh it is (the enriched topic's offsets read, the newest rating time);
a view declared in SQL adds its state, SQL, version and topic. A marker outside a batch says
that a version was refused, failed, or dropped.

One encoding (`as_json`, `decode`): the fields a marker does not have are left out, the same
JSON as before this type, so markers already in a commits topic read back."""

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["ViewMarker"]

Columns = list[dict[str, str]]  # each column's {"name": ..., "type": ...}, in order


@dataclass(frozen=True)
class ViewMarker:
    view: str
    key: tuple[str, ...] | None = None  # the key columns; None: not known (refused before a batch)
    columns: Columns | None = None
    state: str | None = None  # backfilling, live, refused, failed, dropped; None: a built-in view
    error: str | None = None  # why it was refused or failed
    sql: str | None = None
    created_at_ms: int | None = None  # the version of a view declared in SQL
    topic: str | None = None  # its changelog topic
    batch_id: int | None = None
    enriched_to: Mapping[str, int] | None = None  # enriched topic partition -> next offset read
    max_rating_time: int | None = None  # the newest rating the view reflects, epoch ms
    written_at_ms: int | None = None
    dropped: bool = False

    @property
    def has_columns(self) -> bool:
        """Whether the marker names the view's columns (a batch's does; a refusal does not)."""
        return self.columns is not None

    @property
    def version(self) -> int:
        return self.created_at_ms or 0

    def over(self, older: "ViewMarker | None") -> "ViewMarker":
        """This marker, with what it does not say taken from `older` (a refusal keeps the key,
        columns and freshness the view had)."""
        if older is None:
            return self
        said = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        return replace(older, **said)

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"view": self.view}
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if value is None or (f.name == "dropped" and not value):
                continue
            if f.name == "key":
                value = list(value)
            elif f.name == "columns":
                value = [dict(c) for c in value]
            elif f.name == "enriched_to":
                value = dict(value)
            body[f.name] = value
        return body

    @staticmethod
    def decode(found: Mapping[str, Any]) -> "ViewMarker":
        """A marker from its JSON object; fields it lacks are None."""
        columns = found.get("columns")
        key = found.get("key")
        return ViewMarker(
            view=str(found["view"]),
            key=None if key is None else tuple(str(k) for k in key),
            columns=None
            if columns is None
            else [{"name": str(c["name"]), "type": str(c["type"])} for c in columns],
            state=found.get("state"),
            error=found.get("error"),
            sql=found.get("sql"),
            created_at_ms=found.get("created_at_ms"),
            topic=found.get("topic"),
            batch_id=found.get("batch_id"),
            enriched_to=found.get("enriched_to"),
            max_rating_time=found.get("max_rating_time"),
            written_at_ms=found.get("written_at_ms"),
            dropped=bool(found.get("dropped")),
        )
