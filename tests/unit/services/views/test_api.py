"""The query service's ASGI app in-process, without Kafka or a socket: what a subscriber's
stream does to the pull queries answered beside it."""

import asyncio
import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from services.views.api import Api, BadRequest, _cursor, _encode_cursor, _filters
from services.views.config import ViewsApiSettings
from services.views.hub import Hub
from services.views.store import Change, Store, key_of

ROWS = 12_000
MARKER = {"view": "customer_ratings", "key": ["user_id"], "columns": [{"name": "user_id", "type": "int"}]}


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


def test_a_pull_is_answered_while_a_whole_view_snapshot_is_still_being_sent(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    rows = [
        Change("customer_ratings", key_of([i]), ("user_id",), json.dumps({"user_id": i})) for i in range(ROWS)
    ]
    store.apply(rows, {"customer_ratings": MARKER}, {("t", 0): ROWS})
    changelog = SimpleNamespace(records=0, caught_up=threading.Event(), failed=None)
    app = Api(ViewsApiSettings(), store, Hub(), changelog).app()  # type: ignore[arg-type]
    sent: list[bytes] = []  # the subscriber's body chunks, in order

    async def main() -> tuple[int, int, int]:
        first_chunk, gone = asyncio.Event(), asyncio.Event()

        async def wait_for_disconnect() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def to_subscriber(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                sent.append(message["body"])
                first_chunk.set()

        stream = asyncio.create_task(
            app(_scope("/views/customer_ratings/changes"), wait_for_disconnect, to_subscriber)
        )
        await first_chunk.wait()
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


def test_scan_parameters_become_typed_filters_and_a_cursor_round_trips() -> None:
    types = {"user_id": "int", "hour": "string", "average_stars": "double"}
    assert _filters("user_id", "42", types, "v") == [("user_id", "=", 42)]
    assert _filters("user_id.gte", "7", types, "v") == [("user_id", ">=", 7)]
    assert _filters("average_stars.lt", "2.5", types, "v") == [("average_stars", "<", 2.5)]
    assert _filters("hour.between", "2026-12-02T00,2026-12-02T12", types, "v") == [
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
            _filters(param, text, types, "v")
    info = {"key": ["club_status", "hour"]}
    assert _cursor(_encode_cursor(["gold", "2026-12-02T03"]), info, "v") == ["gold", "2026-12-02T03"]
    for bad in ("not-a-cursor", _encode_cursor([42])):
        with pytest.raises(BadRequest, match="is not a cursor of view 'v'"):
            _cursor(bad, info, "v")
