"""python -m infra.bench.hostile: the clients a query service facing a network must survive,
against the views query service, for --duration seconds, from a process of its own. Prints
what each kind saw as one JSON line.

- `--idle` connections that never send a byte. One the service closes (its request-head
  timeout) is opened again at once, so that many stay open all the time.
- `--subscribers` SSE subscribers of a whole view (`GET /views/<view>/changes`, its snapshot
  then its changes); `--stalled` of them send the request and never read a byte after it, as a
  client whose consumer hung. At the end each stalled one is drained: did the service close it
  (and with what last event), or does it still hold it open?
- one client that sends a --url-mb MB request target slowly, --piece-bytes at a time every
  --piece-ms: how many bytes the service took before it answered, and with what status. It
  starts over until the end.

The service under test must let --idle + --subscribers + 1 connections in, plus its other clients.
"""

import argparse
import asyncio
import json
import subprocess
import sys
import time
from typing import Any, cast

import uvloop


def _request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


class Figures:
    def __init__(self) -> None:
        self.idle_reopened = 0  # idle connections the service closed (each opened again)
        self.idle_refused = 0  # attempts to open one that failed
        self.reader_bytes: list[int] = []  # per reading subscriber: bytes it received
        self.reader_ended: list[str] = []  # per reading subscriber that the stream ended: why
        self.stalled: list[dict[str, Any]] = []
        self.url_attempts: list[dict[str, Any]] = []


async def _idle(port: int, stop: asyncio.Event, figures: Figures) -> None:
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            figures.idle_refused += 1
            await asyncio.sleep(0.5)
            continue
        read = asyncio.ensure_future(reader.read())  # b"" (or an answer, then b"") when closed
        await asyncio.wait([read, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set():
            figures.idle_reopened += 1
        read.cancel()
        writer.close()


async def _reading_subscriber(port: int, view: str, stop: asyncio.Event, figures: Figures) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request(f"/views/{view}/changes"))
    received, last = 0, b""
    try:
        while not stop.is_set():
            try:
                chunk = await asyncio.wait_for(reader.read(65536), timeout=1.0)
            except TimeoutError:
                continue  # nothing new: look at the clock
            if not chunk:
                figures.reader_ended.append(_last_event(last) or "closed")
                break
            received += len(chunk)
            last = (last + chunk)[-4096:]
    finally:
        figures.reader_bytes.append(received)
        writer.close()


def _transport(writer: asyncio.StreamWriter) -> asyncio.Transport:
    return cast("asyncio.Transport", writer.transport)  # uvloop's is not an asyncio.Transport


def _last_event(tail: bytes) -> str:
    """The name of the last complete SSE event in `tail` ("" when none)."""
    events = [line[7:].strip() for line in tail.split(b"\n") if line.startswith(b"event: ")]
    return events[-1].decode(errors="replace") if events else ""


async def _stalled_subscriber(
    port: int, view: str, stop: asyncio.Event
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # As small a receive window as the kernel allows, so the service's sends block early.
    _transport(writer).pause_reading()
    writer.write(_request(f"/views/{view}/changes"))
    await stop.wait()
    return reader, writer


async def _drain(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seconds: float
) -> dict[str, Any]:
    """Reads what a stalled subscriber was sent: the service closed it (and its last event) or
    still holds it open."""
    _transport(writer).resume_reading()
    received, tail, closed = 0, b"", False
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            chunk = await asyncio.wait_for(
                reader.read(1 << 20), timeout=max(0.1, deadline - time.monotonic())
            )
            if not chunk:
                closed = True
                break
            received += len(chunk)
            tail = (tail + chunk)[-4096:]
    except TimeoutError:
        pass
    writer.close()
    return {"closed_by_service": closed, "bytes_buffered": received, "last_event": _last_event(tail)}


async def _slow_url(port: int, args: argparse.Namespace, stop: asyncio.Event, figures: Figures) -> None:
    total = int(args.url_mb * 1_000_000)
    piece = b"a" * args.piece_bytes
    while not stop.is_set():
        started = time.monotonic()
        sent, status = 0, 0
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /views/customer_ratings?x=")
            answer = asyncio.ensure_future(reader.readline())
            while sent < total and not stop.is_set() and not answer.done():
                writer.write(piece)
                await writer.drain()
                sent += len(piece)
                await asyncio.sleep(args.piece_ms / 1000)
            if not answer.done() and not stop.is_set():
                writer.write(b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            line = await asyncio.wait_for(answer, timeout=5) if not stop.is_set() else b""
            parts = line.split()
            status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            writer.close()
        except (OSError, TimeoutError):
            status = -1
        if status or not stop.is_set():
            figures.url_attempts.append(
                {"status": status, "bytes_sent": sent, "seconds": round(time.monotonic() - started, 2)}
            )
        await asyncio.sleep(0.1)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    stop, figures = asyncio.Event(), Figures()
    tasks = [asyncio.ensure_future(_idle(args.port, stop, figures)) for _ in range(args.idle)]
    readers = args.subscribers - args.stalled
    tasks += [
        asyncio.ensure_future(_reading_subscriber(args.port, args.view, stop, figures))
        for _ in range(readers)
    ]
    stalled = [
        asyncio.ensure_future(_stalled_subscriber(args.port, args.view, stop)) for _ in range(args.stalled)
    ]
    tasks.append(asyncio.ensure_future(_slow_url(args.port, args, stop, figures)))
    await asyncio.sleep(args.duration)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    for task in await asyncio.gather(*stalled, return_exceptions=True):
        if isinstance(task, BaseException):
            figures.stalled.append({"error": repr(task)})
        else:
            figures.stalled.append(await _drain(*task, args.drain_s))
    statuses: dict[str, int] = {}
    for attempt in figures.url_attempts:
        statuses[str(attempt["status"])] = statuses.get(str(attempt["status"]), 0) + 1
    return {
        "idle": {
            "held": args.idle,
            "closed_by_service": figures.idle_reopened,
            "refused": figures.idle_refused,
        },
        "reading_subscribers": {
            "count": readers,
            "mb_received_min": round(min(figures.reader_bytes, default=0) / 1e6, 2),
            "mb_received_max": round(max(figures.reader_bytes, default=0) / 1e6, 2),
            "ended": figures.reader_ended,
        },
        "stalled_subscribers": figures.stalled,
        "slow_url": {
            "attempts": len(figures.url_attempts),
            "statuses": statuses,
            "most_bytes_sent": max((a["bytes_sent"] for a in figures.url_attempts), default=0),
            "longest_s": max((a["seconds"] for a in figures.url_attempts), default=0),
        },
    }


def start(port: int, seconds: float, **popen: Any) -> "subprocess.Popen[bytes]":
    """This program in a process of its own against the service on `port`, for `seconds`."""
    command = [sys.executable, "-m", "infra.bench.hostile", "--port", str(port), "--duration", str(seconds)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, **popen)


def seen(process: "subprocess.Popen[bytes]", timeout_s: float) -> dict[str, Any]:
    """What a process of `start` printed, once it ended."""
    out, _ = process.communicate(timeout=timeout_s)
    figures: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.bench.hostile", description=__doc__)
    parser.add_argument("--port", type=int, default=8087, help="the query service's HTTP port")
    parser.add_argument("--view", default="customer_ratings")
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--idle", type=int, default=50, help="idle connections held open")
    parser.add_argument("--subscribers", type=int, default=20, help="SSE subscribers of the whole view")
    parser.add_argument("--stalled", type=int, default=5, help="of them, the ones that never read")
    parser.add_argument("--drain-s", type=float, default=10, help="at the end, reading each stalled one")
    parser.add_argument("--url-mb", type=float, default=10, help="the slow client's request target, MB")
    parser.add_argument("--piece-bytes", type=int, default=5_000)
    parser.add_argument("--piece-ms", type=float, default=10)
    args = parser.parse_args(argv)
    print(json.dumps(uvloop.run(run(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
