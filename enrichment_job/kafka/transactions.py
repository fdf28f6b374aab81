"""Exactly-once output of a micro-batch to Kafka.

Spark's Kafka sink is at-least-once: a batch re-run after a crash writes again. Here each
batch's records and a marker {"batch_id": N, ...} go to Kafka in one transaction. After a
restart Spark re-runs the last batch with the same id; the marker says whether that batch is
already in Kafka, and if it is, nothing is written twice. Readers use isolation.level =
read_committed. The transactional id is the job's name: `init_transactions` of an instance
started later fences an earlier one with the same name, wherever it runs (`Fenced`).
"""

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from enrichment_job.kafka.reader import FETCH_WAIT_MS
from foundation.errors import ConfigError
from foundation.kafka_record import MAX_RECORD_BYTES, topic_configs

__all__ = [
    "FENCED_CODES",
    "CommitsTopicPolicy",
    "Fenced",
    "Header",
    "Records",
    "TransactionalOutput",
    "check_commits_topic",
    "is_fenced",
    "last_marker",
    "last_markers",
    "produce",
    "produce_all",
    "transactional_config",
    "transactional_producer",
]

log = logging.getLogger("enrichment_job")
Header = tuple[str, str | bytes | None]


@dataclass(frozen=True)
class Records:
    """What one batch writes to one topic: keys, values (None = tombstone), optional headers."""

    topic: str
    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]
    headers: Sequence[list[Header] | None] | None = None

    def __len__(self) -> int:
        return len(self.values)


class CommitsTopicPolicy(ConfigError):
    """The commits topic would not keep a job's last marker: the job would re-read from its
    first start, and write every output again."""


# Errors that say the job may not read a topic's settings (a least-privilege principal):
# the check is then left to the operator, with a warning.
_NOT_ALLOWED = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED})


def check_commits_topic(config: dict[str, str], topic: str, timeout_s: float = 30) -> None:
    """Refuses a commits topic whose records can age out (`cleanup.policy` with `delete`, or
    without `compact`): the marker is the job's only memory of what it committed. Once it is
    gone the job starts over from its starting offsets, and the lake, the views and the alerts
    get every record again."""
    try:
        configs = topic_configs(config, topic, timeout_s)
    except KafkaException as err:
        error = err.args[0] if err.args else None
        if isinstance(error, KafkaError) and error.code() in _NOT_ALLOWED:
            log.warning(
                "cannot read the settings of the commits topic %s (%s): make sure its "
                "cleanup.policy is compact, or its markers age out and the job starts over",
                topic,
                error.str(),
            )
            return
        raise
    policy = configs["cleanup.policy"] if "cleanup.policy" in configs else "delete"
    parts = {p.strip() for p in (policy or "").split(",")}
    if "compact" not in parts or "delete" in parts:
        raise CommitsTopicPolicy(
            f"the commits topic {topic} has cleanup.policy={policy}: its markers, the job's only "
            "record of what it committed, would age out, and the job would then start over and "
            f"write everything again. Make it compacted: kafka-configs.sh --alter --entity-type "
            f"topics --entity-name {topic} --add-config cleanup.policy=compact"
        )


def last_marker(config: dict[str, str], topic: str, key: str, timeout_s: float = 30) -> dict[str, Any] | None:
    """The last committed marker for `key` in the (single-partition, compacted) commits topic;
    None when there is none, or its last record is a tombstone."""
    return last_markers(config, topic, (key,), timeout_s)[key]


def last_markers(
    config: dict[str, str], topic: str, keys: Sequence[str], timeout_s: float = 30
) -> dict[str, dict[str, Any] | None]:
    """`last_marker` of each of `keys`, from one read of the commits topic."""
    markers: dict[str, dict[str, Any] | None] = dict.fromkeys(keys)
    wanted = {key.encode(): key for key in keys}
    if not wanted:
        return markers
    consumer = Consumer(
        {
            **config,
            "group.id": f"marker-reader-{keys[0]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            # The end shows as a fetch that comes back empty, which the broker holds for this
            # long (500 ms by default): half a second of every start, waiting for nothing.
            "fetch.wait.max.ms": FETCH_WAIT_MS,  # the last fetch of the marker read finds nothing new
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        if high <= low:
            return markers
        consumer.assign([TopicPartition(topic, 0, low)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error, value = msg.error(), msg.value()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return markers
                raise KafkaException(error)
            key = wanted.get(msg.key() or b"")
            if key is not None:
                markers[key] = None if value is None else json.loads(value)  # a tombstone: none
        raise TimeoutError(f"could not read {topic} to its end within {timeout_s} s")
    finally:
        consumer.close()


class Fenced(RuntimeError):
    """Another instance took over the transactional id: this one must stop, not retry."""


FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


def is_fenced(err: BaseException) -> bool:
    """A fenced producer's first failure names the fence; later calls fail as merely fatal."""
    error = err.args[0] if isinstance(err, KafkaException) and err.args else None
    if not isinstance(error, KafkaError):
        return False
    return error.code() in FENCED_CODES or (error.fatal() and "fenced" in error.str().lower())


def transactional_config(
    config: dict[str, str], transactional_id: str, max_queued_bytes: int | None = None
) -> dict[str, Any]:
    """The settings of a producer of `transactional_id`. `max_queued_bytes`: what its queue may
    hold (2 GiB otherwise), at least a record of Kafka's limit and then some."""
    queued_kb = 2_097_151 if max_queued_bytes is None else max(max_queued_bytes, 2 * MAX_RECORD_BYTES) // 1024
    return {
        **config,
        "transactional.id": transactional_id,
        "enable.idempotence": True,
        # Connected to every broker from the start: with connections made only when needed,
        # `init_transactions` often found none up yet (the bootstrap connection is dropped
        # once the brokers are known) and waited librdkafka's half-second retry, on each start.
        "enable.sparse.connections": False,
        "linger.ms": 5,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": queued_kb,
    }


def transactional_producer(
    config: dict[str, str], transactional_id: str, max_queued_bytes: int | None = None
) -> Producer:
    """A producer of `transactional_id`, its transactions initialised: an earlier producer of
    the same id is fenced, and a transaction it left open is aborted."""
    producer = Producer(transactional_config(config, transactional_id, max_queued_bytes))
    producer.init_transactions(60)
    return producer


class TransactionalOutput:
    """One transactional producer per streaming query; `write` is called once per batch."""

    def __init__(
        self,
        producer: Producer,
        transactional_id: str,
        commits_topic: str,
        markers: dict[str, dict[str, Any] | None],
        run: str | None = None,
    ) -> None:
        """Takes what `open` made and read; does no I/O of its own. `markers`: the last marker
        of `transactional_id` and of each other key `open` was asked for."""
        self.commits_topic = commits_topic
        self.marker_key = transactional_id
        self.run = run
        self.producer = producer
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="kafka-out")
        self._early: Future[int] | None = None  # what `begin` produces, in the sender's thread
        self.others = dict(markers)
        self.marker = self.others.pop(transactional_id, None)

    @classmethod
    def open(
        cls,
        config: dict[str, str],
        transactional_id: str,
        commits_topic: str,
        run: str | None = None,
        other_markers: Sequence[str] = (),
        *,
        max_queued_bytes: int | None = None,
    ) -> "TransactionalOutput":
        """Checks the commits topic's policy, starts the producer (fencing an earlier one of the
        same id) and reads the last markers. `run`, when given, goes into every marker, and only
        a marker of the same run counts as committed: a new checkpoint (a new run) under the same
        transactional id starts its batch ids again from 0 and must not take the old run's
        batches for its own. `other_markers`: keys of the commits topic read in the same pass as
        this output's own (`others`). `max_queued_bytes`: as `transactional_config`'s."""
        check_commits_topic(config, commits_topic)
        producer = transactional_producer(config, transactional_id, max_queued_bytes)
        markers = last_markers(config, commits_topic, (transactional_id, *other_markers))
        out = cls(producer, transactional_id, commits_topic, markers, run)
        log.info("%s: last committed batch %s", transactional_id, out.marker and out.marker["batch_id"])
        return out

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions, from the cluster's metadata."""
        meta = self.producer.list_topics(topic, timeout=30).topics[topic]
        if meta.error is not None:
            raise KafkaException(meta.error)
        return sorted(meta.partitions)

    def committed(self, batch_id: int) -> bool:
        if self.marker is None or (self.run is not None and self.marker.get("run") != self.run):
            return False
        return batch_id <= int(self.marker["batch_id"])

    def begin(self, batch_id: int, outputs: Sequence[Records]) -> None:
        """Opens the batch's transaction and produces `outputs`, the first of its records, in a
        thread while the caller works out the rest; `write` then adds the rest and commits, or
        `abort` drops them. A catch-up's millions of customer records are produced beside the
        join instead of after it."""
        try:
            self.producer.begin_transaction()
        except KafkaException as err:
            self._raise_if_fenced(err, batch_id)
            raise
        self._early = self._sender.submit(self._produce_all, outputs)

    def abort(self, batch_id: int) -> None:
        """Drops a transaction `begin` opened, if one is open (the batch failed before `write`).
        Raises `Fenced` when the abort finds that a later instance took over; any other failure
        to abort is logged, and the batch's own failure is what the caller raises."""
        early, self._early = self._early, None
        if early is None:
            return
        wait([early])
        try:
            self._abort(batch_id)
        except KafkaException as err:
            log.warning("aborting the batch's transaction failed too: %s", err)

    def write(
        self,
        batch_id: int,
        outputs: Iterable[Records],
        marker: dict[str, Any] | Callable[[], dict[str, Any]],
    ) -> int:
        """All records of the batch plus its marker, atomically (after those `begin` produced).
        `outputs` may be made as they are produced (a batch taken a slice at a time); `marker`
        may then be a function, called once they all are. Returns the number written."""
        early, self._early = self._early, None
        written = 0
        try:
            if early is None:
                self.producer.begin_transaction()
            else:
                written += early.result()
            written += self._produce_all(outputs)
            said = marker() if callable(marker) else marker
            body = {"batch_id": batch_id, **({"run": self.run} if self.run else {}), **said}
            # On the commits topic's first partition, where `last_marker` reads it, whatever
            # the number of partitions (the join's tasks write theirs to the others).
            produce(
                self.producer,
                self.commits_topic,
                self.marker_key.encode(),
                json.dumps(body).encode(),
                None,
                partition=0,
            )
            self.producer.commit_transaction(120)
        except Exception as err:
            self._raise_if_fenced(err, batch_id)
            self._abort(batch_id)
            raise
        self.marker = body
        return written

    def _abort(self, batch_id: int) -> None:
        """Aborts the open transaction. A fence can show first here: a later instance's start
        aborts this one's open transaction on the broker, and the commit then fails with an
        error that does not name the fence (the records were purged, the epoch is old)."""
        try:
            self.producer.abort_transaction(60)
        except KafkaException as err:
            self._raise_if_fenced(err, batch_id)
            raise

    def _raise_if_fenced(self, err: Exception, batch_id: int) -> None:
        """Raises `Fenced`, naming the batch, when `err` says that a later instance took over."""
        if is_fenced(err):
            raise Fenced(
                f"another instance of the job took over its transactional id {self.marker_key!r} "
                f"(fenced: {err}); this one stops without writing batch {batch_id}"
            ) from err

    def _produce_all(self, outputs: Iterable[Records]) -> int:
        return produce_all(self.producer, outputs)


def produce_all(producer: Producer, outputs: Iterable[Records]) -> int:
    """Every record of `outputs`, in order; returns how many. The client's own call in the
    loop, its arguments by position, and `produce` only for a record the full queue refused:
    a batch's 220,000 records took 0.26 s through `produce`, 0.12 s so."""
    written = 0
    send = producer.produce
    for records in outputs:
        topic = records.topic
        if records.headers is None:
            for key, value in zip(records.keys, records.values, strict=True):
                try:
                    send(topic, value, key)
                except BufferError:
                    produce(producer, topic, key, value, None)
        else:
            for key, value, hdrs in zip(records.keys, records.values, records.headers, strict=True):
                try:
                    send(topic, value, key, headers=hdrs)
                except BufferError:
                    produce(producer, topic, key, value, hdrs)
        written += len(records)
    return written


def produce(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[Header] | None,
    *,
    partition: int = -1,
    on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
) -> None:
    """One record (`partition` -1: the partitioner's choice); while the local queue is full,
    librdkafka sends and it tries again."""
    while True:
        try:
            producer.produce(
                topic, value=value, key=key, headers=headers, partition=partition, on_delivery=on_delivery
            )
            return
        except BufferError:
            producer.poll(0.05)
