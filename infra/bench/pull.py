"""python -m infra.bench.pull: pull queries against the views query service at a fixed rate,
from a process of its own, with latency measured on the client side.

Open loop: request i is due at start + i / rate whatever the answers before it did, over a few
keep-alive connections (asyncio streams, no client library in the way); a request that waits
for a free connection counts that wait in its latency. Keys: customer ids drawn at random from
--ids (a JSON file with a list). Prints the figures as one JSON line. `--kind`:
- `http`: `GET /views/customer_ratings/<id>` (`pull.c` is the same client in C, at about half
  the CPU a pull, which make bench-views uses by default);
- `pg`: `SELECT * FROM customer_ratings WHERE user_id = <id>` over the PostgreSQL wire protocol
  (the simple query protocol, as psql sends it), on --port;
- `pg-extended`: `SELECT * FROM customer_ratings WHERE user_id = $1` with the key as its
  parameter, over the extended query protocol (Parse, Bind, Describe, Execute and Sync in one
  write, as psycopg sends a query with parameters; JDBC and pgx send the same messages), on --port;
- `scan`: `GET /views/customer_ratings?user_id.gte=<id>&limit=100`, a range of 100 rows.
"""

import argparse
import asyncio
import json
import random
import struct
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

_PULL = "/views/customer_ratings/%d"
_SCAN = "/views/customer_ratings?user_id.gte=%d&limit=100"
_PG_PULL = "SELECT * FROM customer_ratings WHERE user_id = %d"  # an integer key only
_PG_PARAMETER_PULL = b"SELECT * FROM customer_ratings WHERE user_id = $1"


async def _connection(  # noqa: PLR0917 (one connection's inputs and outputs)
    kind: str,
    port: int,
    due: "asyncio.Queue[tuple[float, int] | None]",
    latencies: list[float],
    dues: list[float],
    statuses: dict[int, int],
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if kind.startswith("pg"):
        await _pg_start(reader, writer)
    while (item := await due.get()) is not None:
        at, key = item
        if kind == "pg":
            status = await _pg_query(reader, writer, _PG_PULL % key)
        elif kind == "pg-extended":
            status = await _pg_exchange(reader, writer, _pg_extended(_PG_PARAMETER_PULL, str(key).encode()))
        else:
            status = await _http_get(reader, writer, (_SCAN if kind == "scan" else _PULL) % key)
        latencies.append(time.perf_counter() - at)
        dues.append(at)
        statuses[status] = statuses.get(status, 0) + 1
    writer.close()


async def _http_get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> int:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    status_line = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def _pg_start(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The startup message (protocol 3.0, user and database `views`), then the server's messages
    up to its first ReadyForQuery."""
    params = b"user\0views\0database\0views\0\0"
    writer.write(struct.pack("!ii", 8 + len(params), 196608) + params)
    while True:
        kind, body = await _pg_message(reader)
        if kind == b"R" and struct.unpack("!i", body[:4])[0] != 0:
            raise SystemExit("the query service asks for a password (VIEWS_TOKEN): not supported here")
        if kind == b"E":
            raise SystemExit(f"the query service refused the connection: {body!r}")
        if kind == b"Z":
            return


async def _pg_query(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sql: str) -> int:
    """One simple query; 200 when it answered rows or none, 500 on an ErrorResponse."""
    text = sql.encode() + b"\0"
    return await _pg_exchange(reader, writer, b"Q" + struct.pack("!i", 4 + len(text)) + text)


def _pg_message_bytes(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", 4 + len(body)) + body


def _pg_extended(sql: bytes, parameter: bytes) -> bytes:
    """The unnamed statement and portal of `sql` with one parameter in text (its type left to the
    server), described and run to the end, then Sync."""
    return b"".join(
        (
            _pg_message_bytes(b"P", b"\0" + sql + b"\0" + struct.pack("!h", 0)),
            _pg_message_bytes(
                b"B", b"\0\0" + struct.pack("!hhi", 0, 1, len(parameter)) + parameter + struct.pack("!h", 0)
            ),
            _pg_message_bytes(b"D", b"P\0"),
            _pg_message_bytes(b"E", b"\0" + struct.pack("!i", 0)),
            _pg_message_bytes(b"S", b""),
        )
    )


async def _pg_exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, messages: bytes) -> int:
    """`messages` sent in one write; 200 when the answers up to ReadyForQuery hold no
    ErrorResponse, else 500."""
    writer.write(messages)
    status = 200
    while True:
        kind, _ = await _pg_message(reader)
        if kind == b"E":
            status = 500
        if kind == b"Z":
            return status


async def _pg_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readexactly(5)
    (length,) = struct.unpack("!i", head[1:])
    return head[:1], await reader.readexactly(length - 4)


async def run(  # noqa: PLR0917 (the run's settings)
    port: int, ids: list[int], rate: float, duration_s: float, connections: int, kind: str = "http"
) -> dict[str, Any]:
    due: asyncio.Queue[tuple[float, int] | None] = asyncio.Queue()
    latencies: list[float] = []
    dues: list[float] = []
    statuses: dict[int, int] = {}
    workers = [
        asyncio.create_task(_connection(kind, port, due, latencies, dues, statuses))
        for _ in range(connections)
    ]
    rnd = random.Random(11)
    started_unix = time.time()
    start = time.perf_counter()
    count = int(rate * duration_s)
    for i in range(count):
        at = start + i / rate
        ahead = at - time.perf_counter()
        if ahead > 0:
            await asyncio.sleep(ahead)
        due.put_nowait((at, rnd.choice(ids)))
    for _ in workers:
        due.put_nowait(None)
    await asyncio.gather(*workers)
    elapsed = time.perf_counter() - start
    ordered = sorted(latencies)

    def ms(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {
        "kind": kind,
        "target_per_s": rate,
        "started_unix": round(started_unix, 3),  # to match worst_seconds with other programs' logs
        "requests": len(latencies),
        "achieved_per_s": round(len(latencies) / elapsed),
        "statuses": statuses,
        "p50_ms": ms(0.5),
        "p99_ms": ms(0.99),
        "max_ms": round(ordered[-1] * 1000, 2),
        "worst_seconds": _worst_seconds(start, dues, latencies),
        "cpu_s": round(time.process_time(), 2),  # this client's own CPU: it shares the cores it measures
        # and the time it was ready to run but waited for a core, which its latencies include
        "runqueue_wait_s": round(float(Path("/proc/self/schedstat").read_text().split()[1]) / 1e9, 2),
    }


def _worst_seconds(
    start: float, dues: list[float], latencies: list[float], top: int = 5
) -> list[dict[str, float]]:
    """The seconds of the run (counted from its start, by when a request was due) whose slowest
    request was slowest: whether a p99 comes from a few stalls or from every second."""
    worst: dict[int, float] = {}
    count: dict[int, int] = {}
    for at, latency in zip(dues, latencies, strict=True):
        second = int(at - start)
        worst[second] = max(worst.get(second, 0.0), latency)
        count[second] = count.get(second, 0) + (latency > 0.02)
    ranked = sorted(worst, key=lambda s: worst[s], reverse=True)[:top]
    return [{"second": s, "max_ms": round(worst[s] * 1000, 1), "over_20_ms": count[s]} for s in ranked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.bench.pull", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ids", type=Path, required=True, help="JSON file: a list of customer ids")
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--kind", choices=("http", "pg", "pg-extended", "scan"), default="http")
    args = parser.parse_args(argv)
    ids = json.loads(args.ids.read_text())
    # On uvloop, as the query service: the client shares the cores it measures, and on asyncio's
    # own loop it took about a third more CPU a request (190 us against 140 us, 1,000/s).
    figures = uvloop.run(run(args.port, ids, args.rate, args.duration, args.connections, args.kind))
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
