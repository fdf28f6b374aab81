"""The changelog process's reading side without Kafka: what it hands the server's process."""

import asyncio
import json
import multiprocessing
import os
import pickle
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import uvloop

from services.views import changelog
from services.views.changelog import BATCH, EVENTS_PER_MESSAGE, Changelog, FrameReader, fetched
from services.views.config import ViewsApiSettings
from services.views.hub import REPLACED
from services.views.store import Store, key_of, served

TOPIC = "view.customer_ratings"


class _Record:
    """What the changelog reads of a Kafka message."""

    def __init__(self, offset: int, user: int, key: bytes | None = None) -> None:
        self._offset, self._user, self._key = offset, user, key

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key if self._key is not None else json.dumps({"user_id": self._user}).encode()

    def value(self) -> bytes:
        return json.dumps({"user_id": self._user, "ratings": self._offset}).encode()


class _BatchConsumer:
    """librdkafka's batch consume, as it behaves (checked on the local stack): the records
    queued, up to `n`, at once when there are `n`; otherwise after waiting the whole timeout,
    counted here in `waited_s` instead of slept."""

    def __init__(self, queued: int) -> None:
        self.queued = [_Record(i, i) for i in range(queued)]
        self.waited_s = 0.0

    def consume(self, n: int, timeout: float) -> list[_Record]:
        if len(self.queued) < n:
            self.waited_s += timeout
        taken, self.queued = self.queued[:n], self.queued[n:]
        return taken


def test_records_already_fetched_are_taken_without_waiting_for_a_full_batch() -> None:
    few, many, none = _BatchConsumer(300), _BatchConsumer(BATCH + 500), _BatchConsumer(0)
    assert [len(fetched(c)) for c in (few, many, none)] == [300, BATCH, 0]  # type: ignore[arg-type]
    assert (few.waited_s, many.waited_s, none.waited_s) == (0, 0, 0.2)
    assert len(many.queued) == 500  # left for the next batch


def test_a_large_batch_reaches_the_server_in_pages_of_one_batch_number_and_in_order(tmp_path: Path) -> None:
    sent: list[tuple[Any, ...]] = []
    changelog = Changelog(ViewsApiSettings(), Store(tmp_path / "s.sqlite3"), sent.append)
    count = 2 * EVENTS_PER_MESSAGE + 7
    changelog._step(None, [_Record(i, i) for i in range(count)])  # type: ignore[arg-type]
    changelog._step(None, [_Record(count, 0)])  # type: ignore[arg-type]
    batches = [m for m in sent if m[0] == "batch"]
    first, second = batches[:3], batches[3:]
    assert [len(m[4]) for m in first] == [EVENTS_PER_MESSAGE, EVENTS_PER_MESSAGE, 7]
    assert {m[1] for m in first} == {1} and [m[1] for m in second] == [2]
    assert [json.loads(e[2])["key"]["user_id"] for m in first for e in m[4]] == list(range(count))
    assert first[0][3] is not None and first[1][3] is None and first[2][3] is None  # descriptions once
    assert [m[2] for m in batches] == [count, count, count, count + 1]  # records applied so far


def test_a_batch_without_subscribers_is_one_message_without_events(tmp_path: Path) -> None:
    sent: list[tuple[Any, ...]] = []
    changelog = Changelog(ViewsApiSettings(), Store(tmp_path / "s.sqlite3"), sent.append, lambda: 0)
    changelog._step(None, [_Record(i, i) for i in range(3 * EVENTS_PER_MESSAGE)])  # type: ignore[arg-type]
    assert [(m[1], m[4]) for m in sent if m[0] == "batch"] == [(1, None)]


@pytest.mark.parametrize(
    "key",
    [
        b'{"user_id":12345}',  # as Spark writes a one-integer key: read without parsing
        b'{"user_id":-7}',
        b'{"user_id":0}',
        b'{"user_id": 12345}',
        b'{"user_id":"12345"}',
        b'{"user_id":1.5}',
        b'{"club_status":"gold","channel":"web","hour":1700000000000}',
    ],
)
def test_a_changelog_key_becomes_the_store_key_and_its_columns(tmp_path: Path, key: bytes) -> None:
    changelog = Changelog(ViewsApiSettings(), Store(tmp_path / "s.sqlite3"), lambda _: None)
    change = changelog._change(TOPIC, _Record(3, 12345, key))  # type: ignore[arg-type]
    named = json.loads(key)
    assert change is not None
    assert (change.view, change.key, change.key_columns) == (
        "customer_ratings",
        key_of(list(named.values())),
        tuple(named),
    )
    assert change.value == json.dumps({"user_id": 12345, "ratings": 3})


@pytest.mark.parametrize("key", [b'{"user_id":007}', b"[1]", b"{}", b"not json"])
def test_a_key_that_is_not_a_json_object_of_columns_is_skipped(tmp_path: Path, key: bytes) -> None:
    changelog = Changelog(ViewsApiSettings(), Store(tmp_path / "s.sqlite3"), lambda _: None)
    assert changelog._change(TOPIC, _Record(3, 12345, key)) is None  # type: ignore[arg-type]


def _framed(message: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(message)
    return struct.pack("!Q", len(body)) + body


def test_the_server_takes_one_frame_a_turn_of_its_event_loop_and_the_rest_before_the_pipe_closes() -> None:
    taken: list[Any] = []
    frames = FrameReader(lambda m: taken.append(m[1]), lambda: taken.append("lost"))

    async def main() -> list[list[Any]]:
        seen = []
        wire = b"".join(_framed(("batch", i)) for i in range(4))
        frames.data_received(wire[:-3])  # three whole frames and a piece of the fourth
        seen.append(list(taken))
        await asyncio.sleep(0)
        seen.append(list(taken))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        seen.append(list(taken))
        frames.data_received(wire[-3:])
        frames.connection_lost(None)
        seen.append(list(taken))
        return seen

    assert asyncio.run(main()) == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3, "lost"]]


class _Pipe(asyncio.ReadTransport):
    """What the server's loop does with the pipe: reading paused or not."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    def pause_reading(self) -> None:
        self.log.append("pause")

    def resume_reading(self) -> None:
        self.log.append("resume")


def test_reading_the_pipe_pauses_while_frames_pile_up_and_goes_on_once_they_are_taken() -> None:
    taken: list[Any] = []
    pipe = _Pipe()
    frames = FrameReader(lambda m: taken.append(m[1]), lambda: None, high_water=4_000)
    frames.connection_made(pipe)
    page = "x" * 1_000  # a frame of about 1 KB

    async def main() -> None:
        frames.data_received(b"".join(_framed(("batch", i, page)) for i in range(8)))
        assert pipe.log == ["pause"] and frames.paused  # 8 KB waiting: the changelog process waits
        for _ in range(8):
            await asyncio.sleep(0)
        assert pipe.log == ["pause", "resume"] and not frames.paused
        # One frame larger than the mark: reading goes on until it is whole.
        big = _framed(("batch", 8, "y" * 10_000))
        frames.data_received(big[:5_000])
        assert not frames.paused
        frames.data_received(big[5_000:])
        await asyncio.sleep(0)
        assert not frames.paused

    asyncio.run(main())
    assert taken == list(range(9))


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_over_a_real_pipe_every_frame_arrives_while_reading_pauses_and_resumes(loop_kind: str) -> None:
    """The server's loop is uvloop's (its transports are not asyncio's classes) or asyncio's;
    each frame taken holds the loop 2 ms, as a busy server's does."""
    wire = b"".join(_framed(("batch", i, "x" * 20_000)) for i in range(200))  # 4 MB
    taken: list[Any] = []
    paused_seen: list[bool] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()

        def take(message: tuple[Any, ...]) -> None:
            time.sleep(0.002)
            taken.append(message[1])

        reader = FrameReader(take, lambda: taken.append("lost"), high_water=200_000)
        done = loop.create_future()
        await loop.connect_read_pipe(lambda: reader, os.fdopen(read_fd, "rb", buffering=0))

        def write() -> None:
            with os.fdopen(write_fd, "wb", buffering=0) as out:
                view = memoryview(wire)
                while view:
                    view = view[out.write(view[:65_536]) :]
            loop.call_soon_threadsafe(done.set_result, None)

        threading.Thread(target=write, daemon=True).start()
        while "lost" not in taken:
            paused_seen.append(reader.paused)
            await asyncio.sleep(0)
        await done

    runner = uvloop.run if loop_kind == "uvloop" else asyncio.run
    runner(asyncio.wait_for(main(), 30))
    assert taken == [*range(200), "lost"]
    assert any(paused_seen)  # the writer outran the loop, and reading paused


class _Marker(_Record):
    """A views job's marker on the commits topic."""

    def __init__(self, offset: int, body: dict[str, Any]) -> None:
        super().__init__(offset, 0)
        self.body = body

    def topic(self) -> str:
        return "views-commits"

    def key(self) -> bytes:
        return b"views-sql:" + self.body["view"].encode()

    def value(self) -> bytes:
        return json.dumps(self.body).encode()


class _Row(_Record):
    def __init__(self, offset: int, user: int, topic: str = "view.by_channel") -> None:
        super().__init__(offset, user)
        self._topic = topic

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes:
        return b'{"channel":"web"}'

    def value(self) -> bytes:
        return json.dumps({"channel": "web", "ratings": self.offset()}).encode()


class _Assigning:
    """What the changelog asks of its consumer when a view comes or goes."""

    def __init__(self) -> None:
        self.assigned: list[tuple[str, int, int]] = []
        self.gone: set[str] = set()  # topics deleted

    def list_topics(self, topic: str, timeout: float) -> Any:
        meta = type(
            "Meta",
            (),
            {"error": "unknown topic" if topic in self.gone else None, "partitions": {0: None, 1: None}},
        )()
        return type("Cluster", (), {"topics": {topic: meta}})()

    def incremental_assign(self, parts: list[Any]) -> None:
        self.assigned += [(tp.topic, tp.partition, tp.offset) for tp in parts]

    def assignment(self) -> list[Any]:
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        return [TopicPartition(t, p) for t, p, _ in self.assigned]

    def incremental_unassign(self, parts: list[Any]) -> None:
        gone = {(tp.topic, tp.partition) for tp in parts}
        self.assigned = [a for a in self.assigned if (a[0], a[1]) not in gone]


def test_a_view_declared_in_sql_is_read_from_its_first_marker_on_and_forgotten_when_dropped(
    tmp_path: Path,
) -> None:
    from confluent_kafka import OFFSET_BEGINNING  # noqa: PLC0415

    store = Store(tmp_path / "s.sqlite3")
    changelog = Changelog(ViewsApiSettings(), store, lambda _: None)
    consumer = _Assigning()
    columns = [{"name": "channel", "type": "string"}, {"name": "ratings", "type": "long"}]
    live = {"view": "by_channel", "key": ["channel"], "columns": columns, "state": "live"}
    changelog._step(consumer, [_Marker(0, live)])  # type: ignore[arg-type]
    assert consumer.assigned == [
        ("view.by_channel", 0, OFFSET_BEGINNING),
        ("view.by_channel", 1, OFFSET_BEGINNING),
    ]
    changelog._step(consumer, [_Row(3, 0)])  # type: ignore[arg-type]
    assert json.loads(store.get("by_channel", key_of(["web"])) or "{}") == {"channel": "web", "ratings": 3}
    refused = {"view": "unkeyed", "state": "refused", "error": "GROUP BY user_id is not selected"}
    changelog._step(consumer, [_Marker(1, refused)])  # type: ignore[arg-type]
    assert store.infos()["unkeyed"]["marker"].error == refused["error"]  # shown, with Spark's message
    assert served(store.infos()) == ["by_channel"] and len(consumer.assigned) == 2  # not queried, no topic
    changelog._step(consumer, [_Marker(2, {"view": "by_channel", "state": "dropped", "dropped": True})])  # type: ignore[arg-type]
    assert consumer.assigned == [] and store.count("by_channel") == 0 and "by_channel" not in store.infos()
    assert ("view.by_channel", 0) not in store.offsets()
    consumer.gone.add("view.by_channel")  # read again from the start before compaction: skipped
    changelog._step(consumer, [_Marker(5, live)])  # type: ignore[arg-type]
    assert consumer.assigned == [] and "by_channel" not in store.infos()
    built_in = {"view": "customer_ratings", "key": ["user_id"], "columns": columns, "batch_id": 1}
    changelog._step(consumer, [_Marker(6, built_in)])  # type: ignore[list-item]
    assert consumer.assigned == [] and store.infos()["customer_ratings"]["marker"].batch_id == 1
    dropped_built_in = {"view": "customer_ratings", "dropped": True}
    changelog._step(consumer, [_Marker(6, dropped_built_in), _Record(7, 1)])  # type: ignore[arg-type]
    assert store.count("customer_ratings") == 1  # a configured view is never dropped


def test_a_new_version_is_staged_while_the_old_serves_and_takes_its_place_once_live(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    sent: list[tuple[Any, ...]] = []
    changelog = Changelog(ViewsApiSettings(), store, sent.append)
    consumer = _Assigning()
    columns = [{"name": "channel", "type": "string"}, {"name": "ratings", "type": "long"}]
    v1 = {"view": "by_channel", "key": ["channel"], "columns": columns, "state": "live", "created_at_ms": 1}
    v2 = {**v1, "state": "backfilling", "created_at_ms": 2, "topic": "view.by_channel.2", "sql": "v2"}
    changelog._step(consumer, [_Marker(0, v1), _Row(1, 0)])  # type: ignore[list-item]
    changelog._step(consumer, [_Marker(2, v2), _Row(1, 0, "view.by_channel.2")])  # type: ignore[list-item]
    assert {t for t, _, _ in consumer.assigned} == {"view.by_channel", "view.by_channel.2"}
    assert json.loads(store.get("by_channel", key_of(["web"])) or "{}")["ratings"] == 1  # v1 serves
    assert served(store.infos()) == ["by_channel"] and "by_channel@2" in store.infos()
    changelog._step(consumer, [_Marker(3, {**v1, "batch_id": 9})])  # v1 goes on meanwhile
    assert store.infos()["by_channel"]["marker"].batch_id == 9
    sent.clear()
    changelog._pending = {("view.by_channel", 0)}  # still catching up with the old version's topic
    changelog._step(
        consumer,
        [
            _Row(5, 0, "view.by_channel.2"),
            _Marker(4, {**v2, "state": "live"}),
            _Row(7, 0, "view.by_channel.2"),
        ],  # type: ignore[list-item]
    )
    assert json.loads(store.get("by_channel", key_of(["web"])) or "{}")["ratings"] == 7  # v2's, its last
    assert served(store.infos()) == ["by_channel"] and "by_channel@2" not in store.infos()
    assert store.infos()["by_channel"]["marker"].sql == "v2"
    assert {t for t, _, _ in consumer.assigned} == {"view.by_channel.2"}
    assert not any(t == "view.by_channel" for t, _ in store.offsets())
    assert changelog._pending == set()  # a topic let go is not waited for
    events = [e for m in sent if m[0] == "batch" and m[4] for e in m[4]]
    assert ("by_channel", "", REPLACED) in events  # subscribers take the new version's snapshot
    changelog._step(consumer, [_Marker(8, {**v1, "batch_id": 10})])  # the old version's last word
    assert store.infos()["by_channel"]["marker"].created_at_ms == 2


def test_a_configured_views_marker_keeps_it_on_its_own_topic(tmp_path: Path) -> None:
    topics = ["test-view-1.customer_ratings", "test-view-1.segment_hourly"]
    settings = ViewsApiSettings(changelog_topics=topics)
    store = Store(tmp_path / "s.sqlite3")
    changelog = Changelog(settings, store, lambda _: None)
    consumer = _Assigning()
    columns = [{"name": "user_id", "type": "long"}]
    built_in = {"view": "customer_ratings", "key": ["user_id"], "columns": columns, "batch_id": 1}
    changelog._step(consumer, [_Marker(0, built_in)])  # type: ignore[list-item]
    assert consumer.assigned == []  # not view.customer_ratings, another deployment's topic
    assert changelog.views["test-view-1.customer_ratings"] == "customer_ratings"


class _End(_Record):
    """librdkafka's event for a partition read to its end (enable.partition.eof)."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(0, 0)
        self._topic, self._partition = topic, partition

    def error(self) -> Any:
        from confluent_kafka import KafkaError  # noqa: PLC0415

        return KafkaError(KafkaError._PARTITION_EOF)

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition


def test_a_view_is_loading_until_each_partition_of_its_topic_is_read_to_its_end(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    sent: list[tuple[Any, ...]] = []
    changelog = Changelog(ViewsApiSettings(), store, sent.append)
    consumer = _Assigning()
    changelog._pending = {(TOPIC, 0), (TOPIC, 1), ("view.segment_hourly", 0), ("views-commits", 0)}
    changelog._step(consumer, [_Record(0, 1)])  # type: ignore[list-item]
    assert [m for m in sent if m[0] == "loading"] == [("loading", {"customer_ratings", "segment_hourly"})]
    sent.clear()
    changelog._step(consumer, [_Record(1, 2), _End(TOPIC, 0), _End("view.segment_hourly", 0)])  # type: ignore[list-item]
    assert [m for m in sent if m[0] == "loading"] == [("loading", {"customer_ratings"})]  # partition 1 left
    sent.clear()
    changelog._step(consumer, [_End(TOPIC, 1)])  # type: ignore[list-item]
    assert [m for m in sent if m[0] == "loading"] == [("loading", frozenset())]
    assert ("caught_up", 2) not in sent  # the commits topic is still read: health waits for it
    changelog._step(consumer, [_End("views-commits", 0)])  # type: ignore[list-item]
    assert ("caught_up", 2) in sent
    # A view declared in SQL, whose first marker comes later: loading from its topic's start on
    sent.clear()
    columns = [{"name": "channel", "type": "string"}, {"name": "ratings", "type": "long"}]
    live = {"view": "by_channel", "key": ["channel"], "columns": columns, "state": "live"}
    changelog._step(consumer, [_Marker(0, live), _Row(3, 0)])  # type: ignore[list-item]
    assert store.count("by_channel") == 1
    assert [m for m in sent if m[0] == "loading"] == [("loading", {"by_channel"})]
    changelog._step(consumer, [_End("view.by_channel", 0), _End("view.by_channel", 1)])  # type: ignore[list-item]
    assert changelog.loading() == frozenset()
    # a new version is staged, not served: it is never said to be loading
    v2 = {**live, "state": "backfilling", "created_at_ms": 2, "topic": "view.by_channel.2"}
    changelog._step(consumer, [_Marker(1, v2)])  # type: ignore[list-item]
    assert ("view.by_channel.2", 0) in changelog._pending and changelog.loading() == frozenset()


def test_the_changelog_process_writes_with_the_page_cache_its_settings_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Store] = []

    class Reading:
        def __init__(self, settings: ViewsApiSettings, store: Store, *_: Any) -> None:
            made.append(store)

        def run(self, stopping: Any) -> None:
            pass

    monkeypatch.setattr(changelog, "Changelog", Reading)
    monkeypatch.setattr(changelog.signal, "signal", lambda *_: None)  # the test runner's Ctrl-C stays
    _, out = multiprocessing.Pipe(duplex=False)
    settings = ViewsApiSettings(store_cache_bytes=3_000_000)
    changelog._main(
        settings, tmp_path / "s.sqlite3", out, multiprocessing.Event(), multiprocessing.Value("i", 0)
    )
    assert made[0]._writer.execute("PRAGMA cache_size").fetchone() == (-2930,)  # KiB, rounded up
