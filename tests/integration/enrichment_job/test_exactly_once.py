"""f. kill -9 in the middle of a steady stream, restart from the checkpoint: every rating once
in the enriched topic, every alert once in the alert topic (read_committed). Once with the
job's state in a local folder, and once on the stack's Spark standalone cluster with its state
in S3 (s3a:// on the stack's S3 server); then with the join in Spark tasks
(ENRICH_JOIN_IN=tasks) on the cluster's executors, its state in a local folder (a task of a
partition runs on either executor, so a partition moves between Python workers too).
h. Replay: a fresh job (new checkpoint and table) over the same inputs gives the same records,
also when the run it replays joined in tasks and the replay joins on the driver."""

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.delta import Table, live_rows, user_metadata
from support.enrichment import (
    Job,
    Topics,
    create_topics,
    delete_topics,
    produce,
    rating,
    read_topic,
    s3_state,
    values,
)

from foundation import customer_db
from infra.stack.clients import app_db, spark_job_on_cluster

StackEnv = dict[str, str]
GRACE_MS = 1000
RATINGS = 600
JOINED_FIELDS = (
    "user_id",
    "stars",
    "customer_matched",
    "club_status",
    "full_name",
    "email",
    "customer_version",
)


@dataclass
class CrashRun:
    topics: Topics
    table: Table  # the customer table's files
    customers: list[int]
    produced: dict[int, int]  # rating_id -> stars
    platinum: set[int]
    enriched: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    stopped_with: int | None  # the restarted job's exit code after Ctrl-C
    stop_log: str  # what the restarted job logged


def _customers(stack_env: StackEnv) -> tuple[list[int], set[int]]:
    conn = app_db(stack_env)
    ids, platinum = [], set()
    with conn, conn.cursor() as cur:
        for i in range(6):
            status = "platinum" if i % 2 else "silver"
            row = {"first_name": "Eo", "last_name": str(i), "club_status": status}
            customer = customer_db.insert(
                cur, "customers", row | {"email": f"{uuid.uuid4().hex[:8]}@example.com"}
            )
            ids.append(customer)
            if status == "platinum":
                platinum.add(customer)
    return ids, platinum


def _steady_stream(stack_env: StackEnv, topic: str, customers: list[int], produced: dict[int, int]) -> None:
    rnd = random.Random(7)
    base = time.time_ns() // 1000
    for i in range(RATINGS):
        rid, user, stars = base + i, rnd.choice(customers), rnd.randint(1, 5)
        produce(stack_env, topic, [rating(rid, user, stars, int(time.time() * 1000))])
        produced[rid] = stars
        time.sleep(0.04)


# State in S3 on its own: test_state_in_s3.py; the cluster's run on the driver keeps it there.
@pytest.fixture(scope="module", params=["local", "cluster", "tasks-cluster"])
def crash_run(
    request: pytest.FixtureRequest, stack_env: StackEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CrashRun]:
    topics = Topics()
    names = create_topics(stack_env, topics)
    customers, platinum = _customers(stack_env)
    time.sleep(2)  # let the rows reach the CDC topic before the ratings
    state = tmp_path_factory.mktemp("crash") / "job"  # its log and metrics; the state too if local
    table: Table = state / "customer_versions"
    extra: dict[str, str] = {}
    if request.param == "cluster":
        s3, extra = s3_state(stack_env, "crash")
        extra["ENRICH_METRICS_FILE"] = str(state / "metrics.json")
        table = s3.locate("customer_versions")
    if request.param in ("cluster", "tasks-cluster"):
        extra |= spark_job_on_cluster(stack_env)
    # Each run says where it joins: on a cluster the default (auto) would take tasks.
    extra["ENRICH_JOIN_IN"] = "tasks" if request.param.startswith("tasks") else "driver"
    job = Job(stack_env, topics, state, GRACE_MS, extra).start()
    produced: dict[int, int] = {}
    stream = threading.Thread(
        target=_steady_stream, args=(stack_env, topics.name("ratings"), customers, produced)
    )
    stream.start()
    time.sleep(4)
    changed = customers[:2]  # changes the killed job commits to Kafka but not yet to Delta
    conn = app_db(stack_env)
    with conn, conn.cursor() as cur:
        for cid in changed:
            cur.execute("UPDATE customers SET email = %s WHERE id = %s", (f"new-{cid}@example.com", cid))
    time.sleep(6)
    job.kill()
    killed_at = len(produced)
    restart_log_from = job.log.stat().st_size
    job = Job(stack_env, topics, state, GRACE_MS, extra).start()
    stream.join()
    try:
        enriched = values(
            read_topic(stack_env, topics.name("enriched"), min_records=RATINGS, timeout_s=300, idle_s=15)
        )
        alerts = values(read_topic(stack_env, topics.name("alerts"), timeout_s=60, idle_s=5))
    finally:
        stopped_with = job.stop()
    assert 0 < killed_at < RATINGS, "the job must die in the middle of the stream"
    stop_log = job.log.read_bytes()[restart_log_from:].decode(errors="replace")
    yield CrashRun(topics, table, customers, produced, platinum, enriched, alerts, stopped_with, stop_log)
    delete_topics(stack_env, names)


def test_f_kill_9_and_restart_every_rating_and_alert_exactly_once(crash_run: CrashRun) -> None:
    counts = Counter(v["rating_id"] for v in crash_run.enriched)
    assert set(counts) == set(crash_run.produced)
    assert [rid for rid, n in counts.items() if n > 1] == []
    expected_alerts = {
        v["rating_id"] for v in crash_run.enriched if v["stars"] < 3 and v["user_id"] in crash_run.platinum
    }
    alert_counts = Counter(v["rating_id"] for v in crash_run.alerts)
    assert set(alert_counts) == expected_alerts and expected_alerts
    assert max(alert_counts.values()) == 1


def test_f_after_the_crash_the_customer_table_holds_each_change_once(crash_run: CrashRun) -> None:
    """The killed job's Delta appends may lag its Kafka commits; the restart appends the rest
    (re-read from the CDC topic) and Delta's transaction ids keep a re-append out."""
    table = crash_run.table
    rows = live_rows(table).to_pylist()
    offsets = Counter((r["cdc_partition"], r["cdc_offset"]) for r in rows)
    assert [o for o, n in offsets.items() if n > 1] == []
    # The test's own customers: a stack whose binlog was reset (RESET MASTER) holds older
    # changes at the same binlog positions as newer ones.
    ours = [r for r in rows if r["op"] != "r" and r["id"] in crash_run.customers]
    changes = Counter((r["source_file"], r["source_pos"], r["source_row"]) for r in ours)
    assert [c for c, n in changes.items() if n > 1] == []
    versions = Counter(r["id"] for r in rows)
    assert {cid: versions[cid] for cid in crash_run.customers} == {
        cid: 2 if cid in crash_run.customers[:2] else 1 for cid in crash_run.customers
    }
    batches = [m["batch_id"] for m in user_metadata(table) if "batch_id" in m]
    assert batches == sorted(set(batches)), "each append covers later batches than the one before"


def test_ctrl_c_stops_the_job_cleanly(crash_run: CrashRun) -> None:
    assert crash_run.stopped_with == 0, crash_run.stop_log[-3000:]
    assert "Traceback" not in crash_run.stop_log, crash_run.stop_log[-3000:]
    assert "SIGINT: stopping" in crash_run.stop_log


# The replay's state is local; the run in tasks keeps its state in a local folder too.
@pytest.mark.parametrize("crash_run", ["local", "tasks-cluster"], indirect=True)
def test_h_a_fresh_job_over_the_same_inputs_gives_the_same_records(
    stack_env: StackEnv, crash_run: CrashRun, tmp_path: Path
) -> None:
    replay_topics = Topics()
    names = create_topics(stack_env, replay_topics)
    job = Job(stack_env, replay_topics, tmp_path / "replay", GRACE_MS)
    job.env["ENRICH_RATINGS_TOPIC"] = crash_run.topics.name("ratings")
    job.start()
    try:
        replayed = values(
            read_topic(
                stack_env, replay_topics.name("enriched"), min_records=RATINGS, timeout_s=300, idle_s=10
            )
        )
    finally:
        job.stop()
        delete_topics(stack_env, names)

    def joined(records: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
        return {v["rating_id"]: tuple(v[f] for f in JOINED_FIELDS) for v in records}

    assert joined(replayed) == joined(crash_run.enriched)
