"""The rows of the fault matrix: what each injects, while the load generator runs, and what is
expected of it. Each `inject` gets a `Faults` handle (see run.py) and returns when its fault is
over; the run then measures the time to recover and reconciles every stage."""

import base64
import contextlib
import json
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infra.faults import cluster
from infra.slack.fake import CHANNEL

if TYPE_CHECKING:
    from infra.faults.run import Faults

ONCE = "each rating enriched, indexed and in the lake once; each alert raised and posted once"
MS_PER_YEAR = 365 * 86_400_000


class NotInjected(Exception):
    """The row's fault could not be brought about: the row tested nothing and is not met."""


@dataclass(frozen=True)
class Scenario:
    name: str
    injected: str
    inject: "Callable[[Faults], None]"
    load_s: float  # seconds of load; the fault happens inside them
    quick: bool = False  # also in the quick matrix that CI runs
    expected: str = ONCE
    rate: float | None = None  # ratings/s; None: the run's --rate
    # Webhook mode: the message Slack stored while the notifier was killed is posted again (its
    # alerts twice, no other alert).
    slack_reposts_held: bool = False
    # The customer databases the row applies to (the stack's STACK_SOURCE).
    databases: tuple[str, ...] = ("mariadb", "postgres")
    # Where the job's join runs in the matrixes the row is part of (--join-in): the rows of a
    # cluster's own faults only run with the join in tasks on the stack's cluster.
    join_in: tuple[str, ...] = ("driver", "tasks")
    # The pipeline's processes the fault kills or stops: an exit of any other, or one beyond
    # what the fault injected, fails the row.
    touches: tuple[str, ...] = ()
    # A self-test of the judge: the row is built to fail, for this reason.
    built_to_fail: str = ""
    # Done once the views have caught up, before they are checked.
    before_check: "Callable[[Faults], None] | None" = None


def _kill_job(kills: int, gap_s: tuple[float, float]) -> "Callable[[Faults], None]":
    def inject(f: "Faults") -> None:
        for i in range(kills):
            f.sleep(f.rng.uniform(*gap_s))
            if i % 2:  # right after a customer change, before the job can have committed it
                f.change_customer()
                time.sleep(f.rng.uniform(0, 0.3))
            f.kill("enrichment")
            f.wait_alive("enrichment")

    return inject


def _down(component: str, seconds: float) -> "Callable[[Faults], None]":
    def inject(f: "Faults") -> None:
        f.sleep(10)
        f.stop_component(component)
        f.sleep(seconds)
        f.start_component(component)

    return inject


def _kill_sinks(f: "Faults") -> None:
    for name in ("es_sink", "s3_sink", "slack_notifier"):
        f.sleep(8)
        f.kill(name)


def _two_sinks(f: "Faults") -> None:
    """A second ES sink and S3 sink join their groups (a rebalance), then the first ones are
    killed (another), then the second ones stop (a third)."""
    f.sleep(8)
    for name in ("es_sink", "s3_sink"):
        f.start_extra(name)
    f.sleep(20)
    for name in ("es_sink", "s3_sink"):
        f.kill(name)
    f.sleep(20)
    for name in ("es_sink", "s3_sink"):
        f.stop_extra(name)


def _rewind_sinks(f: "Faults") -> None:
    """The ES and S3 sinks stopped, their groups moved back to the row's first records, started:
    every record of the row so far is read and written again."""
    f.sleep(25)
    for name, group in (("es_sink", "es-sink"), ("s3_sink", "s3-sink")):
        f.pause(name)
        f.rewind_group(name, group, "enriched")
        f.resume(name)


def _second_job(same_state: bool) -> "Callable[[Faults], None]":
    def inject(f: "Faults") -> None:
        f.sleep(10)
        f.take_over_job(same_state)

    return inject


def _slack_rate_limited(retry_after_s: int) -> "Callable[[Faults], None]":
    def inject(f: "Faults") -> None:
        f.sleep(10)
        f.slack.rate_limit(3, retry_after_s)
        f.sleep(retry_after_s + 10)

    return inject


def _slack_kill_after_post(f: "Faults") -> None:
    """Slack stores a post but its answer is held: the notifier is killed before it hears."""
    f.sleep(5)
    f.slack.hold(1)
    if not f.slack.held.wait(60):
        f.note("no alert came to hold within 60 s")
        f.slack.release()
        return
    f.kill("slack_notifier")
    f.slack.release()


def _slack_timeouts(f: "Faults") -> None:
    """Slack stores three posts but answers none of them before the notifier's timeout (5 s)."""
    f.sleep(5)
    f.slack.hold(3)
    f.sleep(30)
    f.slack.release()


def _slack_webhook_kill_after_post(f: "Faults") -> None:
    """The notifier switched to an incoming webhook, then killed after Slack stored a post and
    before it heard back; bot mode again at the end. A webhook cannot look in the channel, so
    the restarted notifier posts that alert again: one duplicate for the crash."""
    f.reconfigure(
        "slack_notifier",
        {"SLACK_WEBHOOK_URL": f.slack.webhook_url},
        unset=("SLACK_BOT_TOKEN", "SLACK_CHANNEL"),
    )
    try:
        _slack_kill_after_post(f)
        f.wait_alive("slack_notifier")
        # The restarted notifier gets its partition once the killed one's session expires, and
        # posts again what it could not know about: wait for its first post.
        if not f.slack_posts_after(len(f.slack.posts()), 120):
            f.note("the restarted notifier posted nothing within 120 s")
    finally:
        f.reconfigure(
            "slack_notifier",
            {"SLACK_BOT_TOKEN": f.slack.token, "SLACK_CHANNEL": CHANNEL},
            unset=("SLACK_WEBHOOK_URL",),
        )


def _schema_change(f: "Faults") -> None:
    f.sleep(10)
    f.admin_sql("ALTER TABLE demo.customers ADD COLUMN loyalty_points INT NULL")
    f.sleep(10)
    f.change_customer()
    f.admin_sql("ALTER TABLE demo.customers MODIFY comments VARCHAR(2000)")
    f.sleep(10)
    f.change_customer()
    f.admin_sql("ALTER TABLE demo.customers RENAME COLUMN loyalty_points TO points")
    f.sleep(10)
    f.change_customer()
    f.admin_sql("ALTER TABLE demo.customers DROP COLUMN points, MODIFY comments VARCHAR(1000)")


def _binlog_reset(f: "Faults") -> None:
    f.sleep(10)
    f.start_binlog_over()
    for _ in range(5):  # changes in the new history
        f.sleep(3)
        f.change_customer()


def poison_records(now_ms: int, first_id: int) -> list[tuple[str, bytes | None, bytes]]:
    """(what, key, value) of every kind of hostile rating: each must end in the job's DLQ with
    its bytes (in its value, or in the claim-check store when its dead letter could not carry
    them), none may stop a stage."""

    def rating(rid: int, **fields: object) -> bytes:
        body = {
            "rating_id": rid,
            "user_id": 1,
            "stars": 2,
            "route_id": 1,
            "rating_time": now_ms,
            "channel": "web",
            "message": "poison",
        }
        return json.dumps({**body, **fields}).encode()

    # Near the broker's 1 MiB record limit, and incompressible: its enriched copy and its dead
    # letter with headers are over it.
    big = base64.b64encode(random.Random(1).randbytes(780_000)).decode()
    kinds: list[tuple[str, bytes | None, bytes]] = [
        ("rating_time at the top of the long range", b"1", rating(first_id, rating_time=2**63 - 1)),
        ("rating_time where + grace overflows", b"1", rating(first_id + 1, rating_time=2**63 - 2_000)),
        ("rating_time before year 1", b"1", rating(first_id + 2, rating_time=-62_200_000_000_000)),
        ("rating_time at the bottom of the long range", b"1", rating(first_id + 3, rating_time=-(2**63))),
        ("rating_time a year ahead", b"1", rating(first_id + 4, rating_time=now_ms + MS_PER_YEAR)),
        ("stars out of range", b"1", rating(first_id + 5, stars=99)),
        ("user_id not a number", b"1", rating(first_id + 6, user_id="abc")),
        ("user_id null", None, rating(first_id + 7, user_id=None)),
        ("rating_id missing", b"1", json.dumps({"user_id": 1, "stars": 2}).encode()),
        ("a JSON array", b"1", b"[1, 2, 3]"),
        ("not JSON", b"1", b"{not json"),
        ("not UTF-8", b"1", b"\xff\xfe\x00{"),
        (
            "bytes that are not UTF-8 in a JSON string",
            b"1",
            rating(first_id + 9, message="caf-").replace(b"caf-", b"caf\xe9 \xff"),
        ),
        ("empty value", b"1", b""),
        ("a message near Kafka's 1 MiB record limit", b"1", rating(first_id + 8, message=big)),
    ]
    return kinds


def _poison(f: "Faults") -> None:
    f.sleep(10)
    f.produce_poison()


def _kill_python_workers(kills: int) -> "Callable[[Faults], None]":
    def inject(f: "Faults") -> None:
        before = f.attempts()
        for _ in range(kills):
            f.sleep(f.rng.uniform(8, 15))
            f.kill_worker_in_task()
        f.sleep(10)
        if not f.note_attempts(before)["FAILED"]:
            raise NotInjected("no task attempt failed: no kill hit a worker before it reported")

    return inject


def _kill_driver_after_cdc(f: "Faults") -> None:
    """Every executor frozen between two batches and a customer changed: the driver commits
    the next batch's CDC outcome (or had committed it a moment before the freeze, its job not
    submitted yet), and its tasks cannot run. The driver is killed then, and the executors
    thawed; the restarted job must run that batch's tasks on the same inputs."""
    for _ in range(2):
        f.sleep(f.rng.uniform(10, 15))
        with contextlib.closing(f.commits()) as commits:
            frozen, done = f.freeze_executors()
            try:
                f.change_customer()
                f.wait_driver_commit(commits, done, 30)
                f.kill("enrichment")
            finally:
                f.thaw(frozen)
        f.wait_alive("enrichment")


def _freeze_executor(f: "Faults") -> None:
    """An executor frozen while one of its Python workers runs a task, past the driver's
    network timeout (30 s): the driver gives up on it and runs its tasks on the other, whose
    producers fence the frozen ones. As soon as one of its partitions is committed again
    there, the zombie worker alone is thawed and goes on with its open transaction: its commit
    must be refused. The whole executor is thawed at 45 s (by then its worker has ended it,
    ten seconds after the driver asked it to)."""
    before = f.attempts()
    f.sleep(10)
    executor, pid = f.worker_in_task()
    with contextlib.closing(f.commits()) as commits:
        frozen = tuple(cluster.signal_all(executor.pids, signal.SIGSTOP))
        try:
            began = time.monotonic()
            f.note(f"executor {executor.executor_id} frozen with its worker {pid} in a task")
            elsewhere: set[int] = set()
            while time.monotonic() - began < 20:  # which partitions go on: the other executor's
                elsewhere |= commits.partitions()
            stalled = set(range(f.ratings_partitions())) - elsewhere
            rerun: set[int] = set()
            while not rerun and time.monotonic() - began < 45:
                rerun = commits.partitions() & stalled
            if not rerun:
                raise NotInjected(
                    f"partitions {sorted(stalled)} of the frozen executor were not run elsewhere"
                )
            after = time.monotonic() - began
            if not cluster.signal_all((pid,), signal.SIGCONT):
                raise NotInjected("the zombie worker was ended before its partition ran elsewhere")
            f.note(
                f"partition(s) {sorted(rerun)} committed on the other executor {after:.1f} s into the "
                "freeze; the zombie worker thawed alone"
            )
            f.sleep(max(0.0, 45 - (time.monotonic() - began)))
        finally:
            f.thaw(frozen)
    f.sleep(15)
    f.note_attempts(before)


def _speculation(f: "Faults") -> None:
    """The job restarted with speculation forced (see SPECULATION_CONF). A Python worker in a
    task is frozen for 8 s, a straggler: its copy starts on the other host's executor, fences
    it and commits. Until three copies ran (at most six stragglers); the job's own settings
    again at the end."""
    plain = f.run.pipeline.envs["enrichment"]["PYSPARK_SUBMIT_ARGS"]
    f.reconfigure("enrichment", {"PYSPARK_SUBMIT_ARGS": speculative_args()})
    try:
        f.sleep(25)  # the job back on its executors
        before = f.attempts()
        for _ in range(6):
            found = cluster.worker_in_task(30)
            if found is None:
                continue
            cluster.signal_all((found[1],), signal.SIGSTOP)
            f.sleep(8)
            cluster.signal_all((found[1],), signal.SIGCONT)
            f.sleep(f.rng.uniform(4, 8))
            if (f.attempts() - before)["speculative"] >= 3:
                break
        got = f.note_attempts(before)
        if not got["speculative"]:
            raise NotInjected("no speculative copy of a task ran")
    finally:
        f.reconfigure("enrichment", {"PYSPARK_SUBMIT_ARGS": plain})


def speculative_args() -> str:
    return cluster.submit_args({**cluster.TASKS_SPARK_CONF, **cluster.SPECULATION_CONF})


SCENARIOS = [
    Scenario(
        "job-kill",
        "SIGKILL of the enrichment job 3 times, one right after a customer change",
        _kill_job(3, (8, 18)),
        load_s=120,
        quick=True,
        touches=("enrichment",),
    ),
    Scenario(
        "job-kill-20",
        "SIGKILL of the enrichment job 20 times at random moments, half right after a customer change",
        _kill_job(20, (5, 25)),
        load_s=420,
        touches=("enrichment",),
    ),
    Scenario("broker-30s", "Kafka stopped for 30 s, then started", _down("kafka", 30), load_s=65, quick=True),
    Scenario("broker-3min", "Kafka stopped for 3 min, then started", _down("kafka", 180), load_s=240),
    Scenario(
        "connect-10min",
        "Kafka Connect (Debezium) stopped for 10 min at 2,000 ratings/s, then started",
        _down("connect", 600),
        load_s=630,
        rate=2000,
        expected=ONCE + "; at the job's cap of waiting ratings, the rest left in Kafka",
    ),
    Scenario(
        "connect-restart", "Kafka Connect stopped for 20 s, then started", _down("connect", 20), load_s=60
    ),
    Scenario(
        "mariadb-restart",
        "MariaDB stopped for 20 s, then started",
        _down("mariadb", 20),
        load_s=60,
        databases=("mariadb",),
    ),
    Scenario(
        "postgres-restart",
        "PostgreSQL stopped for 20 s (fast shutdown), then started: the connector resumes from its slot",
        _down("postgres", 20),
        load_s=60,
        databases=("postgres",),
    ),
    Scenario(
        "binlog-reset",
        "the binlog started over: the connector stopped, RESET MASTER, its offsets deleted, then "
        "resumed (a new snapshot into the same CDC topic, positions below the old ones)",
        _binlog_reset,
        load_s=90,
        expected=ONCE + "; the job follows the new history",
        databases=("mariadb",),
    ),
    Scenario(
        "poison-ratings",
        "15 hostile ratings (times at the ends of the long range, a year ahead, wrong types, "
        "not JSON, not UTF-8, a record near Kafka's limit)",
        _poison,
        load_s=40,
        quick=True,
        expected=ONCE + "; every hostile rating in the DLQ, with its bytes or where they are kept",
    ),
    Scenario(
        "second-job-other-state",
        "a second enrichment job, same job name, its own state folder",
        _second_job(same_state=False),
        load_s=60,
        quick=True,
        expected=ONCE + "; the first job fenced (exit 3), the second goes on",
        touches=("enrichment",),
    ),
    Scenario(
        "second-job-same-state",
        "a second enrichment job on the same state folder",
        _second_job(same_state=True),
        load_s=120,
        expected=ONCE + "; the first job fenced (exit 3), the second goes on",
        touches=("enrichment",),
    ),
    Scenario(
        "sinks-kill",
        "SIGKILL of the ES sink, the S3 sink and the Slack notifier",
        _kill_sinks,
        load_s=45,
        quick=True,
        touches=("es_sink", "s3_sink", "slack_notifier"),
    ),
    Scenario(
        "sinks-rebalance",
        "a second ES sink and S3 sink join, the first ones are killed, the second ones stop",
        _two_sinks,
        load_s=80,
        touches=("es_sink", "s3_sink"),
    ),
    Scenario(
        "sinks-offset-reset",
        "the ES and S3 sinks stopped, their groups reset to the row's first records, started again",
        _rewind_sinks,
        load_s=60,
        expected=ONCE + " (the replayed records overwrite, they do not add)",
        touches=("es_sink", "s3_sink"),
    ),
    Scenario(
        "elasticsearch-2min", "Elasticsearch stopped for 2 min", _down("elasticsearch", 120), load_s=180
    ),
    Scenario("s3-2min", "the S3 server stopped for 2 min", _down("s3", 120), load_s=180),
    Scenario(
        "slack-429",
        "Slack answers 429 with Retry-After: 60 to three posts",
        _slack_rate_limited(60),
        load_s=90,
    ),
    Scenario(
        "slack-kill-after-post",
        "SIGKILL of the Slack notifier after Slack stored a post, before it heard back",
        _slack_kill_after_post,
        load_s=35,
        quick=True,
        touches=("slack_notifier",),
    ),
    Scenario(
        "slack-timeouts",
        "Slack stores three posts and answers each only after 30 s (the notifier waits 5 s)",
        _slack_timeouts,
        load_s=60,
    ),
    Scenario(
        "slack-webhook-kill-after-post",
        "the notifier on an incoming webhook, SIGKILL after Slack stored a post, before it heard back",
        _slack_webhook_kill_after_post,
        load_s=90,
        expected="each rating enriched, indexed and in the lake once; each alert posted, at most one "
        "duplicate per crash (a webhook cannot look in the channel)",
        slack_reposts_held=True,
        touches=("slack_notifier",),
    ),
    Scenario(
        "schema-change",
        "demo.customers: a column added, a column widened, a column renamed, then all undone",
        _schema_change,
        load_s=60,
        databases=("mariadb",),  # MariaDB's DDL
    ),
    Scenario(
        "python-worker-kill",
        "SIGKILL of an executor's Python worker while it runs a task (its partition's transaction "
        "open), 3 times, at 1,000 ratings/s",
        _kill_python_workers(3),
        load_s=60,
        rate=1000,
        quick=True,
        join_in=("tasks",),
    ),
    Scenario(
        "driver-kill-after-cdc",
        "every executor frozen between two batches, a customer changed, the driver SIGKILLed once "
        "it committed the next batch's CDC (its tasks not run), the executors thawed; twice",
        _kill_driver_after_cdc,
        load_s=90,
        quick=True,
        touches=("enrichment",),
        join_in=("tasks",),
    ),
    Scenario(
        "executor-freeze",
        "an executor SIGSTOPped while its Python worker runs a task; past the 30 s network timeout "
        "its partitions run on the other; once one commits there the zombie worker is thawed alone "
        "(SIGCONT) and must be fenced; the rest thawed at 45 s",
        _freeze_executor,
        load_s=80,
        quick=True,
        join_in=("tasks",),
    ),
    Scenario(
        "speculation",
        "the job restarted with speculation forced; a Python worker in a task frozen for 8 s, a "
        "straggler whose speculative copy runs on the other executor, until 3 copies ran",
        _speculation,
        load_s=130,
        rate=1000,
        quick=True,
        join_in=("tasks",),
    ),
]


def _kill_views_undeclared(f: "Faults") -> None:
    f.sleep(10)
    f.kill("views")
    f.wait_alive("views")


def _idle(f: "Faults") -> None:
    f.sleep(5)


def _forge_segment_rows(f: "Faults") -> None:
    """Rows of segment_hourly for this hour, written again with 1,000 ratings more straight to
    its changelog topic, as if the views job had counted them: the query service serves them."""
    f.forge_view_rows("segment_hourly", "ratings", 1000)


# Rows built to fail: each must come out not met, for its reason, or the judge cannot fail. They
# run after the others (`--self-test`), as a forged row stays in its view until the views job
# writes that row again.
SELF_TESTS = [
    Scenario(
        "self-test-undeclared-kill",
        "SIGKILL of the views job, by a row that does not declare it",
        _kill_views_undeclared,
        load_s=30,
        expected="not met: the views job exited, and the row's fault does not touch it",
        built_to_fail="unexpected exit of views",
    ),
    Scenario(
        "self-test-wrong-view",
        "this hour's segment_hourly rows written again with 1,000 ratings more, after the views caught up",
        _idle,
        load_s=30,
        expected="not met: segment_hourly differs from its recount",
        built_to_fail="segment_hourly differs",
        before_check=_forge_segment_rows,
    ),
]
