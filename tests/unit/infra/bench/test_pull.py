"""Both pull clients of make bench-views send every due request for a key drawn from the ids, over
keep-alive connections, and count the answers by status; the C one is built on first use. The
Python one's wire protocol kinds pull as psql and as drivers do."""

import asyncio
import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from foundation.view_marker import ViewMarker
from infra.bench import pull
from infra.bench.views import pull_client
from services.views.pgwire import PgServer, PgSettings
from services.views.sql import Params, Result, SqlReader
from services.views.store import Change, Store, key_of

IDS = [3, 17, 404]


class _Views(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the query service
    keys: ClassVar[list[str]] = []
    connections: ClassVar[set[int]] = set()

    def do_GET(self) -> None:
        key = self.path.removeprefix("/views/customer_ratings/")
        self.keys.append(key)
        self.connections.add(self.client_address[1])
        status = 404 if key == "404" else 200
        body = json.dumps({"row": {"user_id": int(key)}} if status == 200 else {"error": "no row"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    _Views.keys.clear()
    _Views.connections.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Views)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield int(httpd.server_address[1])
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("kind", ["c", "python"])
def test_pull_client_sends_each_due_request_and_counts_the_answers(
    kind: str, server: int, tmp_path: Path
) -> None:
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps(IDS))
    options = ["--port", str(server), "--ids", str(ids), "--rate", "200", "--duration", "1.5"]
    command = [*pull_client(kind), *options]
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, timeout=60).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["requests"] == 300
    assert len(_Views.keys) == 300
    assert set(_Views.keys) <= {str(i) for i in IDS}
    assert sum(figures["statuses"].values()) == 300
    assert figures["statuses"]["404"] == _Views.keys.count("404")
    assert figures["statuses"]["200"] == 300 - _Views.keys.count("404")
    assert len(_Views.connections) <= 8  # its keep-alive connections, not one a request
    assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]
    assert figures["worst_seconds"] and figures["worst_seconds"][0]["second"] in (0, 1)


def test_the_c_client_explains_its_options_and_names_a_missing_one() -> None:
    client = pull_client("c")
    usage = subprocess.run([*client, "--help"], check=True, stdout=subprocess.PIPE, text=True).stdout
    assert "--rate" in usage
    wrong = subprocess.run([*client, "--port", "1"], check=False, stderr=subprocess.PIPE, text=True)
    assert wrong.returncode == 2 and "--ids" in wrong.stderr


class _Recording(SqlReader):
    """The query service's reader, noting each pull by key it answers: its text and parameters."""

    pulls: ClassVar[list[tuple[str, Params | None]]] = []

    def key_lookup(self, sql: str, params: Params | None = None) -> Result | None:
        self.pulls.append((sql, params))
        return super().key_lookup(sql, params)


@pytest.mark.parametrize(
    ("kind", "text", "parameters"),
    [
        ("pg", "SELECT * FROM customer_ratings WHERE user_id = {}", None),
        ("pg-extended", "SELECT * FROM customer_ratings WHERE user_id = $1", "{}"),
    ],
)
def test_the_wire_protocol_clients_pull_by_key_as_psql_and_as_drivers_send_it(
    kind: str, text: str, parameters: str | None, tmp_path: Path
) -> None:
    """Against the query service's own PostgreSQL server: each due pull is answered without an
    error, as a simple query (psql) or with the key as a parameter (the extended protocol)."""
    store = Store(tmp_path / "s.sqlite3")
    rows = [
        Change("customer_ratings", key_of([u]), ("user_id",), json.dumps({"user_id": u, "ratings": 1}))
        for u in IDS[:2]
    ]
    columns = [{"name": "user_id", "type": "int"}, {"name": "ratings", "type": "long"}]
    marker = ViewMarker.decode({"view": "customer_ratings", "key": ["user_id"], "columns": columns})
    store.apply(rows, {"customer_ratings": marker}, {})
    _Recording.pulls.clear()
    server = PgServer(
        _Recording(store, max_rows=5, timeout_s=1), PgSettings("127.0.0.1", 0, 20, 5, None), None
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    try:
        figures = asyncio.run(pull.run(server.port, IDS, 200, 1.0, 4, kind))
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert figures["requests"] == 200 and figures["statuses"] == {200: 200}
    assert len(_Recording.pulls) == 200
    for sql, params in _Recording.pulls:
        key = params["1"] if parameters else sql.rsplit(" ", 1)[1]
        assert str(key) in {str(i) for i in IDS}
        assert sql == text.format(key)
        assert bool(params) == (parameters is not None)  # the key as a parameter, or in the text
