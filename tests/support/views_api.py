"""The views query service in integration tests: changelog topics written the way the views job
writes them (rows and a marker per transaction), and the service as a child process."""

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from support.kafka import COMPACTED, drop_topics, make_topics
from support.psql import psql
from support.services import ServiceProcess

StackEnv = dict[str, str]
CUSTOMER_COLUMNS = [
    {"name": "user_id", "type": "int"},
    {"name": "ratings", "type": "long"},
    {"name": "average_stars", "type": "double"},
    {"name": "club_status", "type": "string"},
    {"name": "customer_matched", "type": "boolean"},
]
SEGMENT_COLUMNS = [
    {"name": "club_status", "type": "string"},
    {"name": "channel", "type": "string"},
    {"name": "hour", "type": "string"},
    {"name": "ratings", "type": "long"},
]


class Views:
    """A views job's topics, written the way it writes them: rows and a marker per transaction."""

    def __init__(self, stack_env: StackEnv) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.customers = f"test-view-{suffix}.customer_ratings"
        self.segments = f"test-view-{suffix}.segment_hourly"
        self.commits = f"test-views-commits-{suffix}"
        self.stack_env = stack_env
        self.producer = Producer(
            {"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"], "transactional.id": f"test-{suffix}"}
        )
        self.producer.init_transactions(30)
        self.batch = 0

    def create(self) -> None:
        make_topics(self.stack_env, [self.customers], partitions=4)
        make_topics(self.stack_env, [self.segments], partitions=1)
        make_topics(self.stack_env, [self.commits], partitions=1, config=COMPACTED)

    def drop(self) -> None:
        drop_topics(self.stack_env, [self.customers, self.segments, self.commits])

    def write(self, customers: list[dict[str, Any]] = (), segments: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        self.producer.begin_transaction()
        for row in customers:
            key = json.dumps({"user_id": row["user_id"]}, separators=(",", ":"))
            self.producer.produce(self.customers, key=key, value=json.dumps(row, separators=(",", ":")))
        for row in segments:
            key = {c: row[c] for c in ("club_status", "channel", "hour")}
            self.producer.produce(self.segments, key=json.dumps(key), value=json.dumps(row))
        self.batch += 1
        for view, columns, key in (
            ("customer_ratings", CUSTOMER_COLUMNS, ["user_id"]),
            ("segment_hourly", SEGMENT_COLUMNS, ["club_status", "channel", "hour"]),
        ):
            marker = {
                "batch_id": self.batch,
                "view": view,
                "key": key,
                "columns": columns,
                "enriched_to": {"0": self.batch * 10},
                "max_rating_time": 1_795_000_000_000 + self.batch,
                "rows": len(customers),
                "written_at_ms": int(time.time() * 1000),
            }
            self.producer.produce(self.commits, key=f"views-{view}", value=json.dumps(marker))
        self.producer.commit_transaction(30)


def customer(user_id: int, ratings: int, status: str = "gold") -> dict[str, Any]:
    return {
        "user_id": user_id,
        "ratings": ratings,
        "average_stars": 2.5,
        "club_status": status,
        "customer_matched": True,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service(ServiceProcess):
    def __init__(self, stack_env: StackEnv, views: Views, workdir: Path, **settings: str) -> None:
        self.port, self.pg_port = free_port(), free_port()
        env = {
            "VIEWS_BOOTSTRAP_SERVERS": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
            "VIEWS_CHANGELOG_TOPICS": json.dumps([views.customers, views.segments]),
            "VIEWS_COMMITS_TOPIC": views.commits,
            "VIEWS_PORT": str(self.port),
            "VIEWS_PG_PORT": str(self.pg_port),
            "VIEWS_STATE_DIR": str(workdir / "state"),
            "VIEWS_HEARTBEAT_S": "1",
            **settings,
        }
        super().__init__("services.views", "VIEWS_", env, workdir)

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def psql(self, sql: str) -> subprocess.CompletedProcess[str]:
        """`sql` asked with psql over the service's PostgreSQL port: rows as `a|b` lines."""
        return psql(self.pg_port, sql)

    def wait_healthy(self, timeout_s: float = 60) -> list[int]:
        """Polls /health until 200; returns every status seen."""
        seen: list[int] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"the service exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                status = self.get("/health")[0]
            except OSError:
                time.sleep(0.05)
                continue
            seen.append(status)
            if status == 200:
                return seen
            time.sleep(0.05)
        pytest.fail(f"not healthy within {timeout_s} s:\n{self.tail()}")


class Events(threading.Thread):
    """The events of one SSE stream, as (event, data) pairs."""

    def __init__(self, port: int, path: str) -> None:
        super().__init__(daemon=True)
        self.conn = HTTPConnection("127.0.0.1", port, timeout=30)
        self.conn.request("GET", path)
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        self.events: list[tuple[str, Any]] = []
        self.comments = 0

    def close(self) -> None:
        """Ends the stream from this side (the service keeps it open): the reading thread sees
        the connection end, and stops."""
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # the service ended it already
                pass
        self.join(10)
        self.response.close()
        self.conn.close()

    def run(self) -> None:
        try:
            self._read()
        except (OSError, ValueError, AttributeError):  # closed by close()
            pass

    def _read(self) -> None:
        event = ""
        while line := self.response.readline():
            text = line.decode().rstrip("\n")
            if text.startswith(":"):
                self.comments += 1
            elif text.startswith("event:"):
                event = text[6:].strip()
            elif text.startswith("data:"):
                self.events.append((event, json.loads(text[5:])))

    def wait(self, count: int, timeout_s: float = 30) -> list[tuple[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while len(self.events) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.events)
