"""Helpers of the enrichment job's integration tests: the job as a child process, its topics,
producing ratings and reading outputs back."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from enrichment_job.runtime.metrics import caught_up
from enrichment_job.runtime.state_dir import ObjectStoreSettings, StateDir
from foundation import customer_db
from infra.stack.clients import spark_job_state_in_s3
from support.kafka import drop_topics, make_topics, produce, read_topic, values
from support.spark import JOB_STOP_S

__all__ = [
    "Job",
    "Topics",
    "create_topics",
    "delete_topics",
    "produce",
    "rating",
    "read_topic",
    "s3_state",
    "update_join_case",
    "values",
]

StackEnv = dict[str, str]
OUTPUTS = ("ratings", "enriched", "alerts", "dlq")


@dataclass
class Topics:
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def name(self, role: str) -> str:
        return f"test-{role}-{self.suffix}"

    def env(self) -> dict[str, str]:
        return {
            "ENRICH_JOB_NAME": f"test-{self.suffix}",
            "ENRICH_RATINGS_TOPIC": self.name("ratings"),
            "ENRICH_ENRICHED_TOPIC": self.name("enriched"),
            "ENRICH_ALERTS_TOPIC": self.name("alerts"),
            "ENRICH_DLQ_TOPIC": self.name("dlq"),
            "ENRICH_CUSTOMERS_TOPIC": self.name("customers"),
        }


class Job:
    """`python -m enrichment_job` with its own state folder; killable like a real crash."""

    def __init__(
        self,
        stack_env: StackEnv,
        topics: Topics,
        state_dir: Path,
        grace_ms: int,
        extra: dict[str, str] | None = None,
        *,
        python: str = sys.executable,
        cwd: Path | None = None,
    ) -> None:
        """`python`, `cwd`: another interpreter (an installed wheel's venv) and working folder."""
        self.python, self.cwd = python, cwd
        self.state_dir = state_dir
        self.log = state_dir.with_suffix(".log")
        self.env = {
            **os.environ,
            **topics.env(),
            "ENRICH_BOOTSTRAP_SERVERS": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
            "ENRICH_SPARK_JARS": stack_env["SPARK_JARS"],
            "ENRICH_STATE_DIR": str(state_dir),
            "ENRICH_GRACE_MS": str(grace_ms),
            "ENRICH_UI_ENABLED": "false",
            "ENRICH_TRIGGER_INTERVAL": "1 second",
            "JAVA_HOME": stack_env["JAVA_HOME"],
            **(extra or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "Job":
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [self.python, "-m", "enrichment_job"],
                env=self.env,
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the Spark JVM included
            )
        self.wait_caught_up()
        return self

    def metrics(self) -> dict[str, Any]:
        path = Path(self.env.get("ENRICH_METRICS_FILE") or self.state_dir / "metrics.json")
        return json.loads(path.read_text()) if path.exists() else {}

    def wait_caught_up(self, timeout_s: float = 240) -> None:
        """Until the CDC watermark is within a few seconds of now and a ratings batch has run."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"job exited with {self.proc.returncode}:\n{self.tail()}")
            if caught_up(self.metrics(), max_lag_ms=8000):
                return
            time.sleep(1)
        pytest.fail(f"job did not catch up within {timeout_s} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """kill -9 the driver: the Python process and its Spark JVM, with no chance to clean up."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout_s: float = JOB_STOP_S) -> int | None:
        """Ctrl-C, as a user stops it; returns the exit code (None when it had to be killed). The
        wait covers a first stop that records the driver's class archive as the JVM exits."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
                return None
        return self.proc.returncode


def execute(db: Any, sql: str, *args: Any) -> None:
    """One statement on the customer database (autocommit)."""
    with db.cursor() as cur:
        cur.execute(sql, args)


def db_now_ms(db: Any) -> int:
    return customer_db.now_ms(db)


def by_rating(
    stack_env: StackEnv, topic: str, rating_ids: set[int], timeout_s: float = 120
) -> dict[int, Any]:
    """The records of `topic` (read_committed) with these rating ids, once every one is there."""
    found: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not rating_ids <= set(found):
        for value in values(read_topic(stack_env, topic, timeout_s=10)):
            if value["rating_id"] in rating_ids:
                found[value["rating_id"]] = value
    assert set(found) == rating_ids, f"missing {rating_ids - set(found)}"
    return found


def next_second(db: Any) -> int:
    """Waits into the next database second (Debezium's change times have whole seconds)."""
    start = db_now_ms(db) // 1000
    while db_now_ms(db) // 1000 == start:
        time.sleep(0.05)
    return db_now_ms(db)


def insert_customer(db: Any, club_status: str, customer_id: int | None = None) -> int:
    """A new customer ("Test <random>"), with the id given or the next one; its id."""
    row = {
        "id": customer_id,
        "first_name": "Test",
        "last_name": uuid.uuid4().hex[:8],
        "email": f"{uuid.uuid4().hex[:8]}@example.com",
        "gender": "Female",
        "club_status": club_status,
        "region": "EMEA",
        "comments": "integration test",
    }
    with db.cursor() as cur:
        return customer_db.insert(cur, "customers", row)


def rating(
    rating_id: int, user_id: int, stars: int, rating_time: int, message: str = "ok"
) -> tuple[bytes, bytes]:
    body = {
        "rating_id": rating_id,
        "user_id": user_id,
        "stars": stars,
        "route_id": 1,
        "rating_time": rating_time,
        "channel": "web",
        "message": message,
    }
    return str(user_id).encode(), json.dumps(body).encode()


def create_topics(stack_env: StackEnv, topics: Topics, partitions: int = 2) -> list[str]:
    names = [topics.name(role) for role in (*OUTPUTS, "customers")]
    make_topics(stack_env, names, partitions)
    return names


def delete_topics(stack_env: StackEnv, names: list[str]) -> None:
    drop_topics(stack_env, names)


def s3_state(stack_env: StackEnv, name: str, prefix: str = "ENRICH_") -> tuple[StateDir, dict[str, str]]:
    """A fresh state folder in the stack's state bucket (s3a://), and the settings for it of the
    job whose settings have `prefix` (the views job's: VIEWS_JOB_)."""
    env = spark_job_state_in_s3(stack_env, f"tests/{name}-{uuid.uuid4().hex[:8]}", prefix)
    store = ObjectStoreSettings(
        s3_endpoint=env[f"{prefix}S3_ENDPOINT"],
        s3_region=env[f"{prefix}S3_REGION"],
        s3_access_key=env[f"{prefix}S3_ACCESS_KEY"],
        s3_secret_key=env[f"{prefix}S3_SECRET_KEY"],
    )
    return StateDir(env[f"{prefix}STATE_DIR"], store), env


def update_join_case(stack_env: StackEnv, topics: Topics, db: Any, before: int, after: int) -> None:
    """a. A rating joins the customer row valid at its time; an update applies from then on
    (`before`, `after`: fresh rating ids)."""
    customer = insert_customer(db, "silver")
    t_silver = next_second(db)
    execute(db, "UPDATE customers SET club_status = 'platinum' WHERE id = %s", customer)
    t_platinum = next_second(db)
    produce(
        stack_env,
        topics.name("ratings"),
        [rating(before, customer, 1, t_silver - 500), rating(after, customer, 1, t_platinum)],
    )
    out = by_rating(stack_env, topics.name("enriched"), {before, after})
    assert out[before]["club_status"] == "silver"
    assert out[after]["club_status"] == "platinum"
    assert out[after]["customer_matched"] is True
    assert out[after]["full_name"].startswith("Test ")
    assert out[before]["customer_version"] != out[after]["customer_version"]
    alerts = by_rating(stack_env, topics.name("alerts"), {after})
    assert alerts[after]["club_status"] == "platinum" and alerts[after]["stars"] == 1
