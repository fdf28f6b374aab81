"""python -m infra.bench.store: the candidate embedded stores of the views query service on
100,000 customer_ratings rows: load time, a point lookup, a filtered scan, and a reopen (what a
restart costs), one line per store; then the service's own store (`services.views.store`)
applying changelog records as its changelog process does: batches of 2,000 changes over those
rows, with a subscriber of the whole view, in microseconds per change; and a pull query
in-process, as the service's HTTP protocol answers it and through its ASGI app, in microseconds
of CPU. What a pull costs the server over HTTP: `python -m infra.bench.server`."""

import argparse
import asyncio
import json
import random
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from foundation.view_marker import ViewMarker
from services.views.api import Api
from services.views.config import ViewsApiSettings
from services.views.hub import Hub, Subscriber, events_of
from services.views.store import Change, Store

ROWS = 100_000


def customer_rows() -> list[tuple[str, str]]:
    rnd = random.Random(1)
    out = []
    for i in range(ROWS):
        row = {
            "user_id": i,
            "ratings": rnd.randint(1, 500),
            "unhappy_ratings": rnd.randint(0, 100),
            "stars_sum": rnd.randint(1, 2500),
            "average_stars": round(rnd.uniform(1, 5), 3),
            "last_message": "the train was on time " * 3,
            "club_status": rnd.choice(["bronze", "silver", "gold", "platinum"]),
        }
        out.append((json.dumps([i]), json.dumps(row)))
    return out


def _time(fn: Callable[[], object], n: int = 1) -> float:
    """Seconds one call of `fn` takes, averaged over `n`."""
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def sqlite_store(rows: list[tuple[str, str]], folder: Path) -> dict[str, float]:
    path = folder / "store.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE rows (view TEXT, key TEXT, value TEXT, PRIMARY KEY (view, key)) WITHOUT ROWID")

    def load() -> None:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO rows VALUES ('c', ?, ?)", rows)
        conn.execute("COMMIT")

    figures = {"load_s": _time(load)}
    keys = [k for k, _ in random.Random(2).sample(rows, 1000)]
    it = iter(keys * 10)
    figures["get_us"] = 1e6 * _time(
        lambda: conn.execute("SELECT value FROM rows WHERE view='c' AND key=?", (next(it),)).fetchone(),
        10_000,
    )
    scan = "SELECT value FROM rows WHERE view='c' AND json_extract(value, '$.club_status') IS ? LIMIT 100"
    figures["scan_100_ms"] = 1000 * _time(lambda: conn.execute(scan, ("platinum",)).fetchall(), 20)
    conn.close()
    figures["reopen_s"] = _time(lambda: sqlite3.connect(path).execute("SELECT 1").fetchone())
    return figures


def dict_store(rows: list[tuple[str, str]], _: Path) -> dict[str, float]:
    store: dict[str, str] = {}
    figures = {"load_s": _time(lambda: store.update(rows))}
    keys = [k for k, _ in random.Random(2).sample(rows, 1000)]
    it = iter(keys * 10)
    figures["get_us"] = 1e6 * _time(lambda: store.get(next(it)), 10_000)

    def scan() -> list[str]:
        out = []
        for value in store.values():
            if json.loads(value)["club_status"] == "platinum":
                out.append(value)
                if len(out) == 100:
                    break
        return out

    figures["scan_100_ms"] = 1000 * _time(scan, 20)
    figures["reopen_s"] = float("nan")  # nothing kept: a restart reads every topic again
    return figures


def service_apply(rows: list[tuple[str, str]], folder: Path) -> dict[str, float]:
    """The query service's store and hub: load the rows, then apply 100,000 changes (each a
    row with one more rating) in batches of 2,000 and hand them to one subscriber of the view."""
    store, hub = Store(folder / "service.sqlite3"), Hub()
    hub.add(Subscriber("customer_ratings", None, asyncio.Queue()))
    initial = [Change("customer_ratings", key, ("user_id",), value) for key, value in rows]
    # The marker, as the views job writes one each batch: it names the key, which is indexed.
    marker = ViewMarker("customer_ratings", ("user_id",), [{"name": "user_id", "type": "int"}])
    load = {"customer_ratings": marker}
    figures = {"load_s": _time(lambda: store.apply(initial, load, {("t", 0): len(initial)}))}
    rnd = random.Random(3)
    changes = []
    for offset in range(ROWS):
        key, value = rows[rnd.randrange(ROWS)]
        changes.append(
            Change("customer_ratings", key, ("user_id",), value.replace("}", f', "v": {offset}}}'))
        )
    started = time.perf_counter()
    for start in range(0, ROWS, 2000):
        applied = store.apply(changes[start : start + 2000], {}, {("t", 0): ROWS + start})
        hub.publish(store.seq, events_of(applied))  # both processes' share, in one here
    figures["apply_us_per_change"] = 1e6 * (time.perf_counter() - started) / ROWS
    return figures


def customer_ratings_store(path: Path, rows: list[tuple[str, str]]) -> Store:
    """The query service's store at `path`, holding `rows` as the customer_ratings view with
    the marker that names its key and columns."""
    store = Store(path)
    marker = ViewMarker("customer_ratings", ("user_id",), [{"name": "user_id", "type": "int"}])
    initial = [Change("customer_ratings", key, ("user_id",), value) for key, value in rows]
    store.apply(initial, {"customer_ratings": marker}, {})
    return store


class CaughtUp:
    """The changelog process as the API sees it once the store has caught up."""

    failed = None
    caught_up = threading.Event()
    loading: frozenset[str] = frozenset()  # every view read to its topic's end


def service_pull(rows: list[tuple[str, str]], folder: Path) -> dict[str, float]:
    """A pull query in-process (no socket, no HTTP parsing), in microseconds of CPU: what the
    service's HTTP protocol calls for a row that exists (`pull_us`), and the ASGI app's route,
    which answers the pulls the protocol passes on (`routed_us`)."""
    store = customer_ratings_store(folder / "pull.sqlite3", rows)
    api = Api(ViewsApiSettings(), store, Hub(), CaughtUp())  # type: ignore[arg-type]
    app = api.app()
    rnd = random.Random(4)

    def pull() -> None:
        target = f"/views/customer_ratings/{rnd.randrange(ROWS)}".encode()
        if api.pull(target) is None:
            raise SystemExit(f"no row for {target!r}")

    async def routed() -> None:
        path = f"/views/customer_ratings/{rnd.randrange(ROWS)}"
        scope = {
            "type": "http",
            "method": "GET",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
        }
        scope |= {"headers": [], "root_path": "", "scheme": "http", "http_version": "1.1"}
        sent: list[Any] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Any) -> None:
            sent.append(message)

        await app(scope, receive, send)
        if sent[0]["status"] != 200:
            raise SystemExit(f"pull of {path} answered {sent[0]['status']}")

    async def routed_pulls(n: int) -> float:
        started = time.process_time()
        for _ in range(n):
            await routed()
        return (time.process_time() - started) / n

    asyncio.run(routed_pulls(2_000))  # warm
    _cpu(pull, 2_000)
    return {
        "pull_us": 1e6 * _cpu(pull, 20_000),
        "routed_us": 1e6 * asyncio.run(routed_pulls(20_000)),
        "get_us": 1e6 * _time(lambda: store.get("customer_ratings", "[7]"), 20_000),
    }


def _cpu(fn: Callable[[], object], n: int) -> float:
    """CPU seconds one call of `fn` takes, averaged over `n`."""
    started = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - started) / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.bench.store", description=__doc__)
    parser.parse_args(argv)  # no settings: --help says what it measures, and starts nothing
    rows = customer_rows()
    with tempfile.TemporaryDirectory() as folder:
        for name, store in (
            ("sqlite", sqlite_store),
            ("dict", dict_store),
            ("service", service_apply),
            ("pull", service_pull),
        ):
            figures = store(rows, Path(folder))
            print(name, json.dumps({k: round(v, 3) for k, v in figures.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
