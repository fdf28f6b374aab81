"""Reading a topic's offset ranges on the driver, into Arrow columns."""

import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from enrichment_job.settings import JobSettings

# The columns of Spark's Kafka source.
KAFKA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")),
    ]
)


def partition_offsets(found: dict[str, Any] | None, name: str | None = None) -> dict[int, int]:
    """partition -> offset, from JSON (a commit marker, Spark's offset log) whose keys are
    strings: `found` itself, or its entry `name` (none: empty)."""
    offsets = (found or {}).get(name) if name is not None else found
    return {int(p): int(o) for p, o in (offsets or {}).items()}


class TopicReader:
    """Reads ranges of offsets of one topic with `read_committed`, as an Arrow table with the
    columns of Spark's Kafka source, through a consumer kept open (assigned, never subscribed:
    it commits nothing). `ranges` gives what is new since given offsets, at most
    `max_offsets_per_trigger` records."""

    def __init__(self, settings: JobSettings, topic: str, group_id: str, timeout_s: float = 60) -> None:
        self.topic = topic
        self.limit = settings.max_offsets_per_trigger
        self.timeout_s = timeout_s
        self.short: dict[int, int] = {}  # after `ranges`: partition -> the end the limit cut short
        self.consumer = Consumer(
            {
                **settings.producer_config(),
                "group.id": group_id,  # assign only: the group has no members and commits nothing
                "enable.auto.commit": False,
                "isolation.level": "read_committed",  # like Spark's Kafka source
                "enable.partition.eof": False,
            }
        )

    def partitions(self, topic: str) -> list[int]:
        """`topic`'s partitions (any topic: the consumer's metadata); none before it exists."""
        meta = self.consumer.list_topics(topic, timeout=self.timeout_s).topics[topic]
        if meta.error is not None:
            if meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return []
            raise KafkaException(meta.error)
        return sorted(meta.partitions)

    def bounds(self) -> dict[int, tuple[int, int]]:
        """partition -> the first and the next offset of each partition now; empty when the
        topic does not exist yet."""
        topic = self.consumer.list_topics(self.topic, timeout=self.timeout_s).topics[self.topic]
        if topic.error is not None:
            if topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:  # nothing written to it yet
                return {}
            raise KafkaException(topic.error)
        return {
            p: self.consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=self.timeout_s, cached=False
            )
            for p in sorted(topic.partitions)
        }

    def ranges(
        self, cdc_to: dict[int, int], until: dict[int, int] | None = None
    ) -> dict[int, tuple[int, int]]:
        """partition -> [first, end) offsets to read, up to where the topic ends now (or to
        `until`, partition -> offset); partitions with nothing new are left out. Where the
        limit cut a range short, `short` then holds the partition and the end it fell short of."""
        self.short = {}
        ranges, budget = {}, self.limit
        for p, (low, top) in self.bounds().items():
            if until is not None and p not in until:
                continue
            high = min(top, until[p]) if until is not None else top
            first = cdc_to.get(p, low)
            if first < low:
                raise KafkaException(
                    KafkaError(
                        KafkaError.OFFSET_OUT_OF_RANGE,
                        f"{self.topic}[{p}]: offsets {first}..{low - 1} were deleted before the job "
                        "read them (retention); the customer table would miss changes",
                    )
                )
            end = min(high, first + budget)
            if end > first:
                ranges[p] = (first, end)
                budget -= end - first
            if end < high:
                self.short[p] = high
        return ranges

    def read(self, ranges: dict[int, tuple[int, int]]) -> pa.Table:
        """The records of `ranges` (key, value, topic, partition, offset, timestamp)."""
        if not ranges:
            return KAFKA.empty_table()
        self.consumer.assign([TopicPartition(self.topic, p, first) for p, (first, _) in ranges.items()])
        ends = {p: end for p, (_, end) in ranges.items()}
        got: list[Message] = []
        deadline = time.monotonic() + self.timeout_s
        left = sum(end - first for first, end in ranges.values())
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {self.topic} {ranges} within {self.timeout_s} s")
            # Asking for exactly what is left returns as soon as it has come.
            batch = self.consumer.consume(max(1, min(left, 100_000)), 0.1)
            for msg in batch:
                if msg.error() is not None:
                    raise KafkaException(msg.error())
            got += batch
            left -= len(batch)
            # Done with a partition once its position passed the end (control records of
            # transactions take offsets but are never returned).
            for tp in self.consumer.position([TopicPartition(self.topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
        self.consumer.unassign()
        # Column by column; records past a range's end (fetched with the last ones) are dropped.
        records = pa.table(
            schema=KAFKA,
            data={
                "key": pa.array([m.key() for m in got], pa.binary()),
                "value": pa.array([m.value() for m in got], pa.binary()),
                "topic": pa.array([self.topic] * len(got), pa.string()),
                "partition": pa.array([m.partition() for m in got], pa.int32()),
                "offset": pa.array([m.offset() for m in got], pa.int64()),
                "timestamp": pa.array([m.timestamp()[1] for m in got], pa.timestamp("ms", tz="UTC")),
            },
        )
        end = pc.index_in(records.column("partition"), pa.array(list(ranges), pa.int32()))
        limits = pa.array([stop for _, stop in ranges.values()], pa.int64())
        return records.filter(pc.less(records.column("offset"), pc.take(limits, end)))

    def close(self) -> None:
        self.consumer.close()
