"""The consumer loop every service runs: collect a batch, decode it, let the sink write it,
dead-letter what failed, and only then commit the batch's offsets.

    1. collect up to `batch_max_records` and `batch_max_bytes`, or what came within
       `batch_max_wait_ms` of the first
    2. decode each record (a RecordError sends it to the dead-letter list)
    3. sink.write(good records): the sink confirms, or returns per-record rejections
    4. dead letters produced and confirmed by Kafka
    5. offsets committed (the highest offset + 1 per partition of the batch), synchronously

The loop owns retries: when the sink or the dead-letter topic is unavailable it pauses every
assigned partition, backs off (capped, with jitter; polling keeps the group membership alive),
and writes the same batch again. Sinks are idempotent, so a batch that partly landed is safe to
repeat, and a crash between 3 and 5 replays it.

A consumer that lost its partitions (the broker was away longer than the session timeout) and
is not given new ones within `rejoin_timeout_s` is closed and replaced by a fresh one: librdkafka
can stay out of its group for good after a long broker outage. A loop that does not come back
from a call for `stall_timeout_s` ends the process (services.core.watchdog).

Per partition, at most one written batch is unconfirmed, and a replay starts where it started:
when a commit fails, the batch's partitions are rewound to the batch's first offsets and the next
batch is that replay; when the group takes a partition away while its batch waits for the
downstream, the batch is dropped unwritten (the new owner replays it from the last commit) rather
than written late over what the new owner wrote. Sinks whose output follows the batch bounds (the
S3 sink's objects) then meet fewer overlaps to settle.
"""

import logging
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

from foundation.errors import RatingsError, RecordError, SinkUnavailable
from services.core.dlq import DeadLetters
from services.core.metrics import Metrics
from services.core.records import Incoming, Rejected
from services.core.settings import ServiceSettings
from services.core.watchdog import Watchdog

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class Sink(Protocol[T]):
    def write(self, records: list[Incoming[T]]) -> list[Rejected]:
        """Write the records durably and return those the downstream rejected for good.
        Raise SinkUnavailable to have the same batch retried, FatalSinkError to stop."""

    def close(self) -> None: ...


class _Stopping(RatingsError):
    """The service was asked to stop while it waited for the downstream."""


class _Revoked(RatingsError):
    """The group took partitions of the batch away while it waited for the downstream."""


class ConsumerLoop(Generic[T]):
    def __init__(
        self,
        name: str,
        settings: ServiceSettings,
        *,
        decode: Callable[[Message], T],
        sink: Sink[T],
        consumer: Consumer,
        dead_letters: DeadLetters,
        metrics: Metrics,
        renew: Callable[[], Consumer] | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        self.name, self.settings, self.decode, self.sink = name, settings, decode, sink
        self.consumer, self.dead_letters, self.metrics = consumer, dead_letters, metrics
        self._renew = renew  # a new consumer, for one that no longer rejoins its group
        self.watchdog = watchdog  # ends the process when the loop stops coming back
        self._outside_since: float | None = None  # not in a group generation since then
        self._stopping = False
        self._paused = False
        self._collecting: list[Message] = []  # the batch being collected
        self._spilled: list[Message] = []  # fetched past the last batch's bounds: the next one's
        self._in_flight: set[tuple[str, int]] = set()  # the partitions of the batch being written
        self._revoked = False  # one of them was taken away while the batch waited

    def stop(self) -> None:
        """Finish the batch at hand, commit it, and return from run(). Safe from a signal handler."""
        self._stopping = True

    def run(self) -> None:
        self._subscribe()
        log.info(
            "%s: consuming %s as group %s",
            self.name,
            ", ".join(self.settings.input_topics),
            self.settings.group_id,
        )
        self.metrics.set("state", "running")
        if self.watchdog is not None:
            self.watchdog.start()
        try:
            while not self._stopping:
                self._beat()
                batch = self._collect()
                if batch:
                    self._deliver(batch)
                self.metrics.maybe_report()
                self._rejoin_if_stuck()
        except _Stopping:
            log.info("%s: stopped while waiting for the downstream; the batch will be replayed", self.name)
        finally:
            self.metrics.set("state", "stopped")
            self.metrics.maybe_report(force=True)
            self.consumer.close()
            self.sink.close()
            if self.watchdog is not None:
                self.watchdog.stop()

    def _beat(self) -> None:
        if self.watchdog is not None:
            self.watchdog.beat()

    def _in_downstream(self, call: Callable[[], R]) -> R:
        """A sink or dead-letter call: bounded by its own timeouts, not by the watchdog's."""
        if self.watchdog is None:
            return call()
        with self.watchdog.excused():
            return call()

    def _subscribe(self) -> None:
        self._outside_since = time.monotonic()
        self.consumer.subscribe(
            list(self.settings.input_topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,  # also told of partitions lost without a revoke
        )

    def _rejoin_if_stuck(self) -> None:
        if self._renew is None or self._outside_since is None:
            return
        outside = time.monotonic() - self._outside_since
        if outside < self.settings.rejoin_timeout_s:
            return
        log.error(
            "%s: no partitions from group %s for %.0f s; replacing the consumer with a new one",
            self.name,
            self.settings.group_id,
            outside,
        )
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError) as err:
            log.warning("%s: closing the old consumer: %s", self.name, err)
        self._spilled = []
        self.consumer = self._renew()
        self._subscribe()

    # 1. collect
    def _collect(self) -> list[Message]:
        """Up to `batch_max_records` records and `batch_max_bytes` bytes (keys and values; a
        record larger than that is a batch of its own). Records fetched past a bound are kept,
        in order, for the next batch."""
        batch: list[Message] = []
        self._collecting = batch
        size, full = 0, False
        deadline: float | None = None
        wanted, max_bytes = self.settings.batch_max_records, self.settings.batch_max_bytes
        while not (self._stopping or full):
            if self._spilled:
                incoming, self._spilled = self._spilled, []
            else:
                # consume() returns when it has `n` records or the time is up: ask for one
                # record until the batch has begun, so the first is not held back by the timeout.
                # A partition revoked meanwhile has its records taken out of `batch` (_on_revoke).
                timeout = 0.5 if deadline is None else max(0.0, deadline - time.monotonic())
                n = 1 if deadline is None else min(wanted - len(batch), 10_000)
                incoming = [m for m in self.consumer.consume(n, timeout) if self._usable(m)]
                self._beat()
            for i, message in enumerate(incoming):
                record_bytes = len(message.key() or b"") + len(message.value() or b"")
                if batch and (len(batch) >= wanted or size + record_bytes > max_bytes):
                    self._spilled, full = incoming[i:], True
                    break
                batch.append(message)
                size += record_bytes
            if not batch:
                return batch
            deadline = deadline or time.monotonic() + self.settings.batch_max_wait_ms / 1000
            if len(batch) >= wanted or time.monotonic() >= deadline:
                break
        self._collecting = []
        self.metrics.add("consumed", len(batch))
        return batch

    def _usable(self, message: Message) -> bool:
        err = message.error()
        if err is None:
            return True
        if err.fatal():
            raise KafkaException(err)
        if err.code() != KafkaError._PARTITION_EOF:
            log.warning("%s: consumer: %s", self.name, err)
        return False

    # 2.-5. decode, write, dead-letter, commit
    def _deliver(self, batch: list[Message]) -> None:
        started = time.monotonic()
        good: list[Incoming[T]] = []
        rejected: list[Rejected] = []
        for message in batch:
            try:
                good.append(Incoming(self.decode(message), message))
            except RecordError as err:
                rejected.append(Rejected(message, str(err)))
        self._in_flight, self._revoked = {_partition(m) for m in batch}, False
        try:
            if good:
                rejected += self._with_retries(lambda: self.sink.write(good))
            if rejected:
                self._with_retries(lambda: self.dead_letters.send(rejected))
        except _Revoked:
            log.warning(
                "%s: partitions of the batch were reassigned while it waited; dropped it unwritten "
                "(%d records), their new owner replays them from the last commit",
                self.name,
                len(batch),
            )
            self._rewind(batch)
            self._resume()
            return
        finally:
            self._in_flight = set()
        if not self._commit(batch):
            self._rewind(batch)
            self._resume()
            return
        # Counted once committed, so whoever reads the figures finds the offsets there too.
        # written = batch minus every dead letter (unreadable ones were never in `good`)
        self.metrics.add("written", len(batch) - len(rejected))
        self.metrics.add("dead_letters", len(rejected))
        self.metrics.batch_done(time.monotonic() - started)
        self._resume()

    def _commit(self, batch: list[Message]) -> bool:
        next_offsets: dict[tuple[str, int], int] = {}
        for m in batch:
            key = _partition(m)
            next_offsets[key] = max(next_offsets.get(key, 0), int(m.offset() or 0) + 1)
        offsets = [TopicPartition(t, p, o) for (t, p), o in next_offsets.items()]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as err:
            log.warning("%s: commit failed (%s); the batch will be written again", self.name, err)
            return False
        for tp in offsets:
            # the end of the partition as the last fetch saw it (no request to the broker)
            _low, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high >= 0:
                self.metrics.set_lag(tp.topic, tp.partition, high - tp.offset)
        return True

    def _rewind(self, batch: list[Message]) -> None:
        """Fetch the batch's partitions again from its first offsets, those still assigned to this
        member (a partition that went elsewhere starts from the last commit at its new owner)."""
        first: dict[tuple[str, int], int] = {}
        for m in batch:
            key = _partition(m)
            first[key] = min(first.get(key, int(m.offset() or 0)), int(m.offset() or 0))
        # Records fetched past the batch would come twice: the partition is fetched again.
        self._spilled = [m for m in self._spilled if _partition(m) not in first]
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        for (topic, partition), offset in sorted(first.items()):
            if (topic, partition) not in assigned:
                continue
            try:
                self.consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as err:
                log.warning("%s: could not rewind %s[%d] (%s)", self.name, topic, partition, err)

    # retries while the downstream is away
    def _with_retries(self, write: Callable[[], R]) -> R:
        retrying = Retrying(
            retry=retry_if_exception_type(SinkUnavailable),
            wait=wait_exponential_jitter(
                multiplier=self.settings.retry_initial_ms / 1000,
                max=self.settings.retry_max_ms / 1000,
                jitter=self.settings.retry_initial_ms / 1000,
            ),
            before_sleep=self._pause,
            sleep=self._idle,
            reraise=True,
        )
        return retrying(lambda: self._in_downstream(write))

    def _pause(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        self.metrics.add("retries")
        self.metrics.set("state", "waiting for downstream")
        self.metrics.set("last_error", str(error))
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s: downstream unavailable (attempt %d, next in %.1f s): %s",
            self.name,
            state.attempt_number,
            delay,
            error,
        )
        if not self._paused:
            self.consumer.pause(self.consumer.assignment())
            self._paused = True

    def _idle(self, seconds: float) -> None:
        """Wait without leaving the group: poll (nothing comes, the partitions are paused)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._stopping:
                raise _Stopping
            self.consumer.poll(min(0.5, max(0.0, deadline - time.monotonic())))
            self._beat()
            if self._revoked:
                raise _Revoked
            self.metrics.maybe_report()

    def _resume(self) -> None:
        if self._paused:
            self.consumer.resume(self.consumer.assignment())
            self._paused = False
            self.metrics.set("state", "running")
            log.info("%s: downstream is back; resumed", self.name)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._outside_since = None  # a member of the group's generation (maybe with no partition)
        log.info("%s: assigned %s", self.name, ", ".join(f"{p.topic}[{p.partition}]" for p in partitions))
        # librdkafka keeps a partition's pause across a rebalance: one paused while the
        # downstream was away, revoked, and given back after `_resume` ran would never be
        # fetched again. Each assigned partition gets the loop's state now.
        if self._paused:
            consumer.pause(partitions)
        else:
            consumer.resume(partitions)

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Runs inside poll/consume, on this thread. Records of a partition that is no longer
        this member's are not written: its next owner (maybe this member again, from the last
        commit) reads them afresh, with batch bounds of its own."""
        taken = {(p.topic, p.partition) for p in partitions}
        self._outside_since = time.monotonic()
        log.info("%s: revoked %s", self.name, ", ".join(f"{t}[{p}]" for t, p in sorted(taken)))
        self._collecting[:] = [m for m in self._collecting if _partition(m) not in taken]
        self._spilled = [m for m in self._spilled if _partition(m) not in taken]
        if taken & self._in_flight:
            self._revoked = True


def _partition(message: Message) -> tuple[str, int]:
    return str(message.topic()), int(message.partition() or 0)
