"""Helpers of the views job's integration tests: the job as a child process, its topics, and
the views recomputed in Python from what the enriched topic holds."""

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from foundation.changelog_record import ChangelogRecord
from support.kafka import COMPACTED, drop_topics, make_topics, read_topic
from support.services import RUNNING, ServiceProcess
from support.spark import JOB_STOP_S

StackEnv = dict[str, str]
HOUR_MS = 3_600_000


@dataclass
class ViewTopics:
    """The views job's topics, all new; the enriched topic too unless `enriched` names one."""

    suffix: str
    enriched: str = ""
    own_enriched: bool = field(init=False)
    customer_ratings: str = field(init=False)
    segment_hourly: str = field(init=False)
    commits: str = field(init=False)
    dlq: str = field(init=False)
    catalog: str = field(init=False)

    def __post_init__(self) -> None:
        self.own_enriched = not self.enriched
        self.enriched = self.enriched or f"test-enriched-{self.suffix}"
        self.customer_ratings = f"test-view-{self.suffix}.customer_ratings"
        self.segment_hourly = f"test-view-{self.suffix}.segment_hourly"
        self.commits = f"test-views-commits-{self.suffix}"
        self.dlq = f"test-views-dlq-{self.suffix}"
        self.catalog = f"test-views-catalog-{self.suffix}"

    def create(self, stack_env: StackEnv) -> None:
        make_topics(stack_env, [self.customer_ratings, *([self.enriched] if self.own_enriched else [])], 4)
        make_topics(stack_env, [self.segment_hourly, self.dlq], partitions=1)
        make_topics(stack_env, [self.commits], partitions=1, config=COMPACTED)

    def drop(self, stack_env: StackEnv) -> None:
        """Every topic the test made or its views job made (views declared in SQL, the catalog)."""
        own = [self.enriched] if self.own_enriched else []
        admin = AdminClient({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
        existing = admin.list_topics(timeout=10).topics
        made = [t for t in existing if t.startswith(f"test-view-{self.suffix}.") or t == self.catalog]
        drop_topics(
            stack_env,
            sorted({*own, self.customer_ratings, self.segment_hourly, self.commits, self.dlq, *made}),
        )

    def env(self) -> dict[str, str]:
        return {
            "VIEWS_JOB_ENRICHED_TOPIC": self.enriched,
            "VIEWS_JOB_TOPIC_PREFIX": f"test-view-{self.suffix}.",
            "VIEWS_JOB_COMMITS_TOPIC": self.commits,
            "VIEWS_JOB_DLQ_TOPIC": self.dlq,
            "VIEWS_JOB_NAME": f"test-views-{self.suffix}",
            "VIEWS_JOB_CATALOG_TOPIC": self.catalog,
        }


class ViewsJob(ServiceProcess):
    """`python -m enrichment_job.views` with its own state folder and topics; kill -9 like a crash."""

    def __init__(self, stack_env: StackEnv, topics: ViewTopics, workdir: Path, **settings: str) -> None:
        env = {
            **topics.env(),
            "VIEWS_JOB_BOOTSTRAP_SERVERS": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
            "VIEWS_JOB_SPARK_JARS": stack_env["SPARK_JARS"],
            "VIEWS_JOB_STATE_DIR": str(workdir / "views-state"),
            "VIEWS_JOB_TRIGGER_INTERVAL": "1 second",
            "JAVA_HOME": stack_env["JAVA_HOME"],
            **settings,
        }
        super().__init__("enrichment_job.views", "VIEWS_JOB_", env, workdir)

    def stop(self, timeout_s: float = JOB_STOP_S) -> int:
        """SIGTERM and wait, long enough for a stop that records the class archive."""
        return super().stop(timeout_s)

    def start_for_module(self) -> "ViewsJob":
        """Started for a module's tests: the fixture that started it stops it, not each test."""
        self.start()
        RUNNING.remove(self)
        return self


def latest_rows(stack_env: StackEnv, topic: str, min_records: int = 0) -> dict[str, dict[str, Any]]:
    """Key (the record's, as JSON text) -> the latest row of a changelog topic (read_committed),
    as a compacted read sees it: a tombstone removes its key."""
    rows: dict[str, dict[str, Any]] = {}
    for msg in read_topic(stack_env, topic, min_records=min_records, idle_s=1):
        row = ChangelogRecord.decode(msg.key(), msg.value()).row
        if row is None:
            rows.pop(msg.key().decode(), None)
        else:
            rows[msg.key().decode()] = row
    return rows


def changes_per_key(stack_env: StackEnv, topic: str) -> dict[str, list[dict[str, Any] | None]]:
    """Key (the record's, as JSON text) -> each of its rows in order (None: a tombstone)."""
    out: dict[str, list[dict[str, Any] | None]] = defaultdict(list)
    for msg in read_topic(stack_env, topic, idle_s=1):
        out[msg.key().decode()].append(ChangelogRecord.decode(msg.key(), msg.value()).row)
    return out


def _key(**parts: Any) -> str:
    return json.dumps(parts, separators=(",", ":"))


def expected_customer_ratings(enriched: list[dict[str, Any]], unhappy_below: int = 3) -> dict[str, Any]:
    by_user: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in enriched:
        by_user[r["user_id"]].append(r)
    out = {}
    for user, rs in by_user.items():
        last = max(rs, key=lambda r: (r["rating_time"], r["rating_id"]))
        stars = sum(r["stars"] for r in rs)
        out[_key(user_id=user)] = {
            "user_id": user,
            "ratings": len(rs),
            "unhappy_ratings": sum(r["stars"] < unhappy_below for r in rs),
            "stars_sum": stars,
            "first_rating_time": min(r["rating_time"] for r in rs),
            "last_rating_time": last["rating_time"],
            "last_rating_id": last["rating_id"],
            "last_stars": last["stars"],
            "last_channel": last["channel"],
            "last_message": last["message"],
            "club_status": last["club_status"],
            "full_name": last["full_name"],
            "customer_matched": last["customer_matched"],
        }
    return out


def hour_of(ms: int) -> str:
    return datetime.fromtimestamp(ms // HOUR_MS * HOUR_MS / 1000, UTC).strftime("%Y-%m-%dT%H")


def late(record: dict[str, Any], lateness_s: int) -> bool:
    return bool(
        record["cdc_watermark_ms"] >= record["rating_time"] // HOUR_MS * HOUR_MS + HOUR_MS + lateness_s * 1000
    )


def expected_segment_hourly(
    enriched: list[dict[str, Any]], lateness_s: int, unhappy_below: int = 3
) -> dict[str, Any]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in enriched:
        if late(r, lateness_s):
            continue
        status = (r["club_status"] or "unknown") if r["customer_matched"] else "unmatched"
        groups[(status, r["channel"] or "unknown", hour_of(r["rating_time"]))].append(r)
    out = {}
    for (status, channel, hour), rs in groups.items():
        out[_key(club_status=status, channel=channel, hour=hour)] = {
            "club_status": status,
            "channel": channel,
            "hour": hour,
            "hour_start_ms": rs[0]["rating_time"] // HOUR_MS * HOUR_MS,
            "ratings": len(rs),
            "stars_sum": sum(r["stars"] for r in rs),
            "unhappy_ratings": sum(r["stars"] < unhappy_below for r in rs),
            "customers": len({r["user_id"] for r in rs}),
            "last_rating_time": max(r["rating_time"] for r in rs),
        }
    return out


def without(rows: dict[str, dict[str, Any]], column: str) -> dict[str, dict[str, Any]]:
    """The rows without one column (the averages, which are checked apart against stars_sum)."""
    return {k: {c: v for c, v in row.items() if c != column} for k, row in rows.items()}


def rows_equal(
    stack_env: StackEnv, topic: str, expected: dict[str, Any], ignore: str = ""
) -> Callable[[], str | None]:
    """A check for `wait_until`: the changelog's latest rows (less column `ignore`) are
    `expected`; otherwise what differs, the first keys of it by name."""

    def check() -> str | None:
        rows = latest_rows(stack_env, topic)
        rows = without(rows, ignore) if ignore else rows
        if rows == expected:
            return None
        wrong = sorted(k for k in expected if rows.get(k) != expected[k])[:5]
        return f"{topic}: {len(rows)} rows, {len(expected)} expected; differ: {wrong}"

    return check


def wait_until(check: Callable[[], str | None], job: ViewsJob, timeout_s: float = 240) -> None:
    """Until check() returns None (it returns what still differs)."""
    deadline, diff = time.monotonic() + timeout_s, "never checked"
    while time.monotonic() < deadline:
        assert job.proc is not None
        if job.proc.poll() is not None:
            pytest.fail(f"views job exited with {job.proc.returncode}:\n{job.tail()}")
        diff = check()
        if diff is None:
            return
        time.sleep(2)
    pytest.fail(f"views did not reach the expected rows within {timeout_s} s: {diff}\n{job.tail()}")


def views_cli(stack_env: StackEnv, topics: ViewTopics, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **topics.env(),
        "VIEWS_JOB_BOOTSTRAP_SERVERS": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
        "JAVA_HOME": stack_env["JAVA_HOME"],
    }
    return subprocess.run(
        [sys.executable, "-m", "enrichment_job.views", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
    )
