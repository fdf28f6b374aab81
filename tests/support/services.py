"""Helpers of the services' integration tests: a service as a child process (killable like a real
crash), its topics, and valid enriched records to feed it."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

StackEnv = dict[str, str]


def enriched_record(rating_id: int, **overrides: Any) -> dict[str, Any]:
    """An enriched rating as the enrichment job writes it: a matched platinum customer by default."""
    user_id = overrides.pop("user_id", rating_id % 1000 + 1)
    base: dict[str, Any] = {
        "rating_id": rating_id,
        "user_id": user_id,
        "stars": 1 + rating_id % 5,
        "route_id": 7,
        "rating_time": 1_795_000_000_000 + rating_id * 1000,
        "channel": ("web", "iOS", "android")[rating_id % 3],
        "message": f"review number {rating_id}",
        "first_name": "Rica",
        "last_name": "Blaisdell",
        "email": f"user{user_id}@example.com",
        "gender": "Female",
        "club_status": ("bronze", "silver", "gold", "platinum")[rating_id % 4],
        "region": ("EMEA", "APAC", "NA", "LATAM")[rating_id % 4],
        "comments": "",
        "create_ts": "2026-11-01T10:00:00Z",
        "update_ts": "2026-11-01T10:00:00Z",
        "full_name": "Rica Blaisdell",
        "customer_matched": True,
        "customer_version": f"mysql-bin.000001:{rating_id}:0",
        "customer_valid_from": 1_790_000_000_000,
        "rating_kafka_ts": "2026-11-22T05:00:00.000Z",
        "rating_partition": 0,
        "rating_offset": rating_id,
        "cdc_watermark_ms": 1_795_000_000_000 + rating_id * 1000 + 500,
        "enriched_ms": int(time.time() * 1000),
    }
    return base | overrides


def as_kafka(record: dict[str, Any]) -> tuple[bytes, bytes]:
    return str(record["user_id"]).encode(), json.dumps(record).encode()


def unique_name(role: str) -> str:
    return f"test-{role}-{uuid.uuid4().hex[:8]}"


RUNNING: list["ServiceProcess"] = []  # every process a test started; see kill_leftovers()


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def ends_within(pid: int, timeout_s: float) -> bool:
    """Whether `pid` stops running within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def kill_leftovers() -> None:
    """kill -9 what a test left running (a failed assertion skips its own stop())."""
    while RUNNING:
        service = RUNNING.pop()
        if service.proc is not None and service.proc.poll() is None:
            service.kill()


class ServiceProcess:
    """`python -m services.<name>` with its own environment; its log next to its metrics file."""

    def __init__(
        self, module: str, prefix: str, env: dict[str, str], workdir: Path, python: str = sys.executable
    ) -> None:
        """`python`: another interpreter (an installed wheel's venv); it runs in `workdir`."""
        self.module, self.prefix, self.python, self.workdir = module, prefix, python, workdir
        self.log = workdir / f"{module.rsplit('.', 1)[-1]}.log"
        self.metrics_file = workdir / f"{module.rsplit('.', 1)[-1]}-metrics.json"
        self.env = {
            **os.environ,
            **env,
            f"{prefix}METRICS_FILE": str(self.metrics_file),
            f"{prefix}METRICS_INTERVAL_S": "0.5",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "ServiceProcess":
        # A restarted service shares the folder: its figures must not be read before it writes any.
        self.metrics_file.unlink(missing_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [self.python, "-m", self.module],
                env=self.env,
                cwd=self.workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        RUNNING.append(self)
        return self

    def metrics(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.metrics_file.read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def wait_for(
        self, condition: Callable[[dict[str, Any]], bool], what: str, timeout_s: float = 60
    ) -> dict[str, Any]:
        """Until condition(metrics) holds; fails with the log's tail if the process dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            m = self.metrics()
            if m and condition(m):
                return m
            if self.proc.poll() is not None:
                pytest.fail(f"{self.module} exited with {self.proc.returncode} before {what}:\n{self.tail()}")
            time.sleep(0.2)
        pytest.fail(f"{self.module}: no {what} within {timeout_s} s; metrics {self.metrics()}\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """kill -9: no chance to commit, flush or clean up."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        return int(self.proc.returncode)

    def wait_exit(self, timeout_s: float = 60) -> int:
        assert self.proc is not None
        try:
            return int(self.proc.wait(timeout_s))
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.module} still running after {timeout_s} s:\n{self.tail()}")
