"""The hostile clients of make bench-views, against the query service's app and protocol over a
small store (infra.bench.server's server process): each kind does what it says, and what it
reports is what the service did to it."""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.bench.server import start_server
from infra.bench.store import customer_ratings_store, customer_rows

ROWS = 2_000


@pytest.fixture
def service(tmp_path: Path) -> Iterator[int]:
    customer_ratings_store(tmp_path / "store.sqlite3", customer_rows()[:ROWS])
    server, port = start_server(tmp_path, "service")
    yield port
    server.terminate()
    server.wait(30)


def test_hostile_clients_report_what_the_service_did_to_them(service: int) -> None:
    options = [
        "--idle",
        "2",
        "--subscribers",
        "3",
        "--stalled",
        "1",
        "--url-mb",
        "0.2",
        "--piece-ms",
        "20",
        "--drain-s",
        "1",
    ]
    command = [
        sys.executable,
        "-m",
        "infra.bench.hostile",
        "--port",
        str(service),
        "--duration",
        "3",
        *options,
    ]
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, timeout=60).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["idle"] == {"held": 2, "closed_by_service": 0, "refused": 0}  # its head timeout is 10 s
    readers = seen["reading_subscribers"]
    assert readers["count"] == 2 and readers["ended"] == []
    assert readers["mb_received_min"] > 0.2  # the whole snapshot: 2,000 rows of about 270 bytes
    (stalled,) = seen["stalled_subscribers"]
    assert not stalled["closed_by_service"] and stalled["bytes_buffered"] > 0  # its snapshot waited for it
    url = seen["slow_url"]
    assert set(url["statuses"]) == {"414"} and url["attempts"] >= 2  # refused, and it started over
    assert 8_192 <= url["most_bytes_sent"] < 200_000  # refused past the limit, before the end
