"""The views behind the real pipeline: MariaDB through Debezium, the enrichment job, then the
views job, all on the local stack."""

import json
import re
import time
import uuid
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
from support.enrichment import (
    Job,
    Topics,
    create_topics,
    delete_topics,
    insert_customer,
    next_second,
    produce,
    rating,
    read_topic,
    values,
)
from support.views import (
    ViewsJob,
    ViewTopics,
    expected_customer_ratings,
    latest_rows,
    views_cli,
    wait_until,
    without,
)

StackEnv = dict[str, str]


@pytest.fixture(scope="module")
def jobs(
    stack_env: StackEnv, enrichment_topics: Topics, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Job, ViewsJob, ViewTopics]]:
    workdir = tmp_path_factory.mktemp("views-pipeline")
    view_topics = ViewTopics(uuid.uuid4().hex[:8], enriched=enrichment_topics.name("enriched"))
    view_topics.create(stack_env)
    job = Job(stack_env, enrichment_topics, workdir / "enrichment", grace_ms=1000).start()
    views = ViewsJob(stack_env, view_topics, Path(workdir)).start_for_module()
    yield job, views, view_topics
    views.stop()
    job.stop()
    view_topics.drop(stack_env)


def _row(stack_env: StackEnv, views: ViewsJob, topic: str, user: int, ratings: int) -> dict[str, Any]:
    """The customer's row once it counts `ratings` ratings."""
    key = f'{{"user_id":{user}}}'
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        row = latest_rows(stack_env, topic).get(key)
        if row is not None and row["ratings"] >= ratings:
            return row
        assert views.proc is not None and views.proc.poll() is None, views.tail()
        time.sleep(1)
    pytest.fail(f"no row of {ratings} ratings for customer {user}:\n{views.tail()}")


def test_an_upgrade_in_mariadb_shows_in_customer_ratings_from_the_next_rating_on(
    stack_env: StackEnv, enrichment_topics: Topics, jobs: tuple[Job, ViewsJob, ViewTopics], db: Any
) -> None:
    _, views, view_topics = jobs
    customer = insert_customer(db, "gold")
    first = time.time_ns() // 1000
    produce(stack_env, enrichment_topics.name("ratings"), [rating(first, customer, 4, next_second(db))])
    row = _row(stack_env, views, view_topics.customer_ratings, customer, 1)
    assert (row["club_status"], row["ratings"], row["unhappy_ratings"]) == ("gold", 1, 0)

    with db.cursor() as cur:
        cur.execute("UPDATE customers SET club_status = 'platinum' WHERE id = %s", (customer,))
    produce(stack_env, enrichment_topics.name("ratings"), [rating(first + 1, customer, 1, next_second(db))])
    row = _row(stack_env, views, view_topics.customer_ratings, customer, 2)
    assert row["club_status"] == "platinum"
    assert (row["ratings"], row["unhappy_ratings"], row["stars_sum"], row["last_stars"]) == (2, 1, 5, 1)
    assert row["last_rating_id"] == first + 1 and row["average_stars"] == 2.5


def test_counts_are_exact_after_a_burst_through_the_whole_pipeline(
    stack_env: StackEnv, enrichment_topics: Topics, jobs: tuple[Job, ViewsJob, ViewTopics], db: Any
) -> None:
    _, views, view_topics = jobs
    customers = [insert_customer(db, status) for status in ("bronze", "silver", "gold", "platinum") * 5]
    unknown = [2_000_000_000 + i for i in range(5)]  # no customer has these ids
    now, base = next_second(db), time.time_ns() // 1000
    burst = [
        rating(base + i, (customers + unknown)[i % 25], 1 + i % 5, now + i, message=f"burst {i}")
        for i in range(1_000)
    ]
    produce(stack_env, enrichment_topics.name("ratings"), burst)
    users = set(customers + unknown)
    ids = {base + i for i in range(1_000)}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        enriched = [v for v in values(read_topic(stack_env, view_topics.enriched)) if v["user_id"] in users]
        if {v["rating_id"] for v in enriched} >= ids:
            break
        time.sleep(2)
    expected = expected_customer_ratings(enriched)
    assert len(expected) == 25
    while time.monotonic() < deadline:
        rows = without(latest_rows(stack_env, view_topics.customer_ratings), "average_stars")
        if all(rows.get(k) == v for k, v in expected.items()):
            break
        assert views.proc is not None and views.proc.poll() is None, views.tail()
        time.sleep(2)
    assert {k: rows.get(k) for k in expected} == expected
    assert all(expected[f'{{"user_id":{u}}}']["club_status"] is None for u in unknown)


def test_the_views_can_run_inside_the_enrichment_jobs_application(
    stack_env: StackEnv, tmp_path: Path, db: Any
) -> None:
    topics = Topics()
    names = create_topics(stack_env, topics)
    view_topics = ViewTopics(uuid.uuid4().hex[:8], enriched=topics.name("enriched"))
    view_topics.create(stack_env)
    extra = {
        "ENRICH_VIEWS_IN_JOB": "true",
        **view_topics.env(),
        "VIEWS_JOB_BOOTSTRAP_SERVERS": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
        "VIEWS_JOB_STATE_DIR": str(tmp_path / "views"),
        "ENRICH_UI_ENABLED": "true",
    }
    job = Job(stack_env, topics, tmp_path / "enrichment", grace_ms=0, extra=extra).start()
    try:
        customer = insert_customer(db, "silver")
        base = time.time_ns() // 1000
        now = next_second(db)
        produce(
            stack_env, topics.name("ratings"), [rating(base + i, customer, 2 + i, now + i) for i in range(3)]
        )
        key = f'{{"user_id":{customer}}}'
        deadline = time.monotonic() + 120
        row = None
        while time.monotonic() < deadline and (row is None or row["ratings"] < 3):
            row = latest_rows(stack_env, view_topics.customer_ratings).get(key)
            time.sleep(1)
        assert row is not None, job.tail()
        assert (row["ratings"], row["stars_sum"], row["club_status"]) == (3, 9, "silver")
        # a view declared in SQL, created while the job runs, is kept in the same application
        (tmp_path / "by_status.sql").write_text(
            "SELECT club_status, count(*) AS ratings FROM enriched GROUP BY club_status\n"
        )
        created = views_cli(stack_env, view_topics, "create", str(tmp_path / "by_status.sql"))
        assert created.returncode == 0, created.stderr[-3000:]
        by_status = f"{view_topics.env()['VIEWS_JOB_TOPIC_PREFIX']}by_status"
        wait_until(
            lambda: (
                None
                if latest_rows(stack_env, by_status).get('{"club_status":"silver"}', {}).get("ratings") == 3
                else "no row of 3 silver ratings yet"
            ),
            job,
        )
        log = job.log.read_text()
        assert "query views started" in log
        # The views' stages ran in their scheduler pool, behind the enrichment's (Spark's REST API).
        ui = re.search(r"Spark UI at http://([^:\s]+):(\d+)", log)
        assert ui is not None, log
        apps = _get_json(ui.group(1), int(ui.group(2)), "/api/v1/applications")
        stages = _get_json(ui.group(1), int(ui.group(2)), f"/api/v1/applications/{apps[0]['id']}/stages")
        pools = {stage["schedulingPool"] for stage in stages}
        assert {"default", "views"} <= pools, pools
    finally:
        assert job.stop() == 0
        delete_topics(stack_env, names)
        view_topics.drop(stack_env)


def _get_json(host: str, port: int, path: str) -> Any:
    conn = HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        assert response.status == 200, (path, response.status)
        return json.loads(response.read())
    finally:
        conn.close()
