"""The freshness follower times the change events of a view's stream, whatever way the bytes
arrive, and leaves the snapshot's rows out."""

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from infra.bench.freshness import Follower, in_window

NOW_MS = int(time.time() * 1000)
AGES_MS = (1_500, 250, 4_000)


def _event(kind: str, last_rating_time: int, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    data = json.dumps({"row": {"user_id": 7, "last_rating_time": last_rating_time}}, separators=(",", ":"))
    return f"{head}event: {kind}\ndata: {data}\n\n".encode()


# The snapshot's row first (not a change), then three changes, the last one without an id. The
# stream is cut at arbitrary points, inside an event too, as a chunked response may be.
STREAM = _event("snapshot", 0) + b"".join(
    _event("change", NOW_MS - age, i if i < 2 else None) for i, age in enumerate(AGES_MS)
)
PIECES = (STREAM[:30], STREAM[30:101], STREAM[101:102], STREAM[102:])


class _Changes(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/views/customer_ratings/changes" else 404)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in PIECES:
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.flush()
            time.sleep(0.02)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Changes)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_each_change_is_timed_once_and_the_snapshot_is_not(port: int) -> None:
    follower = Follower(port, "customer_ratings")
    follower._follow()  # one subscription, until the server ends the stream

    assert follower.changes == len(AGES_MS)
    assert follower.subscriptions == 1
    ages = [age for _, age in follower.samples]
    for measured, produced_ago in zip(ages, AGES_MS, strict=True):
        assert produced_ago <= measured < produced_ago + 5_000
    assert all(arrived >= NOW_MS for arrived, _ in follower.samples)


def test_the_window_keeps_the_changes_that_arrived_in_it() -> None:
    samples = [[1_000, 10], [2_000, 20], [3_000, 30], [4_000, 40]]

    assert in_window(samples, 2_000, 3_000) == [20, 30]
    assert in_window(samples, 5_000, 6_000) == []
