"""Where rows go in the lake: one object per (topic, partition, UTC hour of rating_time) of a batch,
named after the first and last Kafka offsets of that group's rows.

    <prefix>/dt=YYYY-MM-DD/hour=HH/<topic>+<partition>+<first offset>+<last offset>.parquet

Offsets are zero-padded to 20 digits (a Kafka offset is a signed 64-bit number: at most 19
digits) so that names sort in offset order as text, the way S3 lists them. An object holds every
row of its partition and hour between its two offsets, and no other: the sink keeps the ranges
of one folder apart (see `uncovered` and the sink), so no row is in the lake twice.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "HOUR_MS",
    "LakeObject",
    "contains",
    "meets",
    "merged",
    "offsets_of",
    "split_into_objects",
    "uncovered",
]

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


def merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Offset ranges (first, last), sorted and joined where they meet: disjoint."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def uncovered(
    target: LakeObject, rows: pa.Table, ranges: Iterable[tuple[int, int]]
) -> list[tuple[LakeObject, pa.Table]]:
    """The rows of `target` whose offsets no range of `ranges` (its siblings') holds, as objects
    of their own: one per stretch between two ranges, so that no object's range meets another's."""
    spans = merged(ranges)
    rows = rows.sort_by("kafka_offset")
    if not spans:
        return [(target, rows)]
    offsets = rows.column("kafka_offset")
    covered = pa.array([False] * rows.num_rows)
    gap = pa.array([0] * rows.num_rows, pa.int32())  # how many spans start at or before each row
    for first, last in spans:
        after = pc.greater_equal(offsets, first)
        covered = pc.or_(covered, pc.and_(after, pc.less_equal(offsets, last)))
        gap = pc.add(gap, pc.cast(after, pa.int32()))
    pieces = []
    for stretch in pc.unique(pc.filter(gap, pc.invert(covered))).to_pylist():
        part = rows.filter(pc.and_(pc.equal(gap, stretch), pc.invert(covered)))
        got = part.column("kafka_offset")
        pieces.append((target.with_offsets(int(got[0].as_py()), int(got[-1].as_py())), part))
    return pieces


def contains(outer: tuple[int, int], inner: tuple[int, int]) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def meets(one: tuple[int, int], other: tuple[int, int]) -> bool:
    return not (one[1] < other[0] or other[1] < one[0])


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
