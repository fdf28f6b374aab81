"""The freshness follower times the change events of a view's stream, whatever way the bytes
arrive, and leaves the snapshot's rows out."""

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from infra.bench.freshness import Follower, in_window

AGES_MS = (1_500, 250, 4_000)


def _event(kind: str, last_rating_time: int, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    data = json.dumps({"row": {"user_id": 7, "last_rating_time": last_rating_time}}, separators=(",", ":"))
    return f"{head}event: {kind}\ndata: {data}\n\n".encode()


def _pieces(now_ms: int) -> tuple[bytes, ...]:
    """The snapshot's row first (not a change), then three changes, produced AGES_MS before
    now_ms, the last one without an id. The stream is cut at arbitrary points, inside an event
    too, as a chunked response may be."""
    stream = _event("snapshot", 0) + b"".join(
        _event("change", now_ms - age, i if i < 2 else None) for i, age in enumerate(AGES_MS)
    )
    return (stream[:30], stream[30:101], stream[101:102], stream[102:])


class _Changes(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    served_at_ms: ClassVar[list[int]]  # when each stream began: each server has its own list

    def do_GET(self) -> None:
        now_ms = int(time.time() * 1000)
        self.served_at_ms.append(now_ms)
        self.send_response(200 if self.path == "/views/customer_ratings/changes?snapshot=false" else 404)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in _pieces(now_ms):
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.flush()
            time.sleep(0.02)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    handler = type("Changes", (_Changes,), {"served_at_ms": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_each_change_is_timed_once_and_the_snapshot_is_not(server: ThreadingHTTPServer) -> None:
    follower = Follower(server.server_address[1], "customer_ratings")
    follower._follow()  # one subscription, until the server ends the stream

    assert follower.changes == len(AGES_MS)
    assert follower.subscriptions == 1
    [served_at] = server.RequestHandlerClass.served_at_ms  # type: ignore[attr-defined]
    ages = [age for _, age in follower.samples]
    for measured, produced_ago in zip(ages, AGES_MS, strict=True):
        assert produced_ago <= measured < produced_ago + 5_000
    assert all(arrived >= served_at for arrived, _ in follower.samples)


def test_the_window_keeps_the_changes_that_arrived_in_it() -> None:
    samples = [[1_000, 10], [2_000, 20], [3_000, 30], [4_000, 40]]

    assert in_window(samples, 2_000, 3_000) == [20, 30]
    assert in_window(samples, 5_000, 6_000) == []
