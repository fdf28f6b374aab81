"""The customer's history beside an alert: the text, the strict reading of a row, and a lookup
that never waits past its timeout, against a local server answering like the views service."""

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from services.slack_notifier.alert import Alert
from services.slack_notifier.history import History, HistoryLookup, history_text, ordinal
from services.slack_notifier.message import alert_message, fold

T = 1_795_000_000_000


def alert(rating_id: int = 9, user_id: int = 7, rating_time_ms: int = T) -> Alert:
    return Alert(rating_id, user_id, "Rica", "r@example.com", "platinum", 1, "late", "iOS", rating_time_ms)


def row(**overrides: Any) -> dict[str, Any]:
    base = {
        "user_id": 7,
        "ratings": 17,
        "unhappy_ratings": 4,
        "average_stars": 2.4117,
        "last_rating_time": T,
        "last_rating_id": 9,
        "club_status": "platinum",
    }
    return base | overrides


@pytest.mark.parametrize(
    ("n", "text"),
    [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"), (13, "13th"),
     (21, "21st"), (22, "22nd"), (111, "111th")],
)  # fmt: skip
def test_ordinals(n: int, text: str) -> None:
    assert ordinal(n) == text


def test_a_row_that_counted_the_rating_is_told_as_its_place_in_the_history() -> None:
    history = History.parse(row())
    assert history is not None
    assert history_text(history, alert()) == "4th unhappy rating; average 2.4 over 17 ratings"


def test_a_row_that_has_not_counted_it_yet_says_it_is_the_history_before() -> None:
    history = History.parse(row(last_rating_time=T - 1, ratings=16, unhappy_ratings=3, average_stars=2.5))
    assert history is not None
    assert history_text(history, alert()) == "before this one: 3 unhappy of 16 ratings, average 2.5"


def test_rows_without_the_figures_are_no_history() -> None:
    for bad in (None, [], row(ratings="17"), row(ratings=True), row(average_stars=None), {"user_id": 7}):
        assert History.parse(bad) is None


def test_the_message_carries_the_history_of_single_alerts_only() -> None:
    history = History.parse(row())
    assert history is not None
    fields = [f for b in alert_message(alert(), history).blocks for f in b.get("fields", [])]
    label = fields.index({"type": "mrkdwn", "text": "*History*"})
    assert fields[label + 1]["text"] == "4th unhappy rating; average 2.4 over 17 ratings"
    assert "History" not in json.dumps(alert_message(alert()).blocks)
    messages = fold([alert(1), alert(2, user_id=8)], posts_allowed=5, max_lines=5, histories={7: history})
    assert ["History" in json.dumps(m.blocks) for m in messages] == [True, False]


class Views(BaseHTTPRequestHandler):
    """Answers like the views query service: rows by user id, 404, slowness, garbage."""

    answers: ClassVar[dict[int, tuple[int, bytes, float]]] = {}

    def do_GET(self) -> None:
        user = int(self.path.rsplit("/", 1)[1])
        status, body, delay = self.answers.get(user, (404, b'{"error": "no row"}', 0.0))
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return


@pytest.fixture
def views() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Views)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_lookup_returns_the_rows_that_came_in_time_and_nothing_else(views: str) -> None:
    Views.answers = {
        1: (200, json.dumps(row(user_id=1)).encode(), 0.0),
        2: (200, json.dumps(row(user_id=2)).encode(), 2.0),  # slower than the timeout
        3: (200, b"not json", 0.0),
        4: (500, b'{"error": "internal error"}', 0.0),
        5: (200, b'{"user_id": 5}', 0.0),
    }
    lookup = HistoryLookup(views, timeout_s=0.3)
    started = time.monotonic()
    found = lookup.rows([alert(1, user_id=u) for u in (1, 2, 3, 4, 5, 6)])
    took = time.monotonic() - started
    lookup.close()
    assert set(found) == {1}
    assert took < 1.0, f"the lookup waited {took:.2f} s, past its 0.3 s timeout"


def test_a_service_that_is_down_costs_no_alert(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    lookup = HistoryLookup(f"http://127.0.0.1:{closed}", timeout_s=0.3)
    assert lookup.rows([alert()]) == {}
    assert lookup.rows([alert()]) == {}
    lookup.close()
    warnings = [r for r in caplog.records if "without the customer's history" in r.getMessage()]
    assert len(warnings) == 1, "one warning a minute, not one per batch"
