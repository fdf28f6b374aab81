"""python -m infra.bench.pg_reads: large reads over the views query service's PostgreSQL
protocol, beside PostgreSQL itself serving the same rows, without Kafka.

A store of `--rows` customer_ratings rows (about 250 bytes of text each) is served by the
product's `PgServer`, with the service's defaults (VIEWS_PG_MAX_ROWS, VIEWS_PG_TIMEOUT_S...), in
a process of its own; then the same rows, loaded from the service's own export, by a throwaway
PostgreSQL cluster (the stack's pinned major version, its default settings, a table with the
key as its primary key, ANALYZEd) on a free loopback port. Each is asked the same, one client
at a time:

- export: psql's `\\copy customer_ratings TO FILE CSV HEADER` (every row);
- chunks: psycopg's named cursor (DECLARE, then FETCH FORWARD `--chunk` until none: what pandas'
  `read_sql(..., chunksize=N)` and SQLAlchemy's `stream_results` send) over a filter;
- fetchall: a named cursor's `fetchall()` (FETCH ALL) of every row;
- ranges: `--ranges` queries of 100 consecutive keys (`WHERE user_id BETWEEN $1 AND $1 + 99`),
  as rows ordered by the key and as a count, each timed by the client.

For each: wall seconds, rows a second, the server's CPU seconds and its largest memory (PSS:
the views server's process; PostgreSQL's postmaster and backends, its shared buffers counted
once). The client runs
at the same CPU weight as the servers. `--no-postgres` measures the views server alone. Run it
on a quiet machine: it measures it. The figures go to `--out` as JSON.
"""

import argparse
import asyncio
import json
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from foundation.view_marker import ViewMarker
from infra.bench.memory import PeakRss
from infra.bench.results import exit_on_sigterm, write_result
from infra.stack.artifacts import postgres_bin
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.versions import load_versions
from services.views.config import ViewsApiSettings
from services.views.pgwire import PgServer
from services.views.sql import SqlReader
from services.views.store import Change, Store, key_of

COLUMNS = [
    {"name": "user_id", "type": "int"},
    {"name": "ratings", "type": "long"},
    {"name": "average_stars", "type": "double"},
    {"name": "club_status", "type": "string"},
    {"name": "full_name", "type": "string"},
    {"name": "last_message", "type": "string"},
]
TABLE = (
    "CREATE TABLE customer_ratings (user_id int PRIMARY KEY, ratings bigint, average_stars float8,"
    " club_status text, full_name text, last_message text)"
)
FILTER = "SELECT user_id, ratings, last_message FROM customer_ratings WHERE ratings > 10"
RANGE_ROWS = "SELECT * FROM customer_ratings WHERE user_id BETWEEN %s AND %s + 99 ORDER BY user_id"
RANGE_COUNT = "SELECT count(*) FROM customer_ratings WHERE user_id BETWEEN %s AND %s + 99"
_BATCH = 20_000  # rows a store transaction while it is filled


def fill(path: Path, rows: int) -> None:
    """The query service's store at `path` with `rows` customer_ratings rows, as the changelog
    process leaves it (its statistics made once caught up)."""
    store = Store(path)
    marker = ViewMarker.decode({"view": "customer_ratings", "key": ["user_id"], "columns": COLUMNS})
    rnd = random.Random(7)
    for start in range(0, rows, _BATCH):
        changes = []
        for user in range(start, min(rows, start + _BATCH)):
            row = {
                "user_id": user,
                "ratings": rnd.randint(1, 500),
                "average_stars": round(rnd.uniform(1, 5), 3),
                "club_status": rnd.choice(["bronze", "silver", "gold", "platinum"]),
                "full_name": f"Customer {user} Lastname",
                "last_message": f"review {user}: " + "the train was late and the seat was broken " * 4,
            }
            changes.append(Change("customer_ratings", key_of([user]), ("user_id",), json.dumps(row)))
        store.apply(changes, {"customer_ratings": marker}, {})
    store.analyze()


def serve(path: Path, port: int) -> None:
    """The views server process: the product's PgServer over the store at `path`, with the
    service's default settings."""
    settings = ViewsApiSettings()
    reader = SqlReader(Store(path), max_rows=settings.pg_max_rows, timeout_s=settings.pg_timeout_s)

    async def run() -> None:
        pg = settings.pg()
        server = PgServer(
            reader,
            type(pg)("127.0.0.1", port, pg.max_connections, pg.startup_timeout_s, None, pg.stream_timeout_s),
        )
        await server.start()
        await asyncio.Event().wait()

    asyncio.run(run())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(conninfo: str, server: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            with psycopg.connect(conninfo, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
                return
        except psycopg.OperationalError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise SystemExit(f"{what} did not start: see {log}") from None
            time.sleep(0.3)


class Postgres:
    """A throwaway PostgreSQL cluster in `folder` on a free loopback port, its superuser signed
    in by a random password; run as the stack's service user under root (PostgreSQL refuses
    root)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self.password = secrets.token_urlsafe(16)
        self.user = StackSettings().service_user if os.geteuid() == 0 else None
        self.bin = postgres_bin(load_versions())
        self.process: subprocess.Popen[bytes] | None = None

    def _as_user(self, cmd: list[str]) -> list[str]:
        return ["runuser", "-u", self.user, "--", *cmd] if self.user else cmd

    def start(self) -> str:
        """The cluster made and started; its connection string."""
        if not (self.bin / "initdb").exists():
            raise SystemExit(f"PostgreSQL is not installed at {self.bin}: `make install` installs it")
        self.folder.mkdir(parents=True)
        secret = self.folder / "pw"
        secret.touch(mode=0o600)  # its owner's alone, for the moment initdb reads it
        secret.write_text(self.password)
        if self.user:
            shutil.chown(self.folder, self.user)
            shutil.chown(secret, self.user)
        data = self.folder / "data"
        init = [str(self.bin / "initdb"), f"--pgdata={data}", "--username=bench", f"--pwfile={secret}"]
        init += ["--auth=scram-sha-256", "--encoding=UTF8", "--locale=C"]
        made = subprocess.run(self._as_user(init), capture_output=True, text=True, check=False)
        if made.returncode != 0:
            raise SystemExit(f"initdb failed:\n{made.stdout}{made.stderr}")
        secret.unlink()
        log = self.folder / "postgres.log"
        cmd = [str(self.bin / "postgres"), "-D", str(data), "-c", f"port={self.port}"]
        cmd += ["-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.folder}"]
        with log.open("ab") as err:
            self.process = subprocess.Popen(self._as_user(cmd), stdout=err, stderr=err)
        os.environ["PGPASSWORD"] = self.password  # libpq's, for psql and psycopg: not on a command line
        conninfo = f"host=127.0.0.1 port={self.port} user=bench dbname=postgres"
        _ready(conninfo, self.process, "PostgreSQL", log)
        return conninfo

    def server_pid(self) -> int:
        """The postmaster's pid (runuser's child under root)."""
        assert self.process is not None
        if not self.user:
            return self.process.pid
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return int(children[0])

    def stop(self) -> None:
        os.environ.pop("PGPASSWORD", None)
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()


def _cpu_s(pid: int) -> float:
    """utime + stime of a process, with those of its children that ended (cutime + cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds of a server so far: the process, its children that ended (PostgreSQL's
    backends, reaped by the postmaster) and those still running."""
    total = _cpu_s(pid)
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            total += _cpu_s(int(child))
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile: counted in its parent's once reaped
    return total


def _tree_pss_kib(pid: int) -> int:
    """Proportional set size of a process and its children (PostgreSQL's shared buffers
    counted once across its backends, not once in each as RSS would)."""
    total = 0
    for each in [str(pid), *Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]:
        try:
            rollup = Path(f"/proc/{each}/smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))
    return total


def _measured(pid: int, work: Callable[[], int]) -> dict[str, Any]:
    """`work` (which returns the rows it read) timed, with the server's CPU and peak memory."""
    memory = PeakRss(pid, interval_s=0.05, measure=_tree_pss_kib)
    memory.peak_kib = _tree_pss_kib(pid)  # at its start: a phase may be shorter than a sample
    cpu = _tree_cpu_s(pid)
    started = time.perf_counter()
    rows = work()
    wall = time.perf_counter() - started
    return {
        "rows": rows,
        "wall_s": round(wall, 3),
        "rows_per_s": round(rows / wall) if wall else None,
        "server_cpu_s": round(_tree_cpu_s(pid) - cpu, 3),
        "server_pss_mb_max": memory.stop(),
    }


def _psql_copy(conninfo: str, sql: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["psql", conninfo, "-X", "-v", "ON_ERROR_STOP=1", "-c", sql],
        capture_output=True,
        text=True,
        check=True,
    )


def export(conninfo: str, out: Path) -> int:
    _psql_copy(conninfo, f"\\copy customer_ratings TO '{out}' CSV HEADER")
    with out.open("rb") as written:
        return sum(1 for _ in written) - 1


def chunks(conninfo: str, size: int) -> int:
    read = 0
    with psycopg.connect(conninfo) as conn, conn.cursor("chunks") as cur:
        cur.execute(FILTER)
        while batch := cur.fetchmany(size):
            read += len(batch)
    return read


def fetch_all(conninfo: str) -> int:
    with psycopg.connect(conninfo) as conn, conn.cursor("all") as cur:
        cur.execute("SELECT * FROM customer_ratings")
        return len(cur.fetchall())


def ranges(conninfo: str, count: int, rows: int, sql: str) -> dict[str, Any]:
    """`count` range queries over random ranges of 100 keys; the client's latencies."""
    rnd = random.Random(11)
    took = []
    read = 0
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for _ in range(count):
            start = rnd.randrange(max(1, rows - 100))
            began = time.perf_counter()
            read += len(conn.execute(sql, (start, start)).fetchall())
            took.append(1000 * (time.perf_counter() - began))
    took.sort()
    return {
        "queries": count,
        "rows": read,
        "p50_ms": round(took[len(took) // 2], 2),
        "p99_ms": round(took[min(len(took) - 1, int(len(took) * 0.99))], 2),
        "max_ms": round(took[-1], 2),
    }


def measure(conninfo: str, pid: int, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    csv = folder / "export.csv"
    figures: dict[str, Any] = {"export": _measured(pid, lambda: export(conninfo, csv))}
    figures["export"]["mb"] = round(csv.stat().st_size / 1e6, 1)
    print("  export", figures["export"], flush=True)
    figures["chunks"] = _measured(pid, lambda: chunks(conninfo, args.chunk)) | {"chunk": args.chunk}
    print("  chunks", figures["chunks"], flush=True)
    figures["fetchall"] = _measured(pid, lambda: fetch_all(conninfo))
    print("  fetchall", figures["fetchall"], flush=True)
    for name, sql in (("range_rows", RANGE_ROWS), ("range_count", RANGE_COUNT)):
        ranges(conninfo, 20, args.rows, sql)  # warm: the drivers' prepared statements, the caches
        figures[name] = ranges(conninfo, args.ranges, args.rows, sql)
        print(f"  {name}", figures[name], flush=True)
    return figures


def views_server(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    store = folder / "views" / "store.sqlite3"  # the store keeps its folder to its owner
    store.parent.mkdir()
    started = time.monotonic()
    fill(store, args.rows)
    print(f"==> views store: {args.rows:,} rows in {time.monotonic() - started:.1f} s", flush=True)
    port = _free_port()
    log = folder / "views-server.log"
    with log.open("ab") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "infra.bench.pg_reads", "--serve", str(store), str(port)],
            stderr=err,
            cwd=REPO_ROOT,
        )
    conninfo = f"host=127.0.0.1 port={port} user=bench dbname=views"
    try:
        _ready(conninfo, server, "the views server", log)
        print("==> the views query service's PostgreSQL protocol (PgServer)", flush=True)
        return measure(conninfo, server.pid, folder, args)
    finally:
        server.terminate()
        server.wait(30)


def postgres_server(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    cluster = Postgres(folder / "postgres")
    try:
        conninfo = cluster.start()
        _psql_copy(conninfo, TABLE)
        _psql_copy(conninfo, f"\\copy customer_ratings FROM '{folder / 'export.csv'}' CSV HEADER")
        _psql_copy(conninfo, "ANALYZE customer_ratings")
        print(f"==> PostgreSQL {load_versions().postgres_major} (its defaults), the same rows", flush=True)
        return measure(conninfo, cluster.server_pid(), folder / "postgres", args)
    finally:
        cluster.stop()


def _table(views: dict[str, Any], postgres: dict[str, Any] | None) -> None:
    print(f"\n{'':<34}{'views service':>16}{'PostgreSQL' if postgres else '':>16}")
    rows = [
        ("export (\\copy): s", "export", "wall_s"),
        ("export: server CPU s", "export", "server_cpu_s"),
        ("export: server PSS MB, largest", "export", "server_pss_mb_max"),
        ("chunks (FETCH n): s", "chunks", "wall_s"),
        ("fetchall (FETCH ALL): s", "fetchall", "wall_s"),
        ("fetchall: server PSS MB, largest", "fetchall", "server_pss_mb_max"),
        ("100 rows of a key range: p50 ms", "range_rows", "p50_ms"),
        ("100 rows of a key range: p99 ms", "range_rows", "p99_ms"),
        ("count of a key range: p50 ms", "range_count", "p50_ms"),
        ("count of a key range: p99 ms", "range_count", "p99_ms"),
    ]
    for label, phase, figure in rows:
        other = postgres[phase][figure] if postgres else ""
        print(f"{label:<34}{views[phase][figure]!s:>16}{other!s:>16}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        serve(Path(argv[1]), int(argv[2]))
        return 0
    parser = argparse.ArgumentParser(
        prog="make bench-pg", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=300_000, help="rows of the view (default %(default)s)")
    parser.add_argument(
        "--chunk", type=int, default=50_000, help="rows a FETCH of chunks (default %(default)s)"
    )
    parser.add_argument("--ranges", type=int, default=500, help="range queries each (default %(default)s)")
    parser.add_argument("--no-postgres", action="store_true", help="the views server alone")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "pg_reads.json")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="pg-reads-") as name:
        folder = Path(name)
        folder.chmod(0o755)  # the service user's PostgreSQL reads the export from it
        views = views_server(folder, args)
        postgres = None if args.no_postgres else postgres_server(folder, args)
    _table(views, postgres)
    write_result({"rows": args.rows, "views_service": views, "postgres": postgres}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
