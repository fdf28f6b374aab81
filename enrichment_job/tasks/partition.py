"""What runs in a Spark task: one ratings partition's share of a batch, read, joined and
written in the partition's own Kafka transaction, with its marker.

The transactional id is the job's name and the partition. A task's producer fences every
earlier producer of the partition (a retried, speculative or zombie attempt, an executor that
was frozen, another instance of the job) before it reads the partition's marker back. So the
marker it reads is the last one any attempt can ever commit before it: if it holds this batch,
the batch is done and the task writes nothing; otherwise the task goes on from it, and a
producer that started earlier can no longer commit. That is Kafka Streams' exactly-once model
(EOS v2), with the marker in the commits topic in place of a consumer group's offsets.

A worker keeps between batches what the next task of the same partition can use: the producer,
the readers, the last marker it committed and the ratings still waiting. A task of another
worker commits under a newer epoch; the stale producer's next commit is then fenced, and the
task starts over from the marker in Kafka, as a new worker does.
"""

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaException, Producer

from enrichment_job.customers.table import CdcState
from enrichment_job.customers.versions import VersionStore
from enrichment_job.kafka.reader import KAFKA, TopicReader
from enrichment_job.kafka.transactions import (
    Fenced,
    Records,
    is_fenced,
    produce,
    produce_all,
    transactional_config,
)
from enrichment_job.marker import BatchMarker
from enrichment_job.runtime.checkpoints import ForeignMarker
from enrichment_job.runtime.metrics import Steps
from enrichment_job.settings import JobSettings
from enrichment_job.tasks.enrich import Ratings
from enrichment_job.tasks.plan import PartitionMarker, PartitionPlan, TablePlan, TaskOutcome
from enrichment_job.tasks.tables import worker_store

log = logging.getLogger("enrichment_job")


@dataclass
class _Held:
    """What a worker keeps of one partition between its tasks."""

    producer: Producer
    marker: PartitionMarker | None = None  # the partition's last marker, as this worker knows it
    offset: int = -1  # where `marker` is in the commits topic (-1: not known)
    ratings: Ratings | None = None  # the ratings waiting after `marker`


_partitions: dict[tuple[str, int], _Held] = {}
_readers: dict[tuple[str, str], TopicReader] = {}
# A producer made ahead for each partition this worker held, its transactions not initialised
# yet: by the time the worker takes the partition over again, it is connected, and
# `init_transactions` is quick (a new producer's first call waits for librdkafka's next
# coordinator query).
_spares: dict[tuple[str, int], Producer] = {}


def run_plans(table: TablePlan, plans: Iterator[PartitionPlan]) -> Iterator[TaskOutcome]:
    """The task's function (`mapPartitions`): each plan given, run in turn with the table."""
    for plan in plans:
        yield run_partition(plan, table)


def run_partition(plan: PartitionPlan, table: TablePlan) -> TaskOutcome:
    """The plan's work, done once: with the producer this worker kept for the partition when
    no other committed since (a commit that finds it fenced all the same starts over), else
    with a new one."""
    started, steps = time.monotonic(), Steps()
    settings = plan.settings
    held = _partitions.get((settings.job_name, plan.partition))
    kept = held is not None and held.marker is not None and held.marker.run == plan.run
    with steps("claim"):
        if held is None or not kept or _marker_after(settings, plan.partition, held.offset) is not None:
            held, kept = _claim(plan, held, steps), False
    try:
        return _run(plan, table, held, started, steps)
    except KafkaException as err:
        if kept:  # another attempt took the partition over since: go on from its marker
            log.info("partition %d: its producer was taken over (%s); starting over", plan.partition, err)
            with steps("claim"):
                held = _claim(plan, held, steps)
            return _run(plan, table, held, started, steps)
        _partitions.pop((settings.job_name, plan.partition), None)
        if not is_fenced(err):
            raise
        raise Fenced(
            f"another producer took over {_transactional_id(settings, plan.partition)!r} while this "
            f"task wrote batch {plan.batch_id} (fenced: {err}); this one stops"
        ) from err


def _transactional_id(settings: JobSettings, partition: int) -> str:
    return f"{settings.job_name}-ratings-{partition}"


def _reader(settings: JobSettings, topic: str) -> TopicReader:
    reader = _readers.get((settings.job_name, topic))
    if reader is None:
        timestamps = topic != settings.commits_topic
        reader = TopicReader(settings, topic, f"{settings.job_name}-tasks", timestamps=timestamps)
        _readers[(settings.job_name, topic)] = reader
    return reader


def _claim(plan: PartitionPlan, old: _Held | None, steps: Steps) -> _Held:
    """A new producer for the partition (fencing every earlier one), and its last marker."""
    settings = plan.settings
    _partitions.pop((settings.job_name, plan.partition), None)
    if old is not None:
        old.producer.flush(0)
    with steps("fence"):
        producer = _producer(settings, plan.partition)
    held = _Held(producer)
    with steps("marker"):
        if old is not None and old.marker is not None and old.offset >= 0:
            found = _marker_after(settings, plan.partition, old.offset)
        else:
            found = _last_marker(settings, plan.partition)
    if found is not None:
        held.offset, held.marker = found
    elif old is not None and old.marker is not None:  # none since this worker's: all it kept holds
        held.offset, held.marker, held.ratings = old.offset, old.marker, old.ratings
    _partitions[(settings.job_name, plan.partition)] = held
    return held


_commit_partitions: dict[str, int] = {}  # commits topic -> its partitions, as this worker read them


def _producer(settings: JobSettings, partition: int) -> Producer:
    """The partition's producer, its transactions initialised (fencing every earlier one)."""
    config = transactional_config(settings.producer_config(), _transactional_id(settings, partition))
    producer = _spares.pop((settings.job_name, partition), None) or Producer(config)
    producer.init_transactions(60)
    _spares[(settings.job_name, partition)] = Producer(config)
    return producer


def commits_partition(settings: JobSettings, partition: int) -> int:
    """The commits topic's partition that holds a ratings partition's marker."""
    count = _commit_partitions.get(settings.commits_topic)
    if count is None:
        count = len(_reader(settings, settings.commits_topic).partitions(settings.commits_topic)) or 1
        _commit_partitions[settings.commits_topic] = count
    return partition % count


def _marker_after(settings: JobSettings, partition: int, offset: int) -> tuple[int, PartitionMarker] | None:
    """The partition's last committed marker after `offset` in its commits partition, and where
    it is; None when there is none (read_committed)."""
    where = commits_partition(settings, partition)
    return _markers(settings, partition, {where: offset + 1}).get(where)


def _last_marker(settings: JobSettings, partition: int) -> tuple[int, PartitionMarker] | None:
    """The partition's last committed marker in the whole commits topic (the one with the
    highest `seq`), and where it is when that is its commits partition (else -1)."""
    found = _markers(settings, partition, None)
    if not found:
        return None
    where, (offset, marker) = max(found.items(), key=lambda item: item[1][1].seq)
    return (offset if where == commits_partition(settings, partition) else -1), marker


def _markers(
    settings: JobSettings, partition: int, starts: dict[int, int] | None
) -> dict[int, tuple[int, PartitionMarker]]:
    """Per commits partition read from `starts` (None: every partition, whole), the ratings
    partition's last marker there."""
    reader = _reader(settings, settings.commits_topic)
    ranges = {}
    # A marker check reads one commits partition: its bounds alone, with no metadata request.
    for where, (low, high) in reader.bounds(None if starts is None else starts.keys()).items():
        first = max(low, starts[where]) if starts is not None else low
        if high > first:
            ranges[where] = (first, high)
    records = reader.read(ranges) if ranges else KAFKA.empty_table()
    key = pa.scalar(PartitionMarker.key(settings.job_name, partition))
    mine = records.filter(pc.and_(pc.equal(records.column("key"), key), pc.is_valid(records.column("value"))))
    found: dict[int, tuple[int, PartitionMarker]] = {}
    for where, offset, value in zip(
        mine.column("partition").to_pylist(),
        mine.column("offset").to_pylist(),
        mine.column("value").to_pylist(),
        strict=True,
    ):
        found[int(where)] = (int(offset), PartitionMarker.decode(value))  # in offset order: the last stays
    return found


def _ratings(plan: PartitionPlan, store: VersionStore, held: _Held) -> Ratings:
    """The ratings waiting after the partition's last commit: kept by this worker, or re-read
    from Kafka and decided again against `store`, the batch's table (`Ratings.recover`)."""
    if held.ratings is not None:
        return held.ratings
    ratings = Ratings(plan.settings)
    marker = held.marker
    recovery = marker.as_recovery() if marker is not None else _cut_over(plan)
    if recovery is not None:
        ratings.recover(recovery, store, _reader(plan.settings, plan.settings.ratings_topic).read)
    held.ratings = ratings
    return ratings


def _cut_over(plan: PartitionPlan) -> BatchMarker | None:
    """The driver's last commit, for a partition no task has committed yet."""
    if plan.waiting_from is None:
        return None
    return BatchMarker(
        -1,
        plan.run,
        CdcState(plan.start_watermark_ms),
        waiting_from={plan.partition: plan.waiting_from},
        consumed_to={plan.partition: plan.start},
    )


def _run(plan: PartitionPlan, table: TablePlan, held: _Held, started: float, steps: Steps) -> TaskOutcome:
    settings = plan.settings
    marker = held.marker
    if marker is not None and marker.run == plan.run and marker.batch_id > plan.batch_id:
        # Batches run in order, and batch n + 1 is planned only once batch n is in Kafka.
        raise ForeignMarker(
            f"the marker of ratings partition {plan.partition} in {settings.commits_topic} names this "
            f"run and batch {marker.batch_id}, ahead of the batch being run ({plan.batch_id}): the job "
            "did not write it, and going on would take the batches up to it as written. Find who "
            f"wrote it, and let only the job's own principal write to {settings.commits_topic}"
        )
    if marker is not None and marker.run == plan.run and marker.batch_id == plan.batch_id:
        return TaskOutcome(plan.partition, True, marker.consumed_to, marker.waiting)
    consumed = marker.consumed_to if marker is not None else plan.start
    with steps("table"):
        store = worker_store(settings.job_name, table)
        ratings = _ratings(plan, store, held)
    upto = consumed
    if not ratings.full(plan.max_waiting, plan.max_waiting_bytes):
        upto = max(consumed, min(plan.end, consumed + plan.share))
    with steps("read"):
        raw = KAFKA.empty_table()
        if upto > consumed:
            reader = _reader(settings, settings.ratings_topic)
            raw = reader.read({plan.partition: (consumed, upto)}, max_bytes=plan.max_bytes)
            upto = reader.cut.get(plan.partition, upto)  # the partition's share of ENRICH_MAX_BATCH_BYTES
    result = ratings.step(raw, store, plan.watermark_ms, steps)
    waiting = result.waiting.num_rows if result.waiting is not None else 0
    new = PartitionMarker(
        plan.run,
        plan.batch_id,
        plan.partition,
        marker.seq + 1 if marker is not None else 0,
        upto,
        result.waiting_from.get(plan.partition),
        plan.watermark_ms,
        len(result.enriched),
        len(result.alerts),
        len(result.dead),
        waiting,
    )
    with steps("commit"):
        offset = _commit(settings, held.producer, [result.enriched, result.alerts, result.dead], new)
    ratings.waiting = result.waiting
    held.marker, held.offset = new, offset
    return TaskOutcome(
        plan.partition,
        False,
        upto,
        waiting,
        result.new,
        len(result.enriched),
        len(result.alerts),
        len(result.dead),
        time.monotonic() - started,
        tuple(steps.seconds.items()),
    )


def _commit(
    settings: JobSettings, producer: Producer, outputs: list[Records], marker: PartitionMarker
) -> int:
    """`outputs` and `marker` in one transaction; returns where the marker is in the commits
    topic (-1: not known)."""
    delivered: list[int] = []
    producer.begin_transaction()
    try:
        produce_all(producer, outputs)
        produce(
            producer,
            settings.commits_topic,
            PartitionMarker.key(settings.job_name, marker.partition),
            marker.encode(),
            None,
            partition=commits_partition(settings, marker.partition),
            on_delivery=lambda error, msg: delivered.append(-1 if error else int(msg.offset() or -1)),
        )
        producer.commit_transaction(120)
    except KafkaException as err:
        if not is_fenced(err):
            try:
                producer.abort_transaction(60)
            except KafkaException:
                log.warning("aborting partition %d's transaction failed too", marker.partition)
        raise
    return delivered[0] if delivered else -1
