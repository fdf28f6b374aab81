"""Views declared in SQL against the real Kafka: created with the CLI while the views job runs
(a backfill, then live), served by the query service over HTTP and psql, and dropped (query,
checkpoint, topic and rows gone), without the built-in views being counted again; a view the
checks refuse leaves nothing behind."""

import json
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from confluent_kafka.admin import AdminClient
from support.kafka import produce, read_topic
from support.services import as_kafka, enriched_record
from support.views import (
    ViewsJob,
    ViewTopics,
    changes_per_key,
    expected_customer_ratings,
    latest_rows,
    rows_equal,
    views_cli,
    wait_until,
)
from support.views_api import Events, Service

StackEnv = dict[str, str]
ROOT = Path(__file__).resolve().parents[4]
BY_CHANNEL = """-- Ratings per channel, with their stars and the newest rating time (epoch ms and timestamp).
-- trigger: 1 second
SELECT coalesce(channel, 'none') AS channel, count(*) AS ratings, sum(stars) AS stars,
       max(rating_time) AS last_rating_time, timestamp_millis(max(rating_time)) AS last_rating_at
FROM enriched
GROUP BY coalesce(channel, 'none')
"""
ORDERED = "SELECT user_id, count(*) AS ratings FROM enriched GROUP BY user_id ORDER BY ratings DESC\n"


def ratings(first: int, count: int) -> list[dict[str, Any]]:
    channels = ["web", "iOS", "android", None]
    return [
        enriched_record(
            i, user_id=1 + i % 40, stars=1 + i % 5, rating_time=1_795_000_000_000 + i, channel=channels[i % 4]
        )
        for i in range(first, first + count)
    ]


def by_channel(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: {"ratings": 0, "stars": 0, "last_rating_time": 0})
    for r in records:
        channel = r["channel"] or "none"
        row = rows[json.dumps({"channel": channel}, separators=(",", ":"))]
        row.update(
            channel=channel,
            ratings=row["ratings"] + 1,
            stars=row["stars"] + r["stars"],
            last_rating_time=max(row["last_rating_time"], r["rating_time"]),
        )
        row["last_rating_at"] = _spark_json_time(row["last_rating_time"])
    return dict(rows)


def _spark_json_time(ms: int) -> str:
    """A timestamp as the views job's JSON writes it: ISO 8601, milliseconds, UTC."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def _pg_time(ms: int) -> str:
    """The same instant as PostgreSQL shows a timestamptz in UTC: fractions without trailing zeros."""
    fraction = f".{ms % 1000:03d}".rstrip("0").rstrip(".")
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms // 1000)) + fraction + "+00"


def topic_exists(stack_env: StackEnv, topic: str) -> bool:
    admin = AdminClient({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
    return topic in admin.list_topics(timeout=10).topics


def serving(stack_env: StackEnv, topics: ViewTopics, tmp_path: Path, path: str) -> Service:
    """The query service over the job's topics, started, once `path` answers 200 (a row of a
    view declared in SQL: the service reads it from its first marker on)."""
    names = SimpleNamespace(
        customers=topics.customer_ratings, segments=topics.segment_hourly, commits=topics.commits
    )
    (tmp_path / "api").mkdir()
    service = Service(
        stack_env, names, tmp_path / "api", VIEWS_TOPIC_PREFIX=topics.env()["VIEWS_JOB_TOPIC_PREFIX"]
    )  # type: ignore[arg-type]
    service.start()
    service.wait_healthy()
    deadline = time.monotonic() + 60
    while service.get(path)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.5)
    return service


def served(stack_env: StackEnv, topics: ViewTopics, tmp_path: Path, web: dict[str, Any]) -> Service:
    """The query service over the job's topics serves the view like the built-in ones."""
    service = serving(stack_env, topics, tmp_path, "/views/by_channel/web")
    assert service.get("/views/by_channel/web") == (200, web)
    answer = service.psql("SELECT channel, ratings, stars FROM by_channel WHERE channel = 'web'")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() == f"web|{web['ratings']}|{web['stars']}"
    at = web["last_rating_time"]  # the timestamp: timestamptz over psql, compared by instant
    since = time.strftime("%Y-%m-%d %H:%M", time.gmtime(at // 1000 - 60))
    timed = service.psql(
        f"SELECT last_rating_at FROM by_channel WHERE last_rating_at > '{since}' AND channel = 'web'"  # noqa: S608
    )
    assert timed.stdout.strip() == _pg_time(at), timed.stderr
    assert "last_rating_at|timestamp with time zone" in service.psql(r"\d by_channel").stdout
    listed = {v["name"]: v for v in service.get("/views")[1]["views"]}
    assert listed["by_channel"]["key"] == ["channel"] and listed["by_channel"]["rows"] == 4

    return service


def dropped_cleanly(
    stack_env: StackEnv, topics: ViewTopics, job: ViewsJob, service: Service, tmp_path: Path
) -> None:
    """Dropped: its query, checkpoint, topic and rows go; the job goes on."""
    view_topic = f"{topics.env()['VIEWS_JOB_TOPIC_PREFIX']}by_channel"
    dropped = views_cli(stack_env, topics, "drop", "by_channel")
    assert dropped.returncode == 0, dropped.stderr[-2000:]
    checkpoints = tmp_path / "views-state" / "checkpoints"
    wait_until(
        lambda: None if not topic_exists(stack_env, view_topic) else f"{view_topic} still exists", job, 60
    )
    wait_until(
        lambda: None if not list(checkpoints.glob("sql-by_channel-*")) else "checkpoint still there", job, 60
    )
    deadline = time.monotonic() + 60
    while service.get("/views/by_channel/web")[0] == 200 and time.monotonic() < deadline:
        time.sleep(0.5)
    status, body = service.get("/views/by_channel/web")
    assert status == 404 and "does not exist" in body["error"]
    assert "by_channel" not in service.psql(r"\d").stdout
    assert views_cli(stack_env, topics, "drop", "by_channel").returncode == 1


def test_a_view_created_in_sql_while_the_job_runs_backfills_goes_live_is_served_and_is_dropped_cleanly(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path
) -> None:
    first = ratings(0, 400)
    produce(stack_env, topics.enriched, [as_kafka(r) for r in first])
    job = ViewsJob(stack_env, topics, tmp_path).start()
    wait_until(
        rows_equal(stack_env, topics.customer_ratings, expected_customer_ratings(first), "average_stars"), job
    )
    built_in_records = len(read_topic(stack_env, topics.customer_ratings, idle_s=1))
    view_topic = f"{topics.env()['VIEWS_JOB_TOPIC_PREFIX']}by_channel"

    # refused by the checks: nothing is created
    (tmp_path / "top_customers.sql").write_text(ORDERED)
    refused = views_cli(stack_env, topics, "create", str(tmp_path / "top_customers.sql"))
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert "refused: top_customers: ORDER BY" in refused.stderr
    assert views_cli(stack_env, topics, "list").stdout == ""
    assert not topic_exists(stack_env, f"{topics.env()['VIEWS_JOB_TOPIC_PREFIX']}top_customers")

    # created: a backfill of what the enriched topic holds, then live
    (tmp_path / "by_channel.sql").write_text(BY_CHANNEL)
    created = views_cli(stack_env, topics, "create", str(tmp_path / "by_channel.sql"))
    assert created.returncode == 0, created.stderr[-3000:]
    assert "created by_channel: key (channel)" in created.stdout
    listed = views_cli(stack_env, topics, "list").stdout
    assert listed.startswith("by_channel\t") and "\tcreated " in listed, listed
    wait_until(rows_equal(stack_env, view_topic, by_channel(first)), job)
    second = ratings(400, 300)
    produce(stack_env, topics.enriched, [as_kafka(r) for r in second])
    wait_until(rows_equal(stack_env, view_topic, by_channel(first + second)), job)
    wait_until(
        rows_equal(
            stack_env, topics.customer_ratings, expected_customer_ratings(first + second), "average_stars"
        ),
        job,
    )
    markers = [json.loads(m.value()) for m in read_topic(stack_env, topics.commits, idle_s=1)]
    own = [m for m in markers if m.get("view") == "by_channel"]
    assert own and own[-1]["state"] == "live" and own[-1]["key"] == ["channel"]
    assert {"name": "ratings", "type": "long"} in own[-1]["columns"]
    # the built-in views were not counted again: the create added nothing to their changelog
    # until the second ratings came
    customers_changed = {str(r["user_id"]) for r in second}
    assert len(read_topic(stack_env, topics.customer_ratings, idle_s=1)) <= built_in_records + len(
        customers_changed
    )

    service = served(stack_env, topics, tmp_path, by_channel(first + second)['{"channel":"web"}'])
    dropped_cleanly(stack_env, topics, job, service, tmp_path)
    third = ratings(700, 100)
    produce(stack_env, topics.enriched, [as_kafka(r) for r in third])
    wait_until(
        rows_equal(
            stack_env,
            topics.customer_ratings,
            expected_customer_ratings(first + second + third),
            "average_stars",
        ),
        job,
    )
    service.stop()
    assert job.stop() == 0, job.tail()


def by_channel_over_history(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path, count: int, batch: int
) -> tuple[list[dict[str, Any]], ViewsJob, str]:
    """`count` enriched ratings, a views job that reads `batch` records a batch, and by_channel
    created over them: the ratings, the job and the view's topic."""
    history = ratings(0, count)
    produce(stack_env, topics.enriched, [as_kafka(r) for r in history])
    job = ViewsJob(stack_env, topics, tmp_path, VIEWS_JOB_MAX_OFFSETS_PER_TRIGGER=str(batch)).start()
    (tmp_path / "by_channel.sql").write_text(BY_CHANNEL)
    assert views_cli(stack_env, topics, "create", str(tmp_path / "by_channel.sql")).returncode == 0
    return history, job, f"{topics.env()['VIEWS_JOB_TOPIC_PREFIX']}by_channel"


def test_a_view_whose_job_is_killed_during_its_backfill_is_exact_after_the_restart(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path
) -> None:
    # small batches: the backfill takes several, and the kill falls between two of them
    history, job, view_topic = by_channel_over_history(stack_env, topics, tmp_path, 6_000, 400)

    def backfilling() -> str | None:
        markers = [json.loads(m.value()) for m in read_topic(stack_env, topics.commits, idle_s=0.5)]
        own = [m for m in markers if m.get("view") == "by_channel"]
        return None if own else "no batch of the view yet"

    wait_until(backfilling, job)
    job.kill()
    rows = latest_rows(stack_env, view_topic)
    assert rows != by_channel(history), "the kill came after the backfill; it should fall inside it"
    job.start()
    wait_until(rows_equal(stack_env, view_topic, by_channel(history)), job)
    for key, values in changes_per_key(stack_env, view_topic).items():
        counts = [v["ratings"] for v in values]
        assert counts == sorted(counts) and len(set(counts)) == len(counts), f"{key}: a batch written twice"
    assert job.stop() == 0, job.tail()


BY_CHANNEL_V2 = BY_CHANNEL.replace(
    "max(rating_time) AS last_rating_time",
    "max(rating_time) AS last_rating_time,\n       min(stars) AS lowest_stars",
)


def pulls_until_replaced(service: Service, v1: dict[str, Any]) -> tuple[list[tuple[int, bool]], bool]:
    """Pulls of web's row until the new version answers: (status, from the new version) each, and
    whether GET /views showed the new version backfilling meanwhile. The old version answers
    until then."""
    seen_replacing, answers = False, []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        status, row = service.get("/views/by_channel/web")
        answers.append((status, "lowest_stars" in row))
        listed = {v["name"]: v for v in service.get("/views")[1]["views"]}["by_channel"]
        seen_replacing |= (listed.get("replacing") or {}).get("state") == "backfilling"
        if "lowest_stars" in row:
            break
        assert row == v1
        time.sleep(0.3)
    return answers, seen_replacing


def a_refused_replacement_leaves_v1_serving(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path, service: Service, v1: dict[str, Any]
) -> None:
    """A replacement the views job refuses: the CLI says why, the catalog names the serving
    version again, which goes on, and the query service shows the refusal beside it."""
    checkpoints = tmp_path / "views-state" / "checkpoints"
    before = sorted(p.name for p in checkpoints.glob("sql-by_channel-*"))
    (tmp_path / "by_channel.sql").write_text(
        "SELECT channel, count(*) AS ratings FROM enriched GROUP BY channel ORDER BY ratings\n"
    )
    refused = views_cli(stack_env, topics, "replace", str(tmp_path / "by_channel.sql"))
    assert refused.returncode == 1 and "refused: by_channel: ORDER BY" in refused.stderr, refused.stderr[
        -3000:
    ]
    assert "no views job answered" not in refused.stdout + refused.stderr  # the job's own verdict
    assert service.get("/views/by_channel/web") == (200, v1)
    shown = views_cli(stack_env, topics, "show", "by_channel")
    assert "state: live" in shown.stdout and "ORDER BY" not in shown.stdout  # the catalog names v1 again
    deadline = time.monotonic() + 30  # the service reads the job's word on the commits topic
    while True:
        listed = {v["name"]: v for v in service.get("/views")[1]["views"]}["by_channel"]
        if "replacing" in listed or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert listed["state"] == "live" and listed["replacing"]["state"] == "refused", listed
    assert "ORDER BY" in listed["replacing"]["error"]
    assert sorted(p.name for p in checkpoints.glob("sql-by_channel-*")) == before


def test_a_replaced_view_serves_its_old_version_while_the_new_backfills_then_the_new_one(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path
) -> None:
    # small batches: the new version's backfill takes several, and pulls are made during it
    history, job, old_topic = by_channel_over_history(stack_env, topics, tmp_path, 4_000, 300)
    wait_until(rows_equal(stack_env, old_topic, by_channel(history)), job, 240)
    v1 = by_channel(history)['{"channel":"web"}']
    service = served(stack_env, topics, tmp_path, v1)
    events = Events(service.port, "/views/by_channel/changes")
    events.start()
    try:
        checkpoints = tmp_path / "views-state" / "checkpoints"
        (old_folder,) = checkpoints.glob("sql-by_channel-*")

        a_refused_replacement_leaves_v1_serving(stack_env, topics, tmp_path, service, v1)

        (tmp_path / "by_channel.sql").write_text(BY_CHANNEL_V2)
        replaced = views_cli(stack_env, topics, "replace", str(tmp_path / "by_channel.sql"))
        assert replaced.returncode == 0, replaced.stderr[-3000:]
        assert "replacing by_channel" in replaced.stdout
        again = views_cli(stack_env, topics, "replace", str(tmp_path / "by_channel.sql"))
        assert again.returncode == 1 and "still backfilling" in again.stderr  # one replacement at a time
        answers, seen_replacing = pulls_until_replaced(service, v1)
        web = [r for r in history if r["channel"] == "web"]
        assert service.get("/views/by_channel/web") == (
            200,
            {**v1, "lowest_stars": min(r["stars"] for r in web)},
        )
        assert seen_replacing and answers[0] == (200, False), answers[:5]
        assert all(status == 200 for status, _ in answers)  # never a gap between the versions
        listed = {v["name"]: v for v in service.get("/views")[1]["views"]}["by_channel"]
        assert listed["state"] == "live" and "lowest_stars" in listed["sql"] and "replacing" not in listed
        assert listed["topic"] != old_topic and topic_exists(stack_env, listed["topic"])
        wait_until(
            lambda: None if not topic_exists(stack_env, old_topic) else f"{old_topic} still exists", job, 60
        )
        wait_until(lambda: None if not old_folder.exists() else "the old checkpoint is still there", job, 60)
        assert len(list(checkpoints.glob("sql-by_channel-*"))) == 1
        # the subscriber got the new version's snapshot on its stream, then goes on with its changes
        after = events.wait(10_000, 5)
        names = [name for name, _ in after]
        assert "replaced" in names, names
        renewed = after[names.index("replaced") + 1 :]
        assert [n for n, _ in renewed][:5] == ["snapshot"] * 4 + ["live"]
        assert all("lowest_stars" in data["row"] for name, data in renewed if name == "snapshot")
        assert "lowest_stars" in service.psql(r"\d by_channel").stdout
        shown = views_cli(stack_env, topics, "show", "by_channel")
        assert shown.returncode == 0 and "state: live" in shown.stdout and "lowest_stars" in shown.stdout
    finally:
        events.close()  # also when an assertion failed: its socket is not left to a later test
    service.stop()
    assert job.stop() == 0, job.tail()


HOURLY = """-- Ratings per channel and hour; an hour leaves the view an hour after a newer one came.
-- watermark: rating_ts 1 hour
-- retention: 1 hour
-- trigger: 1 second
SELECT channel, window.start AS hour, count(*) AS ratings
FROM enriched
GROUP BY channel, window(rating_ts, '1 hour')
"""
# A sliding window: each rating counts in the two 2-hour windows that hold it, an hour apart;
# Spark updates a window until an hour after the next one started, so the retention is 2 hours.
SLIDING = """-- watermark: rating_ts 1 hour
-- retention: 2 hours
-- trigger: 1 second
SELECT channel, window.start AS hour, count(*) AS ratings
FROM enriched
GROUP BY channel, window(rating_ts, '2 hours', '1 hour')
"""
HOUR_MS = 3_600_000


def current_rows(stack_env: StackEnv, topic: str) -> dict[str, int]:
    """Key -> ratings, as a compacted read of the topic leaves them (a tombstone removes its key)."""
    rows: dict[str, int] = {}
    for record in read_topic(stack_env, topic, idle_s=1):
        key = json.loads(record.key())["hour"][:13]
        if record.value() is None:
            rows.pop(key, None)
        else:
            rows[key] = json.loads(record.value())["ratings"]
    return rows


def test_a_retention_removes_the_rows_of_old_windows_tumbling_or_sliding_as_newer_ones_come(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path
) -> None:
    start = 1_795_000_000_000 // HOUR_MS * HOUR_MS

    def hour(h: int, first: int) -> list[dict[str, Any]]:
        at = start + h * HOUR_MS
        return [
            enriched_record(first + i, rating_time=at + i, cdc_watermark_ms=at + i + 500, channel="web")
            for i in range(10)
        ]

    produce(stack_env, topics.enriched, [as_kafka(r) for r in hour(0, 0) + hour(1, 100)])
    job = ViewsJob(stack_env, topics, tmp_path).start()
    for name, sql in (("hourly", HOURLY), ("sliding", SLIDING)):
        (tmp_path / f"{name}.sql").write_text(sql)
        created = views_cli(stack_env, topics, "create", str(tmp_path / f"{name}.sql"))
        assert created.returncode == 0, created.stderr[-2000:]
    prefix = topics.env()["VIEWS_JOB_TOPIC_PREFIX"]
    at = {h: time.strftime("%Y-%m-%dT%H", time.gmtime((start + h * HOUR_MS) / 1000)) for h in range(-1, 4)}

    def rows_are(view: str, expected: dict[str, int]) -> Callable[[], str | None]:
        def check() -> str | None:
            seen = current_rows(stack_env, prefix + view)
            return None if seen == expected else f"{view}'s rows {seen}"

        return check

    wait_until(rows_are("hourly", {at[0]: 10, at[1]: 10}), job)
    wait_until(rows_are("sliding", {at[-1]: 10, at[0]: 20, at[1]: 10}), job)
    produce(stack_env, topics.enriched, [as_kafka(r) for r in hour(3, 300)])
    wait_until(rows_are("hourly", {at[3]: 10}), job)  # the first two hours are past the retention
    # the windows from hour 1 on are kept: those that started more than 2 hours before hour 3 left
    wait_until(rows_are("sliding", {at[1]: 10, at[2]: 10, at[3]: 10}), job)
    assert job.stop() == 0, job.tail()


UNHAPPY = """-- Customers whose ratings average under 3 stars, from their second rating on.
-- trigger: 1 second
SELECT user_id, count(*) AS ratings, sum(stars) AS stars
FROM enriched
GROUP BY user_id
HAVING avg(stars) < 3 AND count(*) >= 2
"""


def unhappy(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """UNHAPPY recomputed: each customer's row while it matches the HAVING."""
    stars: dict[int, list[int]] = defaultdict(list)
    for r in records:
        stars[r["user_id"]].append(r["stars"])
    return {
        json.dumps({"user_id": u}, separators=(",", ":")): {"user_id": u, "ratings": len(s), "stars": sum(s)}
        for u, s in stars.items()
        if sum(s) / len(s) < 3 and len(s) >= 2
    }


def test_a_view_with_having_holds_the_rows_that_match_it_and_a_row_that_stops_matching_leaves(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path
) -> None:
    def rated(first: int, stars: dict[int, list[int]]) -> list[dict[str, Any]]:
        given = [(u, s) for u, each in stars.items() for s in each]
        return [
            enriched_record(first + i, user_id=u, stars=s, rating_time=1_795_000_000_000 + first + i)
            for i, (u, s) in enumerate(given)
        ]

    # 1 matches (1.5 stars, two ratings), 2 does not (5.0), 3 not yet (one rating)
    first = rated(0, {1: [1, 2], 2: [5, 5], 3: [1]})
    produce(stack_env, topics.enriched, [as_kafka(r) for r in first])
    job = ViewsJob(stack_env, topics, tmp_path).start()
    (tmp_path / "unhappy.sql").write_text(UNHAPPY)
    validated = views_cli(stack_env, topics, "validate", str(tmp_path / "unhappy.sql"))
    assert "a row leaves the view while it does not match HAVING" in validated.stdout, validated.stderr[
        -2000:
    ]
    created = views_cli(stack_env, topics, "create", str(tmp_path / "unhappy.sql"))
    assert created.returncode == 0, created.stderr[-3000:]
    view_topic = f"{topics.env()['VIEWS_JOB_TOPIC_PREFIX']}unhappy"
    wait_until(rows_equal(stack_env, view_topic, unhappy(first)), job)
    assert list(unhappy(first)) == ['{"user_id":1}']

    service = serving(stack_env, topics, tmp_path, "/views/unhappy/1")
    assert service.get("/views/unhappy/1") == (200, {"user_id": 1, "ratings": 2, "stars": 3})
    assert service.get("/views/unhappy/2")[0] == 404
    events = Events(service.port, "/views/unhappy/changes")
    events.start()
    try:
        assert events.wait(2)[:2] == [
            ("snapshot", {"key": {"user_id": 1}, "row": unhappy(first)['{"user_id":1}']}),
            ("live", {}),
        ]
        # 1 stops matching (3.25 stars), 2 starts (2.6), 3 starts (1.5, its second rating)
        second = rated(100, {1: [5, 5], 2: [1, 1, 1], 3: [2]})
        produce(stack_env, topics.enriched, [as_kafka(r) for r in second])
        wait_until(rows_equal(stack_env, view_topic, unhappy(first + second)), job)
        assert sorted(unhappy(first + second)) == ['{"user_id":2}', '{"user_id":3}']
        deadline = time.monotonic() + 30
        while service.get("/views/unhappy/1")[0] != 404 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert service.get("/views/unhappy/1")[0] == 404
        assert service.get("/views/unhappy/2") == (200, {"user_id": 2, "ratings": 5, "stars": 13})
        answer = service.psql("SELECT user_id, ratings FROM unhappy ORDER BY user_id")
        assert answer.stdout.split() == ["2|5", "3|2"], answer.stderr
        changes = {json.dumps(d["key"]): d["row"] for name, d in events.wait(5) if name == "change"}
        assert changes == {
            '{"user_id": 1}': None,  # a delete: the row left the view
            '{"user_id": 2}': {"user_id": 2, "ratings": 5, "stars": 13},
            '{"user_id": 3}': {"user_id": 3, "ratings": 2, "stars": 3},
        }, events.events
    finally:
        events.close()
    # in the changelog, a tombstone for each row that does not match (2's first rows too)
    tombstoned = {k for k, rows in changes_per_key(stack_env, view_topic).items() if None in rows}
    assert tombstoned >= {'{"user_id":1}', '{"user_id":2}'}
    service.stop()
    assert job.stop() == 0, job.tail()
