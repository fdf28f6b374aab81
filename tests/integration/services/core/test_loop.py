"""The consumer loop against real Kafka, with a sink the test controls: offsets are committed only
after the sink confirmed, an outage pauses and resumes without loss, bad records become dead
letters with their reason and bytes, a stop request finishes the batch at hand, and a batch
whose commit failed or whose partitions moved is replayed from its start, never after another."""

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message
from pydantic_settings import SettingsConfigDict
from support.kafka import committed_total, drop_topics, make_topics, produce, read_topic
from support.prometheus import Endpoint, scrape
from support.services import unique_name

from foundation.errors import RecordError, SinkUnavailable
from foundation.prometheus import serve
from services.core.main import Service, build_loop
from services.core.metrics import ServiceCollector
from services.core.records import Incoming, Rejected
from services.core.settings import ServiceSettings
from services.core.watchdog import Watchdog

StackEnv = dict[str, str]


class LoopSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="LOOP_TEST_", frozen=True, extra="forbid")


class RecordingSink:
    """Keeps what it was given; `down` makes it raise SinkUnavailable like a dead server."""

    def __init__(self) -> None:
        self.written: list[int] = []
        self.batches: list[list[tuple[int, int]]] = []  # (partition, offset) of each batch written
        self.values: list[list[int]] = []  # the numbers of each batch written
        self.down = False
        self.failed_calls = 0
        self.reject_odd = False

    def write(self, records: list[Incoming[int]]) -> list[Rejected]:
        if self.down:
            self.failed_calls += 1
            raise SinkUnavailable("test sink is down")
        rejected = [Rejected(r.message, "odd") for r in records if self.reject_odd and r.value % 2]
        self.written += [r.value for r in records if not (self.reject_odd and r.value % 2)]
        self.batches.append(
            [(int(r.message.partition() or 0), int(r.message.offset() or 0)) for r in records]
        )
        self.values.append([r.value for r in records])
        return rejected

    def close(self) -> None:
        pass


def decode(message: Message) -> int:
    try:
        return int(json.loads(message.value() or b"")["n"])
    except (ValueError, KeyError, TypeError) as err:
        raise RecordError(f"no number: {err!r}") from None


@pytest.fixture
def topics(stack_env: StackEnv) -> Iterator[tuple[str, str]]:
    names = (unique_name("loop-in"), unique_name("loop-dlq"))
    make_topics(stack_env, list(names), partitions=2)
    yield names
    drop_topics(stack_env, list(names))


class FirstCommitFails:
    """The loop's real consumer, except that its first commit fails as if the broker had gone."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.refused: list[Any] = []

    def commit(self, **kwargs: Any) -> Any:
        if not self.refused:
            self.refused.append(kwargs["offsets"])
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker went away (injected)"))
        return self._consumer.commit(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def start(
    stack_env: StackEnv,
    topics: tuple[str, str],
    sink: RecordingSink,
    *,
    group: str = "",
    wrap: Any = None,
    watchdog: Watchdog | None = None,
    **overrides: Any,
) -> tuple[Any, threading.Thread]:
    values: dict[str, Any] = {
        "bootstrap_servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
        "group_id": group or unique_name("group"),
        "input_topics": (topics[0],),
        "dlq_topic": topics[1],
        "batch_max_records": 50,
        "batch_max_wait_ms": 100,
        "retry_initial_ms": 100,
        "retry_max_ms": 500,
    }
    settings = LoopSettings(**(values | overrides))
    loop = build_loop(Service("loop-test", LoopSettings, decode, lambda _s: sink), settings)
    if wrap is not None:
        loop.consumer = wrap(loop.consumer)
    if watchdog is not None:  # one that reports a stall instead of ending the test's process
        loop.watchdog = watchdog
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    return loop, thread


def numbers(n: int, start: int = 0) -> list[tuple[bytes | None, bytes | None]]:
    return [(str(i).encode(), json.dumps({"n": i}).encode()) for i in range(start, start + n)]


def wait_until(condition: Any, timeout_s: float = 30) -> None:
    done = threading.Event()
    for _ in range(int(timeout_s * 10)):
        if condition():
            return
        done.wait(0.1)
    raise AssertionError("condition not met in time")


def test_commits_only_what_the_sink_confirmed_and_resumes_after_an_outage(
    stack_env: StackEnv, topics: tuple[str, str]
) -> None:
    sink = RecordingSink()
    loop, thread = start(stack_env, topics, sink)
    produce(stack_env, topics[0], numbers(200))
    wait_until(lambda: len(sink.written) == 200)
    wait_until(lambda: committed_total(stack_env, loop.settings.group_id, topics[0]) == 200)

    sink.down = True
    produce(stack_env, topics[0], numbers(300, start=200))
    wait_until(lambda: sink.failed_calls >= 3)
    assert loop.metrics.gauges["state"] == "waiting for downstream"
    assert committed_total(stack_env, loop.settings.group_id, topics[0]) == 200

    sink.down = False
    wait_until(lambda: committed_total(stack_env, loop.settings.group_id, topics[0]) == 500)
    loop.stop()
    thread.join(30)
    assert sorted(set(sink.written)) == list(range(500))
    assert loop.metrics.gauges["state"] == "stopped"


def test_bad_and_rejected_records_become_dead_letters_with_reason_and_bytes(
    stack_env: StackEnv, topics: tuple[str, str]
) -> None:
    sink = RecordingSink()
    sink.reject_odd = True
    loop, thread = start(stack_env, topics, sink)
    produce(stack_env, topics[0], [(b"k", b"not json"), *numbers(4)])
    dead = read_topic(stack_env, topics[1], min_records=3, timeout_s=30)
    loop.stop()
    thread.join(30)
    by_value = {m.value(): dict(m.headers()) for m in dead}
    assert set(by_value) == {b"not json", b'{"n": 1}', b'{"n": 3}'}
    assert by_value[b"not json"]["dlq.reason"].startswith(b"no number")
    assert by_value[b'{"n": 1}']["dlq.reason"] == b"odd"
    assert by_value[b'{"n": 1}']["dlq.topic"] == topics[0].encode()
    assert {"dlq.partition", "dlq.offset", "dlq.stage"} <= {k for h in by_value.values() for k in h}
    assert sorted(sink.written) == [0, 2]
    assert committed_total(stack_env, loop.settings.group_id, topics[0]) == 5


@pytest.fixture
def small_dlq(stack_env: StackEnv) -> Iterator[tuple[str, str]]:
    """An input topic, and a dead-letter topic that takes records of 600,000 bytes at most."""
    names = (unique_name("loop-in"), unique_name("loop-dlq"))
    make_topics(stack_env, [names[0]], partitions=2)
    make_topics(stack_env, [names[1]], partitions=1, config={"max.message.bytes": "600000"})
    yield names
    drop_topics(stack_env, list(names))


def test_a_dead_letter_keeps_its_value_up_to_what_its_topic_takes_and_goes_without_it_past_that(
    stack_env: StackEnv, small_dlq: tuple[str, str]
) -> None:
    """The limit is the dead-letter topic's max.message.bytes: under it the value goes whole.
    Over it, sent whole, the producer refused it, and the service retried it for ever: it goes
    without its value, and the loop goes on."""
    topics = small_dlq
    sink = RecordingSink()
    loop, thread = start(stack_env, topics, sink)
    kept, big = b"k" * 500_000, b"x" * 700_000  # not JSON: dead letters, the second over 600,000
    produce(stack_env, topics[0], [(b"k", kept), (b"k", big), *numbers(2)])
    dead = read_topic(stack_env, topics[1], min_records=2, timeout_s=30)
    assert len(dead) == 2
    (whole,) = [m for m in dead if m.value() is not None]
    assert whole.value() == kept and "dlq.value.dropped" not in dict(whole.headers())
    (dropped,) = [m for m in dead if m.value() is None]
    headers = dict(dropped.headers())
    assert headers["dlq.value.dropped"].startswith(b"700000 bytes, over the dead-letter record limit")
    assert headers["dlq.reason"].startswith(b"no number")
    # where the big record landed: a retried produce of it may come after the small ones
    (original,) = [m for m in read_topic(stack_env, topics[0], min_records=4) if m.value() == big]
    assert int(headers["dlq.partition"]) == original.partition()
    assert int(headers["dlq.offset"]) == original.offset()
    deadline = time.monotonic() + 30
    while committed_total(stack_env, loop.settings.group_id, topics[0]) < 4 and time.monotonic() < deadline:
        time.sleep(0.5)
    loop.stop()
    thread.join(30)
    assert sorted(sink.written) == [0, 1]
    assert committed_total(stack_env, loop.settings.group_id, topics[0]) == 4


def test_prometheus_scrapes_the_loop_s_counts_lag_and_state(
    stack_env: StackEnv, topics: tuple[str, str]
) -> None:
    sink = RecordingSink()
    sink.reject_odd = True
    loop, thread = start(stack_env, topics, sink)
    endpoint = serve(ServiceCollector(loop.metrics), Endpoint(), "LOOP_TEST_")
    assert endpoint is not None
    try:
        produce(stack_env, topics[0], numbers(10))
        wait_until(lambda: committed_total(stack_env, loop.settings.group_id, topics[0]) == 10)
        written = 'ratings_records_written_total{service="loop-test"}'
        wait_until(lambda: scrape(endpoint.port).get(written) == 5)
        samples = scrape(endpoint.port)
        assert samples['ratings_records_consumed_total{service="loop-test"}'] == 10
        assert samples['ratings_dead_letters_total{service="loop-test"}'] == 5
        assert samples['ratings_batch_seconds_count{service="loop-test"}'] >= 1
        assert samples['ratings_service_state{ratings_service_state="running",service="loop-test"}'] == 1
        lags = {k: v for k, v in samples.items() if k.startswith("ratings_consumer_lag_records{")}
        assert lags and set(lags.values()) == {0.0}, lags  # everything consumed is committed
        sink.down = True
        produce(stack_env, topics[0], numbers(4, start=10))
        wait_until(lambda: sink.failed_calls >= 1)
        samples = scrape(endpoint.port)
        assert samples['ratings_downstream_retries_total{service="loop-test"}'] >= 1
        waiting = 'ratings_service_state{ratings_service_state="waiting for downstream",service="loop-test"}'
        assert samples[waiting] == 1
        sink.down = False
        wait_until(lambda: committed_total(stack_env, loop.settings.group_id, topics[0]) == 14)
    finally:
        loop.stop()
        thread.join(30)
        endpoint.close()


def first_offsets(batch: list[tuple[int, int]]) -> dict[int, int]:
    firsts: dict[int, int] = {}
    for partition, offset in batch:
        firsts[partition] = min(firsts.get(partition, offset), offset)
    return firsts


def test_a_batch_whose_commit_failed_is_written_again_from_its_start_before_anything_else(
    stack_env: StackEnv, topics: tuple[str, str]
) -> None:
    sink = RecordingSink()
    loop, thread = start(stack_env, topics, sink, wrap=FirstCommitFails)
    produce(stack_env, topics[0], numbers(200))
    wait_until(lambda: committed_total(stack_env, loop.settings.group_id, topics[0]) == 200)
    loop.stop()
    thread.join(30)
    assert len(loop.consumer.refused) == 1
    refused, later = sink.batches[0], sink.batches[1:]
    # In each partition of the refused batch, the next write starts where the refused batch
    # started: a sink that names its objects after a batch's first offset overwrites them
    # instead of leaving a second object beside them with some of the same rows.
    for partition, offset in first_offsets(refused).items():
        replay = next(first_offsets(b) for b in later if partition in first_offsets(b))
        assert replay[partition] == offset, (partition, sink.batches)
    # Every record of the refused batch was written exactly once more, and nothing else twice.
    written = [pair for batch in sink.batches for pair in batch]
    assert len(written) - len(set(written)) == len(refused)
    assert sorted(set(sink.written)) == list(range(200))


def test_a_batch_waiting_for_the_downstream_is_dropped_when_its_partitions_move(
    stack_env: StackEnv, topics: tuple[str, str]
) -> None:
    group = unique_name("group")
    waiting = RecordingSink()
    waiting.down = True
    # One batch of all 100 records, of both partitions, waits for the sink.
    wide: dict[str, Any] = {"batch_max_records": 100, "batch_max_wait_ms": 3000}
    first, first_thread = start(stack_env, topics, waiting, group=group, **wide)
    produce(stack_env, topics[0], numbers(100))
    wait_until(lambda: waiting.failed_calls >= 2)
    joining = RecordingSink()
    second, second_thread = start(stack_env, topics, joining, group=group)
    wait_until(lambda: len(joining.written) > 0)  # the group gave the newcomer a partition
    waiting.down = False
    wait_until(lambda: committed_total(stack_env, group, topics[0]) == 100)
    for loop, thread in ((first, first_thread), (second, second_thread)):
        loop.stop()
        thread.join(30)
    # Each record was written once, by the member that owned its partition then: the first
    # member did not write its old batch late, over the newcomer's share.
    assert sorted(waiting.written + joining.written) == list(range(100))
    owned = [{p for batch in sink.batches for p, _ in batch} for sink in (waiting, joining)]
    assert owned[0] and owned[1] and owned[0].isdisjoint(owned[1]), owned


def test_batches_are_bounded_by_bytes_and_a_larger_record_goes_alone(
    stack_env: StackEnv, topics: tuple[str, str]
) -> None:
    sink = RecordingSink()
    pad = "x" * 10_000
    small = [(str(i).encode(), json.dumps({"n": i, "pad": pad}).encode()) for i in range(30)]
    large = [(b"30", json.dumps({"n": 30, "pad": pad * 5}).encode())]
    produce(stack_env, topics[0], small + large)
    # Every record is there before the loop starts: a batch could take them all at once.
    loop, thread = start(
        stack_env, topics, sink, batch_max_records=1000, batch_max_wait_ms=2000, batch_max_bytes=35_000
    )
    wait_until(lambda: committed_total(stack_env, loop.settings.group_id, topics[0]) == 31)
    loop.stop()
    thread.join(30)
    assert sorted(sink.written) == list(range(31))  # each once: nothing spilled was lost or doubled
    assert all(len(batch) <= 3 for batch in sink.values), sink.values  # 3 x 10 kB fit, 4 do not
    assert [30] in sink.values  # 50 kB: over the bound, alone


class NeverJoins:
    """A consumer stuck outside its group: subscribed, it never gets an assignment."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.closed = False

    def subscribe(self, topics: list[str], **_callbacks: Any) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        threading.Event().wait(timeout)
        return []

    def close(self) -> None:
        self.closed = True
        self._consumer.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


class PausedWhenAssigned:
    """The loop's real consumer, whose partitions come with librdkafka's pause flag set, as they
    do when they were paused (the downstream was away) before a rebalance took them and gave
    them back: librdkafka keeps a partition's pause across a rebalance."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer

    def subscribe(self, topics: list[str], *, on_assign: Any, on_revoke: Any) -> None:
        def assign(consumer: Any, partitions: list[Any]) -> None:
            consumer.assign(partitions)  # done here, the client does not assign them again
            consumer.pause(partitions)
            on_assign(consumer, partitions)

        self._consumer.subscribe(topics, on_assign=assign, on_revoke=on_revoke)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def test_partitions_assigned_while_the_downstream_is_up_are_consumed_even_if_paused_before(
    stack_env: StackEnv, topics: tuple[str, str]
) -> None:
    sink = RecordingSink()
    loop, thread = start(stack_env, topics, sink, wrap=PausedWhenAssigned)
    produce(stack_env, topics[0], numbers(20))
    wait_until(lambda: committed_total(stack_env, loop.settings.group_id, topics[0]) == 20)
    loop.stop()
    thread.join(30)
    assert sorted(sink.written) == list(range(20))


def test_a_consumer_left_outside_its_group_is_replaced_by_a_new_one(
    stack_env: StackEnv, topics: tuple[str, str]
) -> None:
    sink = RecordingSink()
    loop, thread = start(stack_env, topics, sink, wrap=NeverJoins, rejoin_timeout_s=3)
    stuck = loop.consumer
    produce(stack_env, topics[0], numbers(20))
    wait_until(lambda: committed_total(stack_env, loop.settings.group_id, topics[0]) == 20)
    loop.stop()
    thread.join(30)
    assert stuck.closed and loop.consumer is not stuck
    assert sorted(sink.written) == list(range(20))


class CommitNeverReturns:
    """The loop's real consumer, whose second commit waits for good, as librdkafka's synchronous
    commit does when no answer ever comes."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.commits = 0
        self.hung = threading.Event()
        self.release = threading.Event()

    def commit(self, **kwargs: Any) -> Any:
        self.commits += 1
        if self.commits == 2:
            self.hung.set()
            self.release.wait(60)
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "released by the test"))
        return self._consumer.commit(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def test_a_call_that_never_returns_is_a_stall_for_the_watchdog(
    stack_env: StackEnv, topics: tuple[str, str]
) -> None:
    sink = RecordingSink()
    stalls: list[float] = []
    hanging: list[CommitNeverReturns] = []

    def wrap(consumer: Any) -> CommitNeverReturns:
        hanging.append(CommitNeverReturns(consumer))
        return hanging[0]

    def on_stall(seconds: float) -> None:  # instead of ending the test's process
        stalls.append(seconds)
        hanging[0].release.set()

    watchdog = Watchdog("loop-test", 2.0, on_stall=on_stall)
    loop, thread = start(stack_env, topics, sink, wrap=wrap, watchdog=watchdog, batch_max_records=10)
    produce(stack_env, topics[0], numbers(30))
    assert hanging[0].hung.wait(60)
    wait_until(lambda: len(stalls) == 1)
    assert stalls[0] >= 2.0
    loop.stop()
    thread.join(30)


class SlowSink(RecordingSink):
    """A downstream that takes longer per batch than the watchdog's limit, but answers."""

    def write(self, records: list[Incoming[int]]) -> list[Rejected]:
        threading.Event().wait(1.5)
        return super().write(records)


def test_time_in_a_slow_sink_is_not_a_stall(stack_env: StackEnv, topics: tuple[str, str]) -> None:
    sink = SlowSink()
    stalls: list[float] = []
    watchdog = Watchdog("loop-test", 1.0, on_stall=stalls.append)
    loop, thread = start(stack_env, topics, sink, watchdog=watchdog, batch_max_records=5)
    produce(stack_env, topics[0], numbers(20))
    wait_until(lambda: committed_total(stack_env, loop.settings.group_id, topics[0]) == 20)
    loop.stop()
    thread.join(30)
    assert sorted(sink.written) == list(range(20))
    assert len(sink.batches) >= 3  # several writes of 1.5 s each, against a limit of 1 s
    assert stalls == []
