"""i. One job name, one writer. A second instance under the same ENRICH_JOB_NAME, on a state
folder of its own (another host, say), goes on from the first one's last commit and fences it:
the first stops with exit code 3 and is not to be restarted, and every rating is enriched once,
a kill -9 of the second one included.
j. A name already used for other input topics is refused at start, naming the setting.
k. So is a name that committed with the join in tasks, restarted with it on the driver.
l. A name that committed on the driver goes on in tasks, each rating once."""

import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from support.enrichment import (
    Job,
    StackEnv,
    Topics,
    create_topics,
    delete_topics,
    produce,
    rating,
    read_topic,
    values,
)

from enrichment_job.runtime.cli import FENCED_EXIT

GRACE_MS = 1000


def _customer(db: Any) -> int:
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO customers (first_name, last_name, email, club_status) "
            "VALUES ('Ida', 'Fence', %s, 'gold')",
            (f"{uuid.uuid4().hex[:8]}@example.com",),
        )
        db.commit()
        return int(cur.lastrowid)


def _ratings(stack_env: StackEnv, topic: str, user: int, ids: range) -> None:
    now = int(time.time() * 1000)
    produce(stack_env, topic, [rating(i, user, 4, now) for i in ids])


def test_i_a_second_instance_takes_over_from_the_last_commit_and_fences_the_first(
    stack_env: StackEnv, topics: Topics, db: Any, tmp_path: Path
) -> None:
    user = _customer(db)
    time.sleep(2)
    first = Job(stack_env, topics, tmp_path / "host-a", GRACE_MS).start()
    second = Job(stack_env, topics, tmp_path / "host-b", GRACE_MS)
    try:
        _ratings(stack_env, topics.name("ratings"), user, range(1, 101))
        read_topic(stack_env, topics.name("enriched"), min_records=100, timeout_s=120, idle_s=2)
        second.start()
        # A customer the second instance alone has seen, then a crash before its customer table
        # went to Delta (every 30 s): the restart must find that customer again.
        newcomer = _customer(db)
        time.sleep(2)
        _ratings(stack_env, topics.name("ratings"), newcomer, range(101, 151))
        read_topic(stack_env, topics.name("enriched"), min_records=150, timeout_s=120, idle_s=2)
        second.kill()
        second.start()
        _ratings(stack_env, topics.name("ratings"), newcomer, range(151, 201))
        enriched = values(
            read_topic(stack_env, topics.name("enriched"), min_records=200, timeout_s=180, idle_s=10)
        )
        assert first.proc is not None
        first_code = first.proc.wait(180)
    finally:
        first.stop()
        second_code = second.stop()
    counts = Counter(v["rating_id"] for v in enriched)
    assert set(counts) == set(range(1, 201))
    assert [rid for rid, n in counts.items() if n > 1] == []
    assert all(v["customer_matched"] for v in enriched)
    assert first_code == FENCED_EXIT, first.tail()
    assert "took over its transactional id" in first.tail(80)
    assert "goes on from its last commit" in second.log.read_text()
    assert second_code == 0, second.tail()


def test_j_a_job_name_used_for_other_topics_is_refused(
    stack_env: StackEnv, topics: Topics, tmp_path: Path
) -> None:
    other = Topics()  # its own ratings topic, under the name the module's jobs committed with
    job = Job(stack_env, other, tmp_path / "other", GRACE_MS)
    job.env["ENRICH_JOB_NAME"] = topics.env()["ENRICH_JOB_NAME"]
    done = _refused(job.env)
    assert "setting ENRICH_JOB_NAME" in done.stderr
    assert topics.name("ratings") in done.stderr


def test_k_a_job_name_that_committed_with_the_join_in_tasks_cannot_go_back_to_the_driver(
    stack_env: StackEnv, topics: Topics, db: Any, tmp_path: Path
) -> None:
    """Its ratings' offsets live in the tasks' own markers, which the join on the driver does
    not read: it would start the ratings again from the last driver commit (or the start)."""
    own = Topics()  # a job name of its own: the module's other jobs run on the driver
    names = create_topics(stack_env, own)
    try:
        _commit_in_tasks_then_start_on_the_driver(stack_env, own, db, tmp_path)
    finally:
        delete_topics(stack_env, names)


def _commit_in_tasks_then_start_on_the_driver(
    stack_env: StackEnv, own: Topics, db: Any, tmp_path: Path
) -> None:
    user = _customer(db)
    time.sleep(2)
    in_tasks = Job(stack_env, own, tmp_path / "tasks", GRACE_MS)
    in_tasks.env["ENRICH_JOIN_IN"] = "tasks"
    in_tasks.start()
    try:
        _ratings(stack_env, own.name("ratings"), user, range(1, 21))
        read_topic(stack_env, own.name("enriched"), min_records=20, timeout_s=180, idle_s=2)
    finally:
        assert in_tasks.stop() == 0, in_tasks.tail()
    on_driver = Job(stack_env, own, tmp_path / "driver", GRACE_MS)
    done = _refused({**on_driver.env, "ENRICH_JOIN_IN": "driver"})
    assert "setting ENRICH_JOIN_IN" in done.stderr
    assert "cannot go back to the driver" in done.stderr


def _refused(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The job started with `env`, which it must refuse at start: exit code 2 (a setting)."""
    job = [sys.executable, "-m", "enrichment_job"]
    done = subprocess.run(job, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    return done


def test_l_a_job_name_that_committed_on_the_driver_goes_on_in_tasks_with_each_rating_once(
    stack_env: StackEnv, db: Any, tmp_path: Path
) -> None:
    """The cut-over a cluster's `auto` makes for a job name that ran the driver's join before:
    each partition's first task starts where the driver's last commit left it."""
    own = Topics()
    names = create_topics(stack_env, own)
    try:
        user = _customer(db)
        time.sleep(2)
        on_driver = Job(stack_env, own, tmp_path / "driver", GRACE_MS, {"ENRICH_JOIN_IN": "driver"}).start()
        try:
            _ratings(stack_env, own.name("ratings"), user, range(1, 21))
            read_topic(stack_env, own.name("enriched"), min_records=20, timeout_s=180, idle_s=2)
        finally:
            assert on_driver.stop() == 0, on_driver.tail()
        _ratings(stack_env, own.name("ratings"), user, range(21, 41))  # while no job runs
        in_tasks = Job(stack_env, own, tmp_path / "tasks", GRACE_MS, {"ENRICH_JOIN_IN": "tasks"}).start()
        try:
            _ratings(stack_env, own.name("ratings"), user, range(41, 61))
            enriched = values(read_topic(stack_env, own.name("enriched"), min_records=60, timeout_s=180))
        finally:
            assert in_tasks.stop() == 0, in_tasks.tail()
    finally:
        delete_topics(stack_env, names)
    ids = [v["rating_id"] for v in enriched]
    assert sorted(ids) == list(range(1, 61)), Counter(ids)
    assert ids == sorted(ids), "one customer's ratings, in the order they went in"
