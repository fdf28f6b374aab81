"""Reading a topic's offset ranges on the driver, into Arrow columns."""

import logging
import sys
import time
from collections.abc import Generator, Iterable

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from enrichment_job.settings import JobSettings
from foundation.kafka_record import prefetch_config

__all__ = [
    "CONSUME_AT_MOST",
    "FETCH_WAIT_MS",
    "KAFKA",
    "RecordsDeleted",
    "TopicReader",
]

log = logging.getLogger("enrichment_job")

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

# A consume call asks for no more than this: more than the consumer's queue holds (64 MB by
# default, under 100,000 change events) would wait the whole timeout for what cannot come, and
# smaller calls are lighter on the caches.
CONSUME_AT_MOST = 10_000
# How long the broker holds a fetch that finds nothing new (librdkafka's default is 500 ms). A
# reader is assigned only while it reads a range, and the range ends where the topic ended a
# moment ago, so its last fetch finds nothing. With 500 ms, that fetch went on after the read,
# and the broker answers one request of a connection at a time: the next batch's ListOffsets
# (where each partition ends) waited behind it, 0.27 to 0.49 s here. A range that ends with a
# transaction's control record is also read to its end only after such a fetch.
FETCH_WAIT_MS = 10
# What the consumer may fetch ahead of a read, at most: librdkafka's own default (64 MiB), or
# ENRICH_MAX_BATCH_BYTES when that is less, so that a read bounded in bytes is not exceeded by
# the queue behind it.
QUEUE_BYTES = 64 * 1024 * 1024


class RecordsDeleted(KafkaException):
    """Records the job still had to read were deleted from the topic (retention, delete-records)
    before it read them: without ENRICH_ACCEPT_DELETED_RATINGS (ENRICH_ACCEPT_PARTIAL_CDC_HISTORY
    for the CDC topic's head) the job stops rather than skip them in silence. Its text says what
    was lost and what to do: the job's log gives it alone, without Spark's traceback."""

    def __str__(self) -> str:
        error = self.args[0] if self.args else None
        return error.str() if isinstance(error, KafkaError) else super().__str__()


class TopicReader:
    """Reads ranges of offsets of one topic with `read_committed`, as an Arrow table with the
    columns of Spark's Kafka source, through a consumer kept open (assigned, never subscribed:
    it commits nothing). `ranges` gives what is new since given offsets, at most
    `max_offsets_per_trigger` records."""

    def __init__(
        self,
        settings: JobSettings,
        topic: str,
        group_id: str,
        timeout_s: float = 60,
        *,
        timestamps: bool = True,
    ) -> None:
        self.topic = topic
        self.timestamps = timestamps  # False: the records' timestamps are not needed (left null)
        self.limit = settings.max_offsets_per_trigger
        self.chunk_bytes = settings.max_batch_bytes  # a chunk of `chunks` is yielded at this many bytes
        self.timeout_s = timeout_s
        self.short: dict[int, int] = {}  # after `ranges`: partition -> the end the limit cut short
        # after a read with `max_bytes`: partition -> where the read stopped short of its range
        self.cut: dict[int, int] = {}
        self.accept_deleted = settings.accept_deleted_ratings
        self.consumer = Consumer(
            {
                **settings.producer_config(),
                "group.id": group_id,  # assign only: the group has no members and commits nothing
                "enable.auto.commit": False,
                "isolation.level": "read_committed",  # like Spark's Kafka source
                "enable.partition.eof": False,
                # A range that starts below the log start is an error, not a jump to the end
                # (librdkafka's default), which skipped the deleted records' whole partition.
                "auto.offset.reset": "error",
                # librdkafka stops fetching while its queue is full, then waits
                # fetch.queue.backoff.ms before the next fetch (1 s by default): a long read spent
                # most of its time waiting.
                **prefetch_config(min(QUEUE_BYTES, settings.max_batch_bytes)),
                "fetch.wait.max.ms": FETCH_WAIT_MS,
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

    def bounds(self, partitions: Iterable[int] | None = None) -> dict[int, tuple[int, int]]:
        """partition -> the first and the next offset of each partition now (of `partitions`
        only, known to exist, when given: no metadata request); empty when the topic does not
        exist yet."""
        if partitions is None:
            topic = self.consumer.list_topics(self.topic, timeout=self.timeout_s).topics[self.topic]
            if topic.error is not None:
                if topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:  # nothing written to it yet
                    return {}
                raise KafkaException(topic.error)
            partitions = topic.partitions
        return {
            p: self.consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=self.timeout_s, cached=False
            )
            for p in sorted(partitions)
        }

    def ranges(
        self, cdc_to: dict[int, int], until: dict[int, int] | None = None, *, whole: bool = False
    ) -> dict[int, tuple[int, int]]:
        """partition -> [first, end) offsets to read, up to where the topic ends now (or to
        `until`, partition -> offset), at most `max_offsets_per_trigger` records in all (`whole`:
        no limit); partitions with nothing new are left out. Where the limit cut a range short,
        `short` then holds the partition and the end it fell short of."""
        self.short = {}
        ranges, budget = {}, sys.maxsize if whole else self.limit
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

    def read(self, ranges: dict[int, tuple[int, int]], max_bytes: int | None = None) -> pa.Table:
        """The records of `ranges` (key, value, topic, partition, offset, timestamp); with
        `max_bytes`, see `chunks`."""
        parts = list(self.chunks(ranges, max_bytes=max_bytes))
        return pa.concat_tables(parts) if parts else KAFKA.empty_table()

    def chunks(
        self, ranges: dict[int, tuple[int, int]], size: int = 100_000, *, max_bytes: int | None = None
    ) -> Generator[pa.Table]:
        """The records of `ranges` as they come, at most `size` at a time (each an Arrow table
        of the columns of Spark's Kafka source), so that a long read can be worked on while the
        consumer fetches the rest, and never holds more than `size` messages as Python objects
        (nor, in a chunk, more than about ENRICH_MAX_BATCH_BYTES).

        With `max_bytes`, the read stops before the record that would take its keys and values
        over that many bytes (it keeps one record at least, so that it always moves on); `cut`
        then holds, per partition it stopped short of the end of, the offset to read on from,
        and `short` the end it fell short of."""
        self.cut = {}
        if not ranges:
            return
        self.consumer.assign([TopicPartition(self.topic, p, first) for p, (first, _) in ranges.items()])
        try:
            ends = {p: end for p, (_, end) in ranges.items()}
            limits = pa.array(list(ends.values()), pa.int64())
            listed = pa.array(list(ends), pa.int32())
            deadline = time.monotonic() + self.timeout_s
            left = sum(end - first for first, end in ranges.values())
            # Each consume call's messages become Arrow columns at once: a chunk's worth of
            # messages alive together kept the garbage collector busy (a fifth of a long read).
            got: list[pa.Table] = []
            count = held = 0  # records and bytes in `got`
            taken = 0  # bytes of keys and values read so far, for `max_bytes`
            while ends:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"reading {self.topic} {ranges}: no record came for {self.timeout_s} s"
                    )
                # Asking for exactly what is left returns as soon as it has come. Near the end
                # the wait is short: what is left may be a transaction's control record, which
                # never comes as a message (a transactional topic's range ends with one).
                wait_s = 0.1 if left > CONSUME_AT_MOST else 0.01
                batch = self.consumer.consume(max(1, min(left, size - count, CONSUME_AT_MOST)), wait_s)
                if any(m.error() is not None for m in batch):
                    for msg in batch:
                        self._check(msg, ranges)
                    batch = [m for m in batch if m.error() is None]
                if batch:
                    deadline = time.monotonic() + self.timeout_s  # the timeout is for no progress
                    table = self._columns(batch, single=len(ranges) == 1)
                    del batch
                    if max_bytes is not None:
                        table, taken = self._within(table, taken, max_bytes, ranges, ends)
                        if self.cut:
                            ends = {}  # the rest of every range waits for a later read
                    got.append(table)
                    count, held = count + table.num_rows, held + table.nbytes
                left = self._left(ranges, ends)
                if got and (count >= size or held >= self.chunk_bytes or not ends):
                    records = pa.concat_tables(got)
                    got, count, held = [], 0, 0
                    # Records past a range's end (fetched with the last ones) are dropped; a
                    # chunk with none, nearly every one, is not copied for nothing.
                    end = pc.take(limits, pc.index_in(records.column("partition"), listed))
                    within = pc.less(records.column("offset"), end)
                    yield records if pc.all(within).as_py() else records.filter(within)
        finally:
            self.consumer.unassign()

    def _left(self, ranges: dict[int, tuple[int, int]], ends: dict[int, int]) -> int:
        """How many offsets are left to read of `ends` (partition -> end), from where the
        consumer stands; a partition is done, and leaves `ends`, once its position passed its end
        (control records of transactions take offsets but are never returned)."""
        left = 0
        for tp in self.consumer.position([TopicPartition(self.topic, p) for p in ends]) if ends else []:
            if tp.offset >= ends[tp.partition]:
                del ends[tp.partition]
            else:
                left += ends[tp.partition] - max(tp.offset, ranges[tp.partition][0])
        return left

    def _within(
        self,
        table: pa.Table,
        taken: int,
        max_bytes: int,
        ranges: dict[int, tuple[int, int]],
        ends: dict[int, int],
    ) -> tuple[pa.Table, int]:
        """`table`'s records that keep what was read (`taken` bytes of keys and values before
        them) within `max_bytes`, and the bytes read with them. When some are left out, `cut`
        gets where each partition not read to its end goes on: its first record left out, or
        where its consumer stands (its range's start when it read nothing of it yet)."""
        sizes = pc.add(
            pc.fill_null(pc.binary_length(table.column("key")), 0),
            pc.fill_null(pc.binary_length(table.column("value")), 0),
        )
        running = pc.cumulative_sum(sizes)
        total = taken + (running[-1].as_py() if len(running) else 0)
        if total <= max_bytes:
            return table, total
        keep = pc.sum(pc.less_equal(running, max_bytes - taken)).as_py() or 0
        if taken == 0:
            keep = max(keep, 1)  # a record larger than the bound alone still moves the read on
        left_out = table.slice(keep)
        firsts = left_out.group_by("partition").aggregate([("offset", "min")])
        for p, first in zip(
            firsts.column("partition").to_pylist(), firsts.column("offset_min").to_pylist(), strict=True
        ):
            if p in ends and first < ends[p]:
                self.cut[p] = first
        for tp in self.consumer.position([TopicPartition(self.topic, p) for p in ends if p not in self.cut]):
            at = tp.offset if tp.offset >= 0 else ranges[tp.partition][0]
            if at < ends[tp.partition]:
                self.cut[tp.partition] = max(at, ranges[tp.partition][0])
        for p in self.cut:
            self.short.setdefault(p, ranges[p][1])
        kept = table.slice(0, keep)
        return kept, taken + (running[keep - 1].as_py() if keep else 0)

    def _check(self, msg: Message, ranges: dict[int, tuple[int, int]]) -> None:
        """Raises the error a message carries, but for a position below the log start with
        `accept_deleted`: that partition is read on from the log start, and the loss logged."""
        error = msg.error()
        if error is None:
            return
        if error.code() != KafkaError._AUTO_OFFSET_RESET:
            raise KafkaException(error)
        p = int(msg.partition() or 0)
        first = ranges[p][0]
        low, _ = self.consumer.get_watermark_offsets(
            TopicPartition(self.topic, p), timeout=self.timeout_s, cached=False
        )
        lost = (
            f"{self.topic}[{p}]: offsets {first}..{low - 1} ({low - first} records) were deleted"
            " (retention, delete-records) before the job read them"
        )
        if not self.accept_deleted:
            raise RecordsDeleted(
                KafkaError(
                    KafkaError.OFFSET_OUT_OF_RANGE,
                    f"{lost}; the job stops rather than skip them. To go on without them, restart"
                    " it with ENRICH_ACCEPT_DELETED_RATINGS=true",
                )
            )
        log.error("%s: skipped, as ENRICH_ACCEPT_DELETED_RATINGS allows", lost)
        # After the error the partition cannot seek: it is assigned again, at the log start.
        self.consumer.incremental_unassign([TopicPartition(self.topic, p)])
        self.consumer.incremental_assign([TopicPartition(self.topic, p, low)])

    def _columns(self, batch: list[Message], *, single: bool) -> pa.Table:
        """Messages as Arrow columns, column by column (`single`: all of one partition)."""
        count = len(batch)
        return pa.table(
            schema=KAFKA,
            data={
                "key": pa.array([m.key() for m in batch], pa.binary()),
                "value": pa.array([m.value() for m in batch], pa.binary()),
                "topic": pa.repeat(pa.scalar(self.topic, pa.string()), count),
                "partition": pa.repeat(pa.scalar(batch[0].partition(), pa.int32()), count)
                if single
                else pa.array([m.partition() for m in batch], pa.int32()),
                "offset": pa.array([m.offset() for m in batch], pa.int64()),
                "timestamp": pa.array([m.timestamp()[1] for m in batch], KAFKA.field("timestamp").type)
                if self.timestamps
                else pa.nulls(count, KAFKA.field("timestamp").type),
            },
        )

    def close(self) -> None:
        self.consumer.close()
