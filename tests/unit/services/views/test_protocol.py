"""The query service's HTTP protocol on a real socket: which requests it answers itself, and that
the answers on a connection keep the order of its requests."""

import json
import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import uvicorn

from foundation.view_marker import ViewMarker
from services.views import protocol
from services.views.api import Api
from services.views.config import ViewsApiSettings
from services.views.hub import Hub
from services.views.protocol import Access, Bounds, pull_protocol
from services.views.store import Change, Store, key_of

Answer = tuple[bytes, dict[bytes, bytes], bytes]  # status, headers, body
MARKER = ViewMarker.decode(
    {"view": "customer_ratings", "key": ["user_id"], "columns": [{"name": "user_id", "type": "int"}]}
)


class Server:
    """The service's app and protocol on 127.0.0.1, with the paths the app itself was asked for."""

    def __init__(self, tmp_path: Path, bounds: Bounds | None = None, access: Access | None = None) -> None:
        store = Store(tmp_path / "s.sqlite3")
        rows = [
            Change("customer_ratings", key_of([i]), ("user_id",), json.dumps({"user_id": i})) for i in (1, 2)
        ]
        store.apply(rows, {"customer_ratings": MARKER}, {("t", 0): 2})
        changelog = SimpleNamespace(records=0, caught_up=threading.Event(), failed=None, loading=frozenset())
        api = Api(ViewsApiSettings(), store, Hub(), changelog)  # type: ignore[arg-type]
        self.store = store
        app, self.app_paths = api.app(), list[str]()

        async def recorded(scope: Any, receive: Any, send: Any) -> None:
            self.app_paths.append(scope["path"])
            await app(scope, receive, send)

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        protocol = pull_protocol(api.pull, bounds, access)
        config = uvicorn.Config(recorded, http=protocol, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]})

    def __enter__(self) -> "Server":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def exchange(self, *requests: bytes) -> list[Answer]:
        """Send the requests in one write; the answers, in the order they came."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as conn:
            conn.sendall(b"".join(requests))
            stream = conn.makefile("rb")
            return [_answer(stream) for _ in requests]


def _answer(stream: Any) -> Answer:
    status = stream.readline().split(b" ", 2)[1]
    headers = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        headers[name.lower()] = value.strip()
    return status, headers, stream.read(int(headers[b"content-length"]))


def get(path: str, version: str = "1.1") -> bytes:
    return f"GET {path} HTTP/{version}\r\nHost: 127.0.0.1\r\n\r\n".encode()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path) as running:
        yield running


def test_a_pull_that_finds_its_row_is_answered_without_the_app(server: Server) -> None:
    [(status, headers, body)] = server.exchange(get("/views/customer_ratings/2"))
    assert (status, json.loads(body)) == (b"200", {"user_id": 2})
    assert headers[b"content-type"] == b"application/json" and b"date" in headers
    assert b"connection" not in headers  # kept alive
    assert server.app_paths == []


def test_every_other_request_reaches_the_app_which_says_what_is_wrong(server: Server) -> None:
    answers = server.exchange(
        get("/views/customer_ratings/999"),
        get("/views/customer_ratings/x"),
        get("/views/nope/1"),
        b"POST /views/customer_ratings/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}",
    )
    assert [status for status, _, _ in answers] == [b"404", b"400", b"404", b"405"]
    assert "no row" in json.loads(answers[0][2])["error"]
    assert "is not a int" in json.loads(answers[1][2])["error"]
    assert server.app_paths == [
        "/views/customer_ratings/999",
        "/views/customer_ratings/x",
        "/views/nope/1",
        "/views/customer_ratings/1",
    ]


def test_pipelined_requests_are_answered_in_their_order(server: Server) -> None:
    answers = server.exchange(
        get("/views/customer_ratings/1"),
        get("/views"),  # the app answers this one, in a task of its own
        get("/views/customer_ratings/2"),  # behind it: waits, and the app answers it too
        get("/health"),
        get("/views/customer_ratings/1"),
    )
    bodies = [json.loads(body) for _, _, body in answers]
    assert bodies[0] == {"user_id": 1} and bodies[2] == {"user_id": 2} and bodies[4] == {"user_id": 1}
    assert bodies[1]["views"][1]["name"] == "segment_hourly" and "status" in bodies[3]
    assert server.app_paths[:2] == ["/views", "/views/customer_ratings/2"]


def test_an_http_1_0_pull_closes_its_connection(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(get("/views/customer_ratings/1", "1.0"))
        stream = conn.makefile("rb")
        status, headers, body = _answer(stream)
        assert (status, headers[b"connection"], json.loads(body)) == (b"200", b"close", {"user_id": 1})
        assert stream.read() == b""  # closed by the server


def test_a_pull_that_fails_is_answered_by_the_app_with_a_500(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> str:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(server.store, "get", broken)
    [(status, _, body)] = server.exchange(get("/views/customer_ratings/1"))
    assert (status, json.loads(body)) == (b"500", {"error": "internal error"})
    assert server.app_paths == ["/views/customer_ratings/1"]


@pytest.fixture
def bounded(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path, Bounds(max_url_bytes=1_000, max_header_bytes=2_000, head_timeout_s=1.0)) as running:
        yield running


def _refusal(conn: socket.socket) -> tuple[bytes, str]:
    """The status and error of the answer, and that the server closed the connection after it."""
    stream = conn.makefile("rb")
    status, headers, body = _answer(stream)
    assert headers[b"connection"] == b"close"
    assert stream.read() == b""
    return status, json.loads(body)["error"]


def test_a_request_target_too_long_is_refused_as_it_comes_in_pieces(bounded: Server) -> None:
    with socket.create_connection(("127.0.0.1", bounded.port), timeout=10) as conn:
        conn.sendall(b"GET /views/customer_ratings/" + b"1" * 600)
        time.sleep(0.1)
        conn.sendall(b"1" * 600)  # past the bound: answered without waiting for the rest
        assert _refusal(conn) == (b"414", "the request target is over 1000 bytes")
    assert bounded.app_paths == []


def test_request_headers_too_long_are_refused(bounded: Server) -> None:
    with socket.create_connection(("127.0.0.1", bounded.port), timeout=10) as conn:
        conn.sendall(b"GET /views HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"p" * 2_500 + b"\r\n\r\n")
        assert _refusal(conn) == (b"431", "the request's headers are over 2000 bytes")


def test_a_connection_that_sends_no_whole_head_in_time_is_closed(bounded: Server) -> None:
    with socket.create_connection(("127.0.0.1", bounded.port), timeout=10) as conn:
        started = time.monotonic()
        conn.sendall(b"GET /views/custo")  # and then nothing, or a byte now and then
        for _ in range(3):
            time.sleep(0.3)
            conn.sendall(b"m")
        assert _refusal(conn) == (b"408", "no whole request head within 1 s")
        assert time.monotonic() - started < 5
    with socket.create_connection(("127.0.0.1", bounded.port), timeout=10) as conn:
        assert bounded.exchange(get("/views/customer_ratings/1"))[0][0] == b"200"  # others go on
        conn.sendall(get("/views/customer_ratings/1"))  # a whole head in time: answered
        assert _answer(conn.makefile("rb"))[0] == b"200"


def _ask(server: Server, head: bytes) -> Answer:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(head)
        return _answer(conn.makefile("rb"))


def test_a_host_header_the_service_does_not_answer_to_is_refused(server: Server) -> None:
    """A page in a browser that resolves its own name to 127.0.0.1 (DNS rebinding) sends that name."""
    for host in (b"127.0.0.1:8087", b"localhost", b"LOCALHOST:1", b"[::1]:8087"):
        assert (
            _ask(server, b"GET /views/customer_ratings/1 HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")[0]
            == b"200"
        )
    for head in (
        b"GET /views/customer_ratings/1 HTTP/1.1\r\nHost: attacker.example:8087\r\n\r\n",
        b"GET /views HTTP/1.1\r\nHost: 127.0.0.1.attacker.example\r\n\r\n",
        b"GET /views HTTP/1.1\r\n\r\n",  # none at all
    ):
        status, _, body = _ask(server, head)
        assert status == b"400" and "VIEWS_ALLOWED_HOSTS" in json.loads(body)["error"], head
    assert server.app_paths == []


def test_with_a_token_every_request_but_health_needs_it(tmp_path: Path) -> None:
    with Server(tmp_path, access=Access(token=b"s3cret")) as server:
        pull = b"GET /views/customer_ratings/1 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for authorization in (b"", b"Authorization: Bearer wrong\r\n", b"Authorization: s3cret\r\n"):
            status, headers, _ = _ask(server, pull + authorization + b"\r\n")
            assert (status, headers[b"www-authenticate"]) == (b"401", b"Bearer"), authorization
        assert _ask(server, pull + b"Authorization: Bearer s3cret\r\n\r\n")[0] == b"200"
        assert _ask(server, get("/health"))[0] in (b"200", b"503")  # answered without a token
        assert server.app_paths == ["/health"]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_refusals_are_logged_once_with_their_count_and_not_as_invalid_requests(
    bounded: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(protocol, "REFUSALS", protocol.RefusalLog(every_s=60))
    uvicorn_said = _Records()
    logging.getLogger("uvicorn").addHandler(uvicorn_said)  # uvicorn's loggers do not reach the root's
    try:
        with caplog.at_level(logging.WARNING, logger="views"):
            for _ in range(3):
                with socket.create_connection(("127.0.0.1", bounded.port), timeout=10) as conn:
                    conn.sendall(b"GET /views/customer_ratings/" + b"1" * 1_200)
                    assert _refusal(conn)[0] == b"414"
    finally:
        logging.getLogger("uvicorn").removeHandler(uvicorn_said)
    assert "Invalid HTTP request received." not in uvicorn_said.messages
    refused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused")]
    assert refused == ["refused 1 request(s): 1x 414 (the request target is over 1000 bytes)"]
    assert protocol.REFUSALS.counts == {414: 2}  # the next line, a minute on, says them
