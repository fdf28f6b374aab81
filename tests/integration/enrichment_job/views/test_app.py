"""The views job against the real Kafka: exact counts, the late-data rule of segment_hourly,
dead letters, and a kill -9 mid-stream that neither loses nor doubles a count; the same counts
on the stack's Spark cluster with the RocksDB state checkpointed to S3."""

import itertools
import json
import os
import random
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.enrichment import s3_state
from support.kafka import produce, read_topic
from support.services import as_kafka, ends_within, enriched_record
from support.views import (
    HOUR_MS,
    ViewsJob,
    ViewTopics,
    changes_per_key,
    expected_customer_ratings,
    expected_segment_hourly,
    late,
    latest_rows,
    wait_until,
    without,
)

from enrichment_job.kafka.claim_check import Claimed
from enrichment_job.views.definition import BUILT_IN
from infra.bench.job import job_jvm
from infra.stack.clients import spark_job_on_cluster

StackEnv = dict[str, str]
LATENESS_S = 60
START_MS = 1_795_000_000_000 // HOUR_MS * HOUR_MS  # an hour boundary


def records(first: int, count: int, rng: random.Random) -> list[dict[str, Any]]:
    """Enriched ratings as the job releases them: the CDC clock on each record moves forward (a
    3-hour span over 1,500 records) and each rating_time is before it, most by under a second,
    one in twenty by one and a half to two and a half hours (late for its hour's window), one in
    twenty unmatched, a few without a channel."""
    out = []
    for i in range(first, first + count):
        clock = START_MS + i * 7_200 + 1_000
        behind = rng.randint(5_400_000, 9_000_000) if rng.random() < 0.05 else rng.randint(1, 900)
        matched = rng.random() >= 0.05
        out.append(
            enriched_record(
                i,
                user_id=rng.randint(1, 150),
                stars=rng.randint(1, 5),
                rating_time=clock - behind,
                cdc_watermark_ms=clock,
                channel=rng.choice(["web", "iOS", "android", None]),
                club_status=rng.choice(["bronze", "silver", "gold", "platinum"]) if matched else None,
                full_name=f"Customer {i % 150}" if matched else None,
                customer_matched=matched,
            )
        )
    return out


def views_match(stack_env: StackEnv, topics: ViewTopics, enriched: list[dict[str, Any]]) -> str | None:
    checks = (
        (topics.customer_ratings, expected_customer_ratings(enriched)),
        (topics.segment_hourly, expected_segment_hourly(enriched, LATENESS_S)),
    )
    for topic, expected in checks:
        rows = latest_rows(stack_env, topic)
        if without(rows, "average_stars") != expected:
            missing = len(set(expected) - set(rows))
            wrong = sum(1 for k in expected if k in rows and without(rows, "average_stars")[k] != expected[k])
            return f"{topic}: {len(rows)} rows, {missing} missing, {wrong} differ"
        for row in rows.values():
            assert row["average_stars"] == pytest.approx(row["stars_sum"] / row["ratings"], abs=0.000501)
    return None


def kill_mid_stream(
    stack_env: StackEnv, topics: ViewTopics, job: ViewsJob, stream: list[dict[str, Any]], after_s: float
) -> None:
    """Produces `stream` 50 records every 0.2 s, kill -9s the job `after_s` into it, then
    restarts the job once the stream is all in."""

    def produce_stream() -> None:
        for start in range(0, len(stream), 50):
            produce(stack_env, topics.enriched, [as_kafka(r) for r in stream[start : start + 50]])
            time.sleep(0.2)

    producer = threading.Thread(target=produce_stream)
    producer.start()
    time.sleep(after_s)
    job.kill()
    assert producer.is_alive(), "the kill came after the stream; it should fall inside it"
    producer.join()
    job.start()


def assert_no_change_twice(stack_env: StackEnv, topics: ViewTopics) -> None:
    for topic in (topics.customer_ratings, topics.segment_hourly):
        for key, values in changes_per_key(stack_env, topic).items():
            doubled = [a for a, b in itertools.pairwise(values) if a == b]
            assert not doubled, f"{topic} {key}: a change written twice"


def test_views_are_exact_dead_letter_what_they_cannot_count_and_survive_kill_9(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path
) -> None:
    rng = random.Random(7)
    first = records(0, 1_500, rng)
    # ... the last one near Kafka's record limit: its dead letter would not fit with its headers
    huge = b"x" * 950_000
    bad = [
        (b"1", b"not json at all"),
        (b"2", json.dumps({"rating_id": 5, "stars": 2}).encode()),
        (b"3", huge),
    ]
    produce(stack_env, topics.enriched, [as_kafka(r) for r in first[:700]] + bad)
    produce(stack_env, topics.enriched, [as_kafka(r) for r in first[700:]])
    job = ViewsJob(
        stack_env, topics, tmp_path, VIEWS_JOB_WINDOW_LATENESS_S=str(LATENESS_S), VIEWS_JOB_NICE="5"
    ).start()

    # 1. Every row equals the aggregate recomputed from the enriched topic.
    wait_until(lambda: views_match(stack_env, topics, first), job)
    # ... and a batch of ratings older than every one before it (no view's newest rating time
    # moves; released now, they are late for segment_hourly) changes customer_ratings' rows too.
    older = [
        enriched_record(
            10_000 + i,
            user_id=i + 1,
            stars=1,
            rating_time=START_MS - HOUR_MS + i,
            cdc_watermark_ms=START_MS + 1_500 * 7_200 + 1_000,  # the clock of the last record before
            channel="web",
            club_status="gold",
            full_name=f"Customer {i + 1}",
            customer_matched=True,
        )
        for i in range(5)
    ]
    produce(stack_env, topics.enriched, [as_kafka(r) for r in older])
    first += older
    wait_until(lambda: views_match(stack_env, topics, first), job)
    # ... kept by a job whose driver and Spark JVM run at the priority asked for.
    assert job.proc is not None
    jvm = job_jvm(job.proc.pid)
    assert jvm is not None, "no Spark JVM under the views job"
    lowered = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)  # VIEWS_JOB_NICE on this process's
    priorities = {os.getpriority(os.PRIO_PROCESS, pid) for pid in (job.proc.pid, jvm)}
    assert priorities == {lowered}, priorities
    late_ones = [r for r in first if late(r, LATENESS_S)]
    assert 30 < len(late_ones) < 120

    # 2. Dead letters: the unreadable records, and the late ratings segment_hourly refused (which
    #    customer_ratings counted), each with its reason and origin.
    dead = read_topic(stack_env, topics.dlq, min_records=3 + len(late_ones))
    reasons = {
        json.loads(m.value())["rating_id"] if (m.value() or b"")[:1] == b"{" else m.key(): dict(m.headers())
        for m in dead
    }
    assert reasons[b"1"][("dlq.reason")] == b"not an enriched rating (JSON)"
    assert reasons[5]["dlq.reason"] == b"missing user_id"
    # the near-limit one went without its value, which is kept whole in the claim-check store
    kept = reasons[b"3"]
    assert kept["dlq.reason"] == b"not an enriched rating (JSON)"
    claimed = Claimed.of(kept)
    assert claimed is not None and claimed.size == len(huge)
    assert claimed.local_path().read_bytes() == huge  # type: ignore[union-attr]
    assert [m.value() for m in dead if "dlq.value.location" in dict(m.headers())] == [None]
    for r in late_ones:
        reason = reasons[r["rating_id"]]["dlq.reason"].decode()
        assert reason.startswith("segment_hourly: late: the window of hour "), reason
        assert reasons[r["rating_id"]]["dlq.stage"] == b"views"
    assert len(dead) == 3 + len(late_ones)

    # 3. A kill -9 while records stream in, then a restart: nothing lost, nothing doubled.
    second = records(1_500, 1_500, rng)
    kill_mid_stream(stack_env, topics, job, second, rng.uniform(1.5, 4.5))  # 6 s or more of stream
    wait_until(lambda: views_match(stack_env, topics, first + second), job)
    assert_no_change_twice(stack_env, topics)
    dead = read_topic(stack_env, topics.dlq, min_records=3 + len(late_ones))
    assert len(dead) == 3 + sum(late(r, LATENESS_S) for r in first + second)

    # 4. Each view's marker says up to where the enriched topic is reflected: all of it.
    markers = {m.key().decode(): json.loads(m.value()) for m in read_topic(stack_env, topics.commits)}
    ends = sum(
        int(o) for o in markers[f"test-views-{topics.suffix}-views:customer_ratings"]["enriched_to"].values()
    )
    assert ends == len(first) + len(second) + len(bad)
    # segment_hourly, a windowed view, is kept by a query of its own
    segment = markers[f"test-views-{topics.suffix}-view-segment_hourly:segment_hourly"]
    assert segment["key"] == ["club_status", "channel", "hour"]
    # ... and each marker carries its view's SQL, which the query service shows (SHOW CREATE VIEW)
    customers = markers[f"test-views-{topics.suffix}-views:customer_ratings"]
    assert customers["sql"] == (BUILT_IN / "customer_ratings.sql").read_text()
    assert segment["sql"] == (BUILT_IN / "segment_hourly.sql").read_text()
    assert job.stop() == 0


def test_on_the_cluster_with_state_in_s3_the_views_are_exact_after_a_kill_9(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path
) -> None:
    """The views' aggregations run on the cluster's executors, their RocksDB state checkpointed
    to s3a://; after a kill -9 mid-stream the restarted job goes on from there."""
    rng = random.Random(11)
    first, second = records(0, 600, rng), records(600, 600, rng)
    produce(stack_env, topics.enriched, [as_kafka(r) for r in first])
    state, settings = s3_state(stack_env, "views", prefix="VIEWS_JOB_")
    settings |= spark_job_on_cluster(stack_env, "VIEWS_JOB_")
    job = ViewsJob(stack_env, topics, tmp_path, VIEWS_JOB_WINDOW_LATENESS_S=str(LATENESS_S), **settings)
    job.start()
    wait_until(lambda: views_match(stack_env, topics, first), job)
    kill_mid_stream(stack_env, topics, job, second, rng.uniform(0.8, 1.6))  # 2.4 s of stream
    wait_until(lambda: views_match(stack_env, topics, first + second), job)
    assert_no_change_twice(stack_env, topics)
    assert state.exists("checkpoints/views/state/0"), "the keyed views' state is in the bucket"
    assert not (tmp_path / "views-state").exists(), "nothing of the state on the local disk"
    assert job.stop() == 0


def test_two_processes_share_the_queries_out_and_the_views_stay_exact_after_a_kill_9(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path
) -> None:
    """VIEWS_JOB_QUERIES: customer_ratings in one process, the windowed query (which finds the
    dead letters) in another, each with a state folder of its own; together they write what one process
    writes, and a kill -9 of the first while records stream in loses and doubles nothing."""
    rng = random.Random(13)
    first, second = records(0, 600, rng), records(600, 600, rng)
    produce(stack_env, topics.enriched, [as_kafka(r) for r in first] + [(b"1", b"not json at all")])
    lateness = {"VIEWS_JOB_WINDOW_LATENESS_S": str(LATENESS_S)}
    (tmp_path / "keyed").mkdir()
    (tmp_path / "background").mkdir()
    keyed = ViewsJob(stack_env, topics, tmp_path / "keyed", VIEWS_JOB_QUERIES="views", **lateness)
    background = ViewsJob(
        stack_env,
        topics,
        tmp_path / "background",
        VIEWS_JOB_QUERIES="view-segment_hourly",
        **lateness,
    )
    keyed.start()
    background.start()
    wait_until(lambda: views_match(stack_env, topics, first), keyed)
    kill_mid_stream(stack_env, topics, keyed, second, rng.uniform(0.8, 1.6))  # 2.4 s of stream
    wait_until(lambda: views_match(stack_env, topics, first + second), keyed)
    assert_no_change_twice(stack_env, topics)
    late_ones = sum(late(r, LATENESS_S) for r in first + second)
    assert late_ones > 10
    assert len(read_topic(stack_env, topics.dlq, min_records=1 + late_ones)) == 1 + late_ones
    started = [line for line in keyed.log.read_text().splitlines() if "views queries running" in line]
    assert started and all(line.endswith(": views") for line in started), started
    assert background.stop() == 0
    assert keyed.stop() == 0


def _background_pid(job: ViewsJob, run: int, timeout_s: float = 60) -> int:
    """The pid of the second process of the `run`th start (1, 2, ...: the runs share a log)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.findall(r"background views process started \(pid (\d+)", job.log.read_text())
        if len(found) >= run:
            return int(found[run - 1])
        time.sleep(0.2)
    pytest.fail(f"no background process started:\n{job.tail()}")


def test_one_setting_runs_the_background_queries_in_a_second_process_that_lives_and_stops_with_the_first(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path
) -> None:
    """VIEWS_JOB_BACKGROUND_PROCESS: the same rows and dead letters as one process; a clean
    stop stops both; the second's end stops the first with exit 1; a kill -9 of the first ends
    the second (no views left half running)."""
    rng = random.Random(17)
    batch = records(0, 400, rng)
    produce(stack_env, topics.enriched, [as_kafka(r) for r in batch] + [(b"1", b"not json at all")])
    settings = {"VIEWS_JOB_WINDOW_LATENESS_S": str(LATENESS_S), "VIEWS_JOB_BACKGROUND_PROCESS": "true"}
    job = ViewsJob(stack_env, topics, tmp_path, **settings)
    job.start()
    child = _background_pid(job, 1)
    wait_until(lambda: views_match(stack_env, topics, batch), job)
    late_ones = sum(late(r, LATENESS_S) for r in batch)
    assert len(read_topic(stack_env, topics.dlq, min_records=1 + late_ones)) == 1 + late_ones
    running = [line for line in job.log.read_text().splitlines() if "views queries running" in line]
    assert len(running) == 2 and running[0].split(": ")[-1] != running[1].split(": ")[-1], running
    assert {line.split(": ")[-1] for line in running} == {"views", "view-segment_hourly"}
    background = tmp_path / "views-state" / "background" / "checkpoints" / "view-segment_hourly"
    assert background.is_dir()
    # state partitions: customer_ratings' in one task a batch, the windowed view's in two
    keyed = tmp_path / "views-state" / "checkpoints" / "views"
    assert sorted(p.name for p in (keyed / "state" / "0").iterdir() if p.name.isdigit()) == ["0"]
    assert sorted(p.name for p in (background / "state" / "0").iterdir() if p.name.isdigit()) == ["0", "1"]
    assert job.stop() == 0, job.tail()
    assert ends_within(child, 5), "the background process outlived a clean stop"

    job = ViewsJob(stack_env, topics, tmp_path, **settings)
    job.start()
    child = _background_pid(job, 2)
    os.killpg(child, signal.SIGKILL)  # the second process crashes: its Python and its JVM
    assert job.wait_exit(120) == 1, job.tail()
    assert f"the background views process ended (exit code -{signal.SIGKILL.value})" in job.tail(400)

    job = ViewsJob(stack_env, topics, tmp_path, **settings)
    job.start()
    child = _background_pid(job, 3)
    job.kill()  # kill -9 of the first process (its process group; the second has a session of its own)
    assert ends_within(child, 90), "the background process outlived a kill -9 of the first"
    assert_no_change_twice(stack_env, topics)
