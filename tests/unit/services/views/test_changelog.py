"""The changelog process's reading side without Kafka: what it hands the server's process."""

import asyncio
import json
import pickle
import struct
from pathlib import Path
from typing import Any

import pytest

from services.views.changelog import BATCH, EVENTS_PER_MESSAGE, Changelog, _Frames, fetched
from services.views.config import ViewsApiSettings
from services.views.store import Store, key_of

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
    frames = _Frames(lambda m: taken.append(m[1]), lambda: taken.append("lost"))

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
