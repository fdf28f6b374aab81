"""Kafka offsets as JSON writes them: partitions as strings, in Spark's offset log and in the
jobs' markers."""

from typing import Any

__all__ = ["partition_offsets"]


def partition_offsets(found: dict[str, Any] | None, name: str | None = None) -> dict[int, int]:
    """partition -> offset, from JSON (a commit marker, Spark's offset log) whose keys are
    strings: `found` itself, or its entry `name` (none: empty)."""
    offsets = (found or {}).get(name) if name is not None else found
    return {int(p): int(o) for p, o in (offsets or {}).items()}
