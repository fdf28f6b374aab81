"""The query service's ASGI app in-process, without Kafka or a socket: what a subscriber's
stream does to the pull queries answered beside it."""

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from foundation.view_marker import ViewMarker
from services.views.api import Api, BadRequest, decode_cursor, encode_cursor, scan_filters
from services.views.config import ViewsApiSettings
from services.views.hub import REPLACED, Hub
from services.views.store import Change, Store, key_of

ROWS = 12_000
MARKER = ViewMarker.decode(
    {"view": "customer_ratings", "key": ["user_id"], "columns": [{"name": "user_id", "type": "int"}]}
)


def _scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [],
        "root_path": "",
        "scheme": "http",
        "http_version": "1.1",
    }


def _subscribe(
    app: Any, path: str, sent: list[bytes], gone: asyncio.Event, query: bytes = b""
) -> "asyncio.Task[None]":
    """A subscriber of `path` (with `query`) in a task: its body chunks go to `sent` until
    `gone` is set."""

    async def wait_for_disconnect() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def to_subscriber(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            sent.append(message["body"])

    scope = {**_scope(path), "query_string": query}
    return asyncio.create_task(app(scope, wait_for_disconnect, to_subscriber))


def _served(store: Store, settings: ViewsApiSettings | None = None) -> tuple[Any, Hub]:
    """The service's app over `store`, and the hub its subscribers join."""
    hub = Hub()
    changelog = SimpleNamespace(records=0, caught_up=threading.Event(), failed=None, loading=frozenset())
    api = Api(settings or ViewsApiSettings(), store, hub, changelog)  # type: ignore[arg-type]
    return api.app(), hub


def _follow_without_snapshot(app: Any, publish: Callable[[], None], until: bytes) -> bytes:
    """What a subscriber of customer_ratings with `snapshot=false` is sent: once it is live,
    `publish` runs, and the stream is read until it has sent `until`."""
    sent: list[bytes] = []

    async def main() -> None:
        gone = asyncio.Event()
        stream = _subscribe(app, "/views/customer_ratings/changes", sent, gone, b"snapshot=false")
        while b"event: live" not in b"".join(sent):
            await asyncio.sleep(0.01)
        publish()
        while until not in b"".join(sent):
            await asyncio.sleep(0.01)
        gone.set()
        stream.cancel()

    asyncio.run(main())
    return b"".join(sent)


def _app_over_rows(folder: Path) -> Any:
    """The service's app over a store holding ROWS rows of customer_ratings."""
    store = Store(folder / "s.sqlite3")
    rows = [
        Change("customer_ratings", key_of([i]), ("user_id",), json.dumps({"user_id": i})) for i in range(ROWS)
    ]
    store.apply(rows, {"customer_ratings": MARKER}, {("t", 0): ROWS})
    changelog = SimpleNamespace(records=0, caught_up=threading.Event(), failed=None, loading=frozenset())
    return Api(ViewsApiSettings(), store, Hub(), changelog).app()  # type: ignore[arg-type]


def test_a_pull_is_answered_while_a_whole_view_snapshot_is_still_being_sent(tmp_path: Path) -> None:
    app = _app_over_rows(tmp_path)
    sent: list[bytes] = []  # the subscriber's body chunks, in order

    async def main() -> tuple[int, int, int]:
        gone = asyncio.Event()
        stream = _subscribe(app, "/views/customer_ratings/changes", sent, gone)
        while not sent:
            await asyncio.sleep(0)
        answers: list[dict[str, Any]] = []

        async def request() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def to_puller(message: dict[str, Any]) -> None:
            answers.append(message)

        await app(_scope("/views/customer_ratings/7"), request, to_puller)
        pulled_after = len(sent)
        while b"event: live" not in sent[-1]:
            await asyncio.sleep(0.01)
        gone.set()
        stream.cancel()
        return answers[0]["status"], pulled_after, len(sent)

    status, pulled_after, chunks = asyncio.run(main())
    snapshot_events = sum(chunk.count(b"event: snapshot\n") for chunk in sent)
    assert status == 200 and snapshot_events == ROWS
    assert pulled_after < chunks / 2, f"the pull waited for {pulled_after} of the snapshot's {chunks} writes"


def test_subscribers_reading_snapshots_at_once_write_one_page_between_two_polls_for_io(
    tmp_path: Path,
) -> None:
    """Each turn of the event loop polls for I/O (the pulls that came) and then runs every ready
    task: when every subscriber wrote a page each turn, a pull waited for all their pages."""
    app = _app_over_rows(tmp_path)
    subscribers = 4
    sent: list[list[bytes]] = [[] for _ in range(subscribers)]
    turns_of_writes: list[int] = []
    turn = [0]

    def count_turns(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        turn[0] += 1  # a callback scheduled with call_soon runs in the next turn
        if not stop.is_set():
            loop.call_soon(count_turns, loop, stop)

    async def main() -> None:
        gone, stop = asyncio.Event(), asyncio.Event()
        count_turns(asyncio.get_running_loop(), stop)
        streams = [_subscribe(app, "/views/customer_ratings/changes", chunks, gone) for chunks in sent]
        while not all(chunks and b"event: live" in chunks[-1] for chunks in sent):
            before = sum(map(len, sent))
            await asyncio.sleep(0)
            turns_of_writes.extend([turn[0]] * (sum(map(len, sent)) - before))
        gone.set()
        stop.set()
        for stream in streams:
            stream.cancel()

    asyncio.run(main())
    for chunks in sent:
        assert sum(chunk.count(b"event: snapshot\n") for chunk in chunks) == ROWS
    busiest = max(turns_of_writes.count(t) for t in set(turns_of_writes))
    assert busiest == 1, f"{busiest} subscribers' writes in one turn of the event loop"


def test_a_timestamp_filter_in_any_iso_spelling_selects_by_instant_and_a_bad_one_is_a_400(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.sqlite3")
    columns = [{"name": "hour_start", "type": "timestamp"}, {"name": "day", "type": "date"}]
    marker = ViewMarker.decode({"view": "hourly", "key": ["hour_start"], "columns": columns})
    hours = [f"2026-11-07T0{h}:00:00.000Z" for h in (3, 4, 5)]  # as the views job's JSON writes them
    rows = [{"hour_start": h, "day": "2026-11-07"} for h in hours]
    store.apply(
        [Change("hourly", key_of([r["hour_start"]]), ("hour_start",), json.dumps(r)) for r in rows],
        {"hourly": marker},
        {},
    )
    types = {"hour_start": "timestamp", "day": "date"}
    for spelling in ("2026-11-07 05:30:00+02", "2026-11-07T03:30Z", "2026-11-07 03:30"):
        found = scan_filters("hour_start.gt", spelling, types, "hourly")
        assert found == [("hour_start", ">", "2026-11-07T03:30:00.000Z")], spelling
        assert [json.loads(r)["hour_start"] for r in store.page("hourly", found, 10)[0]] == hours[1:]
    assert scan_filters("day", "2026-11-07", types, "hourly") == [("day", "=", "2026-11-07")]
    for param, text in (("hour_start.lt", "soon"), ("day", "2026-13-01")):
        with pytest.raises(BadRequest) as refused:
            scan_filters(param, text, types, "hourly")
        assert refused.value.status == 400 and "ISO 8601" in str(refused.value)


def test_scan_parameters_become_typed_filters_and_a_cursor_round_trips() -> None:
    types = {"user_id": "int", "hour": "string", "average_stars": "double"}
    assert scan_filters("user_id", "42", types, "v") == [("user_id", "=", 42)]
    assert scan_filters("user_id.gte", "7", types, "v") == [("user_id", ">=", 7)]
    assert scan_filters("average_stars.lt", "2.5", types, "v") == [("average_stars", "<", 2.5)]
    assert scan_filters("hour.between", "2026-12-02T00,2026-12-02T12", types, "v") == [
        ("hour", ">=", "2026-12-02T00"),
        ("hour", "<=", "2026-12-02T12"),
    ]
    for param, text, why in [
        ("user_id.gte", "x", "is not a int"),
        ("user_id.ne", "1", "is not one of gte, gt, lte, lt, between"),
        ("user_id.between", "1", "give low,high"),
        ("nope.lt", "1", "unknown column 'nope'"),
    ]:
        with pytest.raises(BadRequest, match=why):
            scan_filters(param, text, types, "v")
    info = {"key": ["club_status", "hour"]}
    assert decode_cursor(encode_cursor(["gold", "2026-12-02T03"]), info, "v") == ["gold", "2026-12-02T03"]
    for bad in ("not-a-cursor", encode_cursor([42])):
        with pytest.raises(BadRequest, match="is not a cursor of view 'v'"):
            decode_cursor(bad, info, "v")


def test_a_subscriber_gets_the_new_versions_snapshot_on_its_stream_when_a_replacement_takes_over(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.sqlite3")
    marker = replace(MARKER, view="by_user", created_at_ms=1)
    store.apply(
        [Change("by_user", key_of([1]), ("user_id",), '{"user_id":1,"v":1}')],
        {"by_user": marker},
        {("t", 0): 1},
    )
    app, hub = _served(store)
    sent: list[bytes] = []

    async def main() -> None:
        gone = asyncio.Event()
        stream = _subscribe(app, "/views/by_user/changes", sent, gone)
        while not sent or b"event: live" not in sent[-1]:
            await asyncio.sleep(0.01)
        staged = [Change("by_user@2", key_of([i]), ("user_id",), f'{{"user_id":{i},"v":2}}') for i in (1, 2)]
        new = replace(marker, created_at_ms=2, topic="view.by_user.2")
        store.apply(staged, {"by_user@2": new}, {("u", 0): 2})
        store.apply([], {"by_user": new}, {("u", 0): 2}, promoted={"by_user@2": ("by_user", "t")})
        hub.publish(store.seq, [("by_user", "", REPLACED)])
        while b"event: live" not in b"".join(sent).partition(b"event: replaced")[2]:
            await asyncio.sleep(0.01)
        gone.set()
        stream.cancel()

    asyncio.run(main())
    before, after = b"".join(sent).split(b"event: replaced\n", 1)
    assert before.count(b"event: snapshot\n") == 1 and b'"v":1' in before
    assert after.count(b"event: snapshot\n") == 2 and b'"v":1' not in after
    assert store.offsets() == {("u", 0): 2}  # the old version's topic is no longer read


def test_a_view_refused_before_it_had_rows_is_listed_with_its_reason_and_not_queried(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    refused = {"view": "unkeyed", "state": "refused", "error": "GROUP BY user_id is not selected"}
    store.apply([], {"unkeyed": ViewMarker.decode(refused)}, {("views-commits", 0): 1})
    changelog = SimpleNamespace(records=0, caught_up=threading.Event(), failed=None, loading=frozenset())
    api = Api(ViewsApiSettings(), store, Hub(), changelog)  # type: ignore[arg-type]
    listed = asyncio.run(api.catalog(None))  # type: ignore[arg-type]
    described = {v["name"]: v for v in json.loads(bytes(listed.body))["views"]}["unkeyed"]
    assert (described["state"], described["error"], described["rows"]) == ("refused", refused["error"], None)
    with pytest.raises(BadRequest) as refusal:
        api._view("unkeyed")
    assert refusal.value.status == 409 and "GROUP BY user_id is not selected" in str(refusal.value)


def test_a_subscriber_that_stops_reading_its_snapshot_holds_a_page_and_is_cut_off_at_the_timeout(
    tmp_path: Path,
) -> None:
    """The snapshot is read as the client takes it: one that takes nothing holds one write, and
    its read transaction (which keeps the store's log from being checkpointed) ends at
    VIEWS_SNAPSHOT_TIMEOUT_S, while the client still reads nothing."""
    store = Store(tmp_path / "s.sqlite3")
    rows = [
        Change("customer_ratings", key_of([i]), ("user_id",), json.dumps({"user_id": i})) for i in range(ROWS)
    ]
    store.apply(rows, {"customer_ratings": MARKER}, {("t", 0): ROWS})
    changelog = SimpleNamespace(records=0, caught_up=threading.Event(), failed=None, loading=frozenset())
    app = Api(ViewsApiSettings(snapshot_timeout_s=0.5), store, Hub(), changelog).app()  # type: ignore[arg-type]
    sent: list[bytes] = []

    def checkpointed() -> bool:
        """A later write's log frames all copied into the database (no reader holds them back)."""
        store.apply([rows[0]], {"customer_ratings": MARKER}, {("t", 0): ROWS + 1})
        _, log_frames, copied = store._writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return bool(log_frames == copied)

    async def main() -> tuple[bool, bool]:
        reads = asyncio.Event()  # set: the client reads again
        gone = asyncio.Event()

        async def wait_for_disconnect() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def slow_client(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                sent.append(message["body"])
                await reads.wait()  # the socket's buffer is full: the server's send waits

        stream = asyncio.create_task(
            app(_scope("/views/customer_ratings/changes"), wait_for_disconnect, slow_client)
        )
        while not sent:
            await asyncio.sleep(0.01)
        held = not checkpointed()
        await asyncio.sleep(0.8)  # past the timeout, the client still reading nothing
        released = checkpointed()
        reads.set()
        while not any(b"event: error" in chunk for chunk in sent):
            await asyncio.sleep(0.01)
        gone.set()
        stream.cancel()
        return held, released

    held, released = asyncio.run(main())
    assert held, "the snapshot's read transaction holds the log while the client reads"
    assert released, "the timeout ended the read transaction"
    assert len(sent) == 2 and sent[0].count(b"event: snapshot\n") == 500  # one write, then the end
    assert b"VIEWS_SNAPSHOT_TIMEOUT_S" in sent[1] and b"subscribe again" in sent[1]


def test_a_subscriber_without_a_snapshot_gets_no_rows_and_then_the_changes_from_its_subscription(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.apply(
        [Change("customer_ratings", key_of([i]), ("user_id",), json.dumps({"user_id": i})) for i in (1, 2)],
        {"customer_ratings": MARKER},
        {("t", 0): 2},
    )
    app, hub = _served(store)

    def publish() -> None:
        row = json.dumps({"user_id": 3})
        store.apply([Change("customer_ratings", key_of([3]), ("user_id",), row)], {}, {("t", 0): 3})
        hub.publish(store.seq, [("customer_ratings", key_of([3]), row)])

    body = _follow_without_snapshot(app, publish, until=b"event: change")
    assert b"event: snapshot" not in body  # the two rows before the subscription are not sent
    before, changes = body.split(b"event: live\n", 1)
    assert b"user_id" not in before
    assert b'{"user_id": 3}' in changes and b'"user_id": 1' not in body


def test_a_subscriber_that_falls_behind_its_queue_is_cut_off_with_an_error_and_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.apply([], {"customer_ratings": MARKER}, {("t", 0): 0})
    app, hub = _served(store, ViewsApiSettings(subscriber_queue=3))

    def publish() -> None:  # ten changes in one batch, before the stream takes any
        rows = [json.dumps({"user_id": i}) for i in range(10)]
        hub.publish(store.seq + 1, [("customer_ratings", key_of([i]), row) for i, row in enumerate(rows)])

    with caplog.at_level(logging.WARNING, logger="views"):
        body = _follow_without_snapshot(app, publish, until=b"event: error")
    assert b"fell too far behind; subscribe again" in body and b"event: change" not in body
    assert any(
        "customer_ratings" in r.getMessage() and "VIEWS_SUBSCRIBER_QUEUE (3 changes)" in r.getMessage()
        for r in caplog.records
    )


def test_a_snapshot_parameter_other_than_true_or_false_is_a_400(tmp_path: Path) -> None:
    app = _app_over_rows(tmp_path)
    answers: list[dict[str, Any]] = []

    async def main() -> None:
        scope = {**_scope("/views/customer_ratings/changes"), "query_string": b"snapshot=no"}

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: dict[str, Any]) -> None:
            answers.append(message)

        await app(scope, receive, send)

    asyncio.run(main())
    assert answers[0]["status"] == 400
    assert b"snapshot: 'no' is not true or false" in answers[1]["body"]


def _answer(app: Any, path: str) -> tuple[int, dict[str, str], bytes]:
    """One GET of `path` through the app: its status, headers and body."""
    answers: list[dict[str, Any]] = []

    async def main() -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: dict[str, Any]) -> None:
            answers.append(message)

        path_only, _, query = path.partition("?")
        await app({**_scope(path_only), "query_string": query.encode()}, receive, send)

    asyncio.run(main())
    headers = {k.decode(): v.decode() for k, v in answers[0]["headers"]}
    return answers[0]["status"], headers, b"".join(m.get("body", b"") for m in answers[1:])


def test_a_view_still_loading_answers_503_rather_than_from_part_of_its_rows(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    row = Change("customer_ratings", key_of([1]), ("user_id",), '{"user_id":1}')
    store.apply([row], {"customer_ratings": MARKER}, {("view.customer_ratings", 0): 1})
    changelog = SimpleNamespace(records=0, caught_up=threading.Event(), failed=None, loading=None)
    api = Api(ViewsApiSettings(), store, Hub(), changelog)  # type: ignore[arg-type]
    app = api.app()
    # Before the changelog process has said which views it has read to their end: every view.
    queries = ("/views/customer_ratings/1", "/views/customer_ratings/2", "/views/customer_ratings?limit=5")
    for path in (*queries, "/views/customer_ratings/changes"):
        status, headers, body = _answer(app, path)
        assert (status, headers.get("retry-after")) == (503, "1"), (path, body)
        assert b"view 'customer_ratings' is loading" in body
    assert api.pull(b"/views/customer_ratings/1") is None  # the HTTP protocol hands it to the app
    assert _answer(app, "/views/nope/1")[0] == 404  # a view that does not exist is not loading
    listed = json.loads(_answer(app, "/views")[2])["views"]
    assert {v["name"]: v["loading"] for v in listed} == {"customer_ratings": True, "segment_hourly": False}
    changelog.loading = frozenset({"segment_hourly"})  # customer_ratings is read to its topic's end
    assert api.pull(b"/views/customer_ratings/1") == b'{"user_id":1}'
    assert [_answer(app, path)[0] for path in queries] == [200, 404, 200]
    assert not json.loads(_answer(app, "/views")[2])["views"][0]["loading"]


def test_a_scan_page_cut_short_by_its_bytes_gives_the_next_cursor_and_every_row_comes_once(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.sqlite3")
    rows = [
        Change("customer_ratings", key_of([i]), ("user_id",), json.dumps({"user_id": i, "m": "x" * 400_000}))
        for i in range(5)
    ]
    store.apply(rows, {"customer_ratings": MARKER}, {("t", 0): 5})
    changelog = SimpleNamespace(records=0, caught_up=threading.Event(), failed=None, loading=frozenset())
    app = Api(ViewsApiSettings(scan_max_bytes=1_000_000), store, Hub(), changelog).app()  # type: ignore[arg-type]
    seen, path = [], "/views/customer_ratings?limit=100"
    while True:
        status, _, body = _answer(app, path)
        assert status == 200, body[:300]
        page = json.loads(body)
        seen.append([r["user_id"] for r in page["rows"]])
        if page["next"] is None:
            break
        path = f"/views/customer_ratings?limit=100&after={page['next']}"
    assert seen == [[0, 1], [2, 3], [4]]  # 800 KB a page: a third row would take it over 1 MB
