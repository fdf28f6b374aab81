"""Where rows go in the lake: one object per (topic, partition, UTC hour of rating_time) of a batch,
named after the first and last Kafka offsets of that group's rows.

    <prefix>/dt=YYYY-MM-DD/hour=HH/<topic>+<partition>+<first offset>+<last offset>.parquet

Offsets are zero-padded to 20 digits (a Kafka offset is a signed 64-bit number: at most 19
digits) so that names sort in offset order as text, the way S3 lists them. An object holds every
row of its partition and hour between its two offsets, and no other: the sink keeps the ranges
of one folder apart (see `overlapping` and the sink), so no row is in the lake twice.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

HOUR_MS = 3_600_000
_NAME = re.compile(r"^(?P<topic>[^/+]+)\+(?P<partition>\d+)\+(?P<first>\d{20})\+(?P<last>\d{20})\.parquet$")


@dataclass(frozen=True, order=True)
class LakeObject:
    """One object: its group's coordinates and the offsets of its first and last rows."""

    topic: str
    partition: int
    hour: int  # hours since the epoch, UTC
    first_offset: int
    last_offset: int

    def folder(self, prefix: str) -> str:
        start = datetime.fromtimestamp(self.hour * 3600, tz=UTC)
        folder = f"dt={start:%Y-%m-%d}/hour={start:%H}"
        return f"{prefix}/{folder}" if prefix else folder

    def siblings(self, prefix: str) -> str:
        """The key prefix of every object of this topic, partition and hour."""
        return f"{self.folder(prefix)}/{self.topic}+{self.partition}+"

    def key(self, prefix: str) -> str:
        return f"{self.siblings(prefix)}{self.first_offset:020d}+{self.last_offset:020d}.parquet"

    def with_offsets(self, first: int, last: int) -> "LakeObject":
        return LakeObject(self.topic, self.partition, self.hour, first, last)


def offsets_of(key: str) -> tuple[int, int] | None:
    """(first, last) from an object's key; None for a key this layout did not write."""
    match = _NAME.match(key.rsplit("/", 1)[-1])
    return (int(match["first"]), int(match["last"])) if match else None


def overlapping(target: LakeObject, first: int, last: int) -> str:
    """What to do with a sibling holding offsets first..last once `target` is written: 'keep' it
    (disjoint ranges), 'delete' it (all its rows are in `target`), or 'trim' it (some are)."""
    if last < target.first_offset or first > target.last_offset:
        return "keep"
    if target.first_offset <= first and last <= target.last_offset:
        return "delete"
    return "trim"


def split_into_objects(table: pa.Table) -> list[tuple[LakeObject, pa.Table]]:
    """The rows of a LAKE_SCHEMA table grouped by topic, partition and hour, in input order."""
    if table.num_rows == 0:
        return []
    hours = pc.divide(table.column("rating_time_ms"), HOUR_MS)  # rating_time_ms >= 0: floor
    keyed = table.select(["kafka_topic", "kafka_partition", "kafka_offset"]).append_column("hour", hours)
    groups = keyed.group_by(["kafka_topic", "kafka_partition", "hour"]).aggregate(
        [("kafka_offset", "min"), ("kafka_offset", "max")]
    )
    objects = []
    for group in groups.to_pylist():
        target = LakeObject(
            group["kafka_topic"],
            group["kafka_partition"],
            group["hour"],
            group["kafka_offset_min"],
            group["kafka_offset_max"],
        )
        mask = pc.and_(
            pc.and_(pc.equal(keyed.column("kafka_topic"), target.topic), pc.equal(hours, target.hour)),
            pc.equal(keyed.column("kafka_partition"), target.partition),
        )
        objects.append((target, table.filter(mask)))
    return sorted(objects, key=lambda item: item[0])
