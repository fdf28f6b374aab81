"""python -m infra.bench.server: what a pull query costs the views query service's server over
HTTP, in microseconds of its CPU, without Kafka.

The service's app over 100,000 customer_ratings rows is served by uvicorn in a process of its
own, twice: with the service's HTTP protocol (pulls answered by the protocol), then with
uvicorn's own httptools protocol (every request through the ASGI app). Each is pulled at a fixed
rate by `infra.bench.pull` (keep-alive connections, random keys) while the server process's CPU
is read from /proc, and its largest resident memory. One JSON line per protocol. Run it on a
quiet machine: it measures it.

--hostile: with the clients of `infra.bench.hostile` beside the pulls (50 idle connections, 20
SSE subscribers of the whole view, 5 of which never read, a 10 MB URL sent slowly), and what
they saw.
"""

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import uvicorn

from infra.bench import hostile
from infra.bench.job import thread_cpu_s
from infra.bench.memory import PeakRss
from infra.bench.store import ROWS, CaughtUp, customer_ratings_store, customer_rows
from services.views.api import Api
from services.views.config import ViewsApiSettings
from services.views.hub import Hub
from services.views.protocol import pull_protocol
from services.views.store import Store


def serve(folder: Path, port: int, protocol: str) -> None:
    """The server process: the service's app over the store in `folder`."""
    api = Api(ViewsApiSettings(), Store(folder / "store.sqlite3"), Hub(), CaughtUp())  # type: ignore[arg-type]
    http: Any = pull_protocol(api.pull) if protocol == "service" else "httptools"
    uvicorn.run(api.app(), host="127.0.0.1", port=port, http=http, log_level="warning", lifespan="off")


def _cpu_s(pid: int) -> float:
    return thread_cpu_s(pid)[""][1]  # the whole process


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(folder: Path, protocol: str) -> tuple[subprocess.Popen[bytes], int]:
    """The server process over the store in `folder`, once it answers a pull; and its port."""
    port = _free_port()
    log = folder / f"server-{protocol}.log"  # a warning for each refused request of the hostile clients
    with log.open("ab") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "infra.bench.server", "--serve", str(folder), str(port), protocol],
            stderr=err,
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/views/customer_ratings/1", timeout=5):
                return server, port
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise SystemExit(f"the {protocol} server did not start: see {log}") from None
            time.sleep(0.2)


def measure(folder: Path, protocol: str, args: argparse.Namespace) -> dict[str, Any]:
    server, port = start_server(folder, protocol)
    try:
        clients = hostile.start(port, args.duration) if args.hostile else None
        memory = PeakRss(server.pid)
        before = _cpu_s(server.pid)
        pull = ["infra.bench.pull", "--port", str(port), "--ids", str(folder / "ids.json")]
        client = subprocess.run(
            [sys.executable, "-m", *pull, "--rate", str(args.rate), "--duration", str(args.duration)],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        spent = _cpu_s(server.pid) - before
        peak_mb = memory.stop()
        hostile_seen = hostile.seen(clients, 120) if clients is not None else None
    finally:
        server.terminate()
        server.wait(30)
    pulled = json.loads(client.stdout)
    return {
        "protocol": protocol,
        "server_cpu_us_per_pull": round(1e6 * spent / pulled["requests"], 1),
        "server_cores": round(spent / args.duration, 3),
        "client_cpu_us_per_pull": round(1e6 * pulled["cpu_s"] / pulled["requests"], 1),  # with its start
        **{
            k: pulled[k]
            for k in ("requests", "achieved_per_s", "statuses", "p50_ms", "p99_ms", "max_ms", "worst_seconds")
        },
        "server_rss_mb_max": peak_mb,
        **({"hostile": hostile_seen} if hostile_seen is not None else {}),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        serve(Path(argv[1]), int(argv[2]), argv[3])
        return 0
    parser = argparse.ArgumentParser(prog="python -m infra.bench.server", description=__doc__)
    parser.add_argument("--rate", type=float, default=1000, help="pulls a second (default %(default)s)")
    parser.add_argument("--duration", type=float, default=20, help="seconds each (default %(default)s)")
    parser.add_argument(
        "--hostile",
        action="store_true",
        help="with the hostile clients of infra.bench.hostile beside the pulls",
    )
    parser.add_argument(
        "--protocols", nargs="+", choices=("service", "uvicorn"), default=["service", "uvicorn"]
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        customer_ratings_store(folder / "store.sqlite3", customer_rows())
        (folder / "ids.json").write_text(json.dumps(list(range(ROWS))))
        for protocol in args.protocols:
            print(json.dumps(measure(folder, protocol, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
