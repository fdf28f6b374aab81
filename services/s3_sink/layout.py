"""Where rows go in the lake: one object per (topic, partition, UTC hour of rating_time) of a batch,
named after the first Kafka offset of that group.

    <prefix>/dt=YYYY-MM-DD/hour=HH/<topic>+<partition>+<first offset, 20 digits>.parquet

The offset is zero-padded to 20 digits (a Kafka offset is a signed 64-bit number: at most 19
digits) so that names sort in offset order as text, the way S3 lists them.
"""

from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

HOUR_MS = 3_600_000


@dataclass(frozen=True, order=True)
class LakeObject:
    """One object of a batch: the group's coordinates and the first offset that names it."""

    topic: str
    partition: int
    hour: int  # hours since the epoch, UTC
    first_offset: int

    def key(self, prefix: str) -> str:
        start = datetime.fromtimestamp(self.hour * 3600, tz=UTC)
        folder = f"dt={start:%Y-%m-%d}/hour={start:%H}"
        name = f"{folder}/{self.topic}+{self.partition}+{self.first_offset:020d}.parquet"
        return f"{prefix}/{name}" if prefix else name


def split_into_objects(table: pa.Table) -> list[tuple[LakeObject, pa.Table]]:
    """The rows of a LAKE_SCHEMA table grouped by topic, partition and hour, in input order."""
    if table.num_rows == 0:
        return []
    hours = pc.divide(table.column("rating_time_ms"), HOUR_MS)  # rating_time_ms >= 0: floor
    keyed = table.select(["kafka_topic", "kafka_partition", "kafka_offset"]).append_column("hour", hours)
    groups = keyed.group_by(["kafka_topic", "kafka_partition", "hour"]).aggregate([("kafka_offset", "min")])
    objects = []
    for group in groups.to_pylist():
        target = LakeObject(
            group["kafka_topic"], group["kafka_partition"], group["hour"], group["kafka_offset_min"]
        )
        mask = pc.and_(
            pc.and_(pc.equal(keyed.column("kafka_topic"), target.topic), pc.equal(hours, target.hour)),
            pc.equal(keyed.column("kafka_partition"), target.partition),
        )
        objects.append((target, table.filter(mask)))
    return sorted(objects, key=lambda item: item[0])
