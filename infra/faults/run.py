"""One fault matrix run: the demo's pipeline (the enrichment job, the views job, the four
services) started once, the Slack notifier in bot mode against a local fake of Slack's Web API;
then, per scenario, load from the load generator, the fault injected while it runs, the time
until every stage has caught up again, and every stage reconciled against what was produced.

Processes that die are restarted with back-off, as a supervisor would (`Pipeline.supervise`),
except after exit code 2 (a bad setting) or 3 (the job fenced by another instance of its name).
"""

import argparse
import contextlib
import json
import logging
import os
import random
import re
import signal
import subprocess
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from enrichment_job.runtime.cli import FENCED_EXIT
from enrichment_job.settings import JobSettings
from enrichment_job.views.settings import ViewsSettings
from infra.demo import views
from infra.demo.__main__ import Demo
from infra.demo.figures import TOPICS, read_json
from infra.demo.pipeline import MODULES, Child, DemoPaths, without_endpoint
from infra.demo.reconcile import (
    NOT_UTF8,
    WITHOUT_BYTES,
    Check,
    Reconciliation,
    TopicCounter,
    es_count,
    lake_ids,
)
from infra.faults import cluster
from infra.faults.scenarios import NotInjected, Scenario, poison_records
from infra.slack.fake import CHANNEL, TOKEN, FakeSlack
from infra.stack.bootstrap import admin_sql, start_binlog_over
from infra.stack.clients import app_db, spark_job_on_cluster
from infra.stack.settings import StackSettings
from infra.stack.supervise import Supervisor

log = logging.getLogger("faults")

STALL_TIMEOUT_S = 90
# the services that write their threads' stacks on SIGUSR1 (to others it is deadly)
STACK_DUMPERS = {MODULES[name] for name in ("slack_notifier", "es_sink", "s3_sink")}


@dataclass
class Row:
    """One line of the matrix."""

    fault: str
    injected: str
    expected: str
    ratings: int | None = None
    lost: int | None = None
    duplicated: int | None = None
    alerts_lost: int | None = None
    alerts_duplicated: int | None = None
    es_missing: int | None = None
    lake_lost: int | None = None
    lake_duplicated: int | None = None
    slack_lost: int | None = None
    slack_duplicated: int | None = None
    dlq: str = ""
    views_ok: bool | None = None
    views_differ: list[str] = field(default_factory=list)  # the views whose rows differ from a recount
    recovered_s: float | None = None
    restarts: dict[str, int] = field(default_factory=dict)
    # Exits the fault did not inject: "<process> (<code>): <its last error line>".
    unexpected_exits: list[str] = field(default_factory=list)
    built_to_fail: str = ""  # a self-test of the judge: met when the row is not, for this reason
    not_injected: str = ""  # why the fault did not happen: the row tested nothing, not met
    notes: list[str] = field(default_factory=list)
    ok: bool = False

    @property
    def views(self) -> str:
        if self.views_ok is None:
            return "-"
        return "yes" if self.views_ok else "NO: " + ", ".join(self.views_differ)

    @property
    def exits(self) -> str:
        return ", ".join(e.split(":", 1)[0] for e in self.unexpected_exits) or "none"

    @property
    def judged(self) -> bool:
        """What the matrix asks of the row: met, or for a self-test, not met for its reason."""
        if not self.built_to_fail:
            return self.ok
        return not self.ok and self.built_to_fail in self.failures()

    def failures(self) -> list[str]:
        """Why the row is not met, in words the self-tests name."""
        why = [f"unexpected exit of {e.split(' ', 1)[0]}" for e in self.unexpected_exits]
        why += [f"not injected: {self.not_injected}"] if self.not_injected else []
        return why + [f"{v} differs" for v in self.views_differ]

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "judged_ok": self.judged}


@dataclass(frozen=True)
class Exit:
    """A pipeline process found ended."""

    name: str
    code: int | None
    last_error: str


def last_error(log_tail: str) -> str:
    """The last line of a log that tells of an error, else its last line."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip() and not line.startswith("%")]
    errors = [line for line in lines if re.search(r"ERROR|CRITICAL|Error|Exception|error:", line)]
    return (errors or lines or ["(no log)"])[-1][:200]


def _signal_name(code: int | None) -> str:
    """For an exit by a signal, its name after a comma (", SIGKILL"); else nothing."""
    if code is None or code >= 0:
        return ""
    try:
        return f", {signal.Signals(-code).name}"
    except ValueError:
        return ""


def unexpected(exits: list[Exit], injected: Counter[tuple[str, int]], touches: tuple[str, ...]) -> list[Exit]:
    """The exits a row's fault did not inject: of a process it does not declare, with another
    code, or more of them than it injected."""
    left = Counter({k: n for k, n in injected.items() if k[0] in touches})
    other = []
    for e in exits:
        if e.code is not None and left[(e.name, e.code)] > 0:
            left[(e.name, e.code)] -= 1
        else:
            other.append(e)
    return other


class Faults:
    """What an injection can do to the running pipeline and stack (see scenarios.py)."""

    def __init__(self, run: "FaultRun", seed: int) -> None:
        self.run = run
        self.rng = random.Random(seed)
        self.slack = run.slack
        self.notes: list[str] = []
        self.lock = run.lock
        self.sup = Supervisor(StackSettings())
        self.ended_at = time.monotonic()
        self.paused: dict[str, Child] = {}
        self.injected: Counter[tuple[str, int]] = Counter()  # (process, exit code) this fault caused
        self.forged: list[tuple[str, list[str], dict[str, Any]]] = []  # (view, key columns, row as it was)
        self.not_injected = ""  # why the row's fault could not be brought about

    def note(self, text: str) -> None:
        log.info("note: %s", text)
        self.notes.append(text)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def kill(self, name: str) -> None:
        with self.lock:
            child = self.run.pipeline.children[name]
            if child.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait(30)
                self.injected[(name, -signal.SIGKILL)] += 1
        log.info("killed %s (SIGKILL)", name)

    def wait_alive(self, name: str, timeout_s: float = 120) -> None:
        """Until the supervisor has restarted it (the next kill hits the new process)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if self.run.pipeline.children[name].alive():
                    return
            time.sleep(0.5)

    def stop_component(self, name: str) -> None:
        log.info("stopping %s", name)
        self.sup.stop(name)

    def start_component(self, name: str) -> None:
        log.info("starting %s", name)
        self.sup.start(name)

    def change_customer(self) -> None:
        db = app_db(self.run.stack)
        try:
            with db.cursor() as cur:
                cur.execute("SELECT MIN(id), MAX(id) FROM customers")
                low, high = cur.fetchone()
                status = self.rng.choice(["bronze", "silver", "gold", "platinum"])
                cur.execute(
                    "UPDATE customers SET club_status = %s WHERE id = %s",
                    (status, self.rng.randint(low, high)),
                )
            db.commit()
        finally:
            db.close()

    def admin_sql(self, sql: str) -> None:
        """As the database's local admin, over its socket (DDL: the app's user may not)."""
        log.info("admin SQL: %s", sql)
        admin_sql(StackSettings(), sql)

    def start_binlog_over(self) -> None:
        start_binlog_over(StackSettings())

    def produce_poison(self) -> None:
        kinds = poison_records(int(time.time() * 1000), 1)
        producer = Producer(
            {
                "bootstrap.servers": self.run.stack["KAFKA_BOOTSTRAP_SERVERS"],
                "message.max.bytes": 2_000_000,
                "compression.type": "none",
            }
        )
        for what, key, value in kinds:
            producer.produce(TOPICS["ratings"], key=key, value=value)
            log.info("poison: %s (%d bytes)", what, len(value))
        if producer.flush(30):
            raise RuntimeError("poison ratings were not all delivered")
        self.run.injected_bad += len(kinds)

    def start_extra(self, name: str) -> None:
        """A second instance of a service, in the same consumer group."""
        pipeline = self.run.pipeline
        env = {**pipeline.envs[name], **without_endpoint(pipeline.envs[name])}
        env |= {k: str(self.run.paths.metrics(f"{name}-2")) for k in env if k.endswith("_METRICS_FILE")}
        with self.lock:
            pipeline.envs[f"{name}-2"] = env
            pipeline.start(f"{name}-2", module=MODULES[name])

    def stop_extra(self, name: str) -> None:
        with self.lock:
            self.run.pipeline.stop(f"{name}-2")
            self.run.pipeline.children.pop(f"{name}-2", None)

    def pause(self, name: str) -> None:
        """Stops a service for good until `resume` (the supervisor does not restart it)."""
        with self.lock:
            self.run.pipeline.stop(name)
            self.paused[name] = self.run.pipeline.children.pop(name)
        log.info("stopped %s (not restarted until resumed)", name)

    def resume(self, name: str) -> None:
        with self.lock:
            before = self.paused.pop(name)
            started = self.run.pipeline.start(name, before.args, before.module)
            started.restarts = before.restarts
        log.info("started %s again", name)

    def reconfigure(self, name: str, set_env: dict[str, str], unset: tuple[str, ...] = ()) -> None:
        """Stops a service cleanly, changes its settings, and starts it again."""
        self.pause(name)
        env = self.run.pipeline.envs[name]
        for key in unset:
            env.pop(key, None)
        env.update(set_env)
        self.resume(name)

    def slack_posts_after(self, count: int, timeout_s: float) -> bool:
        """Until Slack holds more than `count` messages (False: not within the time)."""
        return len(self.slack.wait_for_posts(count + 1, timeout_s)) > count

    def rewind_group(self, name: str, group: str, role: str) -> None:
        """Moves a paused service's consumer group back to where this row's records of `role`'s
        topic begin: an operator's offset reset, so the service reads them all again."""
        topic = TOPICS[role]
        starts = [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in self.run.start_offsets[role]]
        admin = AdminClient({"bootstrap.servers": self.run.stack["KAFKA_BOOTSTRAP_SERVERS"]})
        rewound = ConsumerGroupTopicPartitions(group, starts)
        for future in admin.alter_consumer_group_offsets([rewound]).values():
            future.result(30)
        self.note(f"{name}: group {group} rewound to the row's first offsets of {topic}")

    def forge_view_rows(self, view: str, column: str, add: int) -> None:
        """The rows of this hour and the one before of a view (one with an `hour` column)
        written again to its changelog topic with `column` raised by `add`, as the views job
        would write them; returns once the query service serves them. `restore_view_rows`
        writes them back as they were."""
        now = time.time()
        rows = [
            row
            for hour in sorted({time.strftime("%Y-%m-%dT%H", time.gmtime(t)) for t in (now - 3600, now)})
            for row in (views.get(f"/views/{view}?hour={hour}&limit=1000", 5.0) or {}).get("rows", [])
        ]
        key_columns = views.catalog()[view]["key"]
        forged = [(row, {**row, column: row[column] + add}) for row in rows]
        self._write_rows(view, key_columns, [f for _, f in forged])
        self.forged += [(view, key_columns, row) for row, _ in forged]
        self.note(f"{len(rows)} {view} rows of the last two hours written again with {column} + {add}")
        deadline = time.monotonic() + 60
        path = "/".join(urllib.parse.quote(str(rows[-1][c]), safe="") for c in key_columns) if rows else ""
        while rows and time.monotonic() < deadline:
            served = views.get(f"/views/{view}/{path}", 2.0) or {}
            if served.get(column) == rows[-1][column] + add:
                return
            time.sleep(0.5)

    def restore_view_rows(self) -> None:
        """The rows `forge_view_rows` changed, written back as they were."""
        for view, key_columns, row in self.forged:
            self._write_rows(view, key_columns, [row])
        self.forged.clear()

    def _write_rows(self, view: str, key_columns: list[str], rows: list[dict[str, Any]]) -> None:
        producer = Producer({"bootstrap.servers": self.run.stack["KAFKA_BOOTSTRAP_SERVERS"]})
        topic = ViewsSettings().topic(view)
        for row in rows:
            # The key as the views job writes it (Spark's to_json: compact, UTF-8).
            key = json.dumps({c: row[c] for c in key_columns}, separators=(",", ":"), ensure_ascii=False)
            producer.produce(topic, key=key.encode(), value=json.dumps(row, ensure_ascii=False).encode())
        if producer.flush(30):
            raise RuntimeError(f"rows of {view} were not all delivered")

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{cluster.TASKS_UI_PORT}"

    def attempts(self) -> Counter[str]:
        """The job's task attempts so far (its Spark UI's count; see cluster.task_attempts)."""
        return cluster.task_attempts(self.ui_url)

    def note_attempts(self, before: Counter[str]) -> Counter[str]:
        """Notes the task attempts since `before`, and returns them."""
        got = self.attempts() - before
        self.note(
            f"task attempts during the row: {got['attempts']}, of them {got['FAILED']} failed, "
            f"{got['KILLED']} killed, {got['speculative']} speculative"
        )
        return got

    def worker_in_task(self, timeout_s: float = 30) -> tuple[cluster.Executor, int]:
        """A Python worker caught running a task, and its executor (see cluster.worker_in_task)."""
        found = cluster.worker_in_task(timeout_s)
        if found is None:
            raise NotInjected(f"no Python worker was caught in a task within {timeout_s:.0f} s")
        return found

    def kill_worker_in_task(self) -> None:
        """SIGKILL of an executor's Python worker caught running a task (its partition's
        transaction open)."""
        executor, pid = self.worker_in_task()
        cluster.signal_all((pid,), signal.SIGKILL)
        self.note(f"SIGKILL of Python worker {pid} of executor {executor.executor_id} in a task")

    def freeze_executors(self, timeout_s: float = 120) -> tuple[tuple[int, ...], int | None]:
        """SIGSTOP of every executor with its Python workers, at a moment when none of them runs
        a task (between two batches: no worker is inside one, and the driver runs no Spark job);
        returns the processes stopped and the newest batch whose tasks all ran. Each of the
        cluster's executors must have run tasks already (a job that just started is not at work
        yet)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = cluster.executors()
            at_work = len(found) >= StackSettings().spark_workers and all(e.workers for e in found)
            if at_work and cluster.all_waiting(found):
                stopped = cluster.signal_all(tuple(p for e in found for p in e.pids), signal.SIGSTOP)
                batches = cluster.batches(self.ui_url) if cluster.all_waiting(found) else None
                if batches is not None and batches.running == 0:
                    self.note(
                        f"{len(found)} executors frozen between two batches ({len(stopped)} processes),"
                        f" after batch {batches.done}"
                    )
                    return tuple(stopped), batches.done
                cluster.signal_all(tuple(stopped), signal.SIGCONT)  # a task ran, or began meanwhile
            time.sleep(0.005)
        raise NotInjected(
            f"the executors were never all at work and between two batches within {timeout_s:.0f} s"
        )

    def thaw(self, pids: tuple[int, ...]) -> None:
        left = cluster.signal_all(pids, signal.SIGCONT)
        log.info("SIGCONT to %d of %d frozen processes (the others are gone)", len(left), len(pids))

    def ratings_partitions(self) -> int:
        admin = AdminClient({"bootstrap.servers": self.run.stack["KAFKA_BOOTSTRAP_SERVERS"]})
        return len(admin.list_topics(TOPICS["ratings"], timeout=10).topics[TOPICS["ratings"]].partitions)

    def commits(self) -> "Commits":
        """The job's commit markers from now on (read_committed)."""
        env = self.run.pipeline.envs["enrichment"]
        fields = JobSettings.model_fields
        topic = env.get("ENRICH_COMMITS_TOPIC", fields["commits_topic"].default)
        name = env.get("ENRICH_JOB_NAME", fields["job_name"].default)
        return Commits(self.run.stack["KAFKA_BOOTSTRAP_SERVERS"], topic, name)

    def wait_driver_commit(self, commits: "Commits", after: int | None, timeout_s: float) -> None:
        """Until `commits` shows the job's driver committing the marker (the CDC outcome) of a
        batch after `after`. Opened before the executors froze, `commits` also holds a marker
        committed a moment before whose job the driver had not shown yet."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for key, value in commits.poll():
                batch = int(json.loads(value)["batch_id"]) if key == commits.name else None
                if batch is not None and (after is None or batch > after):
                    self.note(f"the driver committed batch {batch}'s CDC")
                    return
        raise NotInjected(f"the driver committed no batch after {after} within {timeout_s:.0f} s")

    def take_over_job(self, same_state: bool) -> None:
        """A second enrichment job under the same name; the first must be fenced (exit 3), the
        second takes its place in the pipeline."""
        pipeline = self.run.pipeline
        with self.lock:
            first = pipeline.children["enrichment"]
            env = {**pipeline.envs["enrichment"], **without_endpoint(pipeline.envs["enrichment"])}
            if not same_state:
                env["ENRICH_STATE_DIR"] = str(self.run.paths.root / f"enrichment-{time.time_ns()}")
            pipeline.envs["enrichment-2"] = env
            self.injected[("enrichment", FENCED_EXIT)] += 1
            pipeline.start("enrichment-2", module=MODULES["enrichment"])
        try:
            code = first.proc.wait(300)
        except subprocess.TimeoutExpired:
            self.note("the first job was not fenced within 300 s")
            return
        self.note(f"the first job exited with code {code}" + (" (fenced)" if code == 3 else ""))
        with self.lock:
            second = pipeline.children.pop("enrichment-2")
            second.restarts = first.restarts  # the row counts restarts of "the job"
            pipeline.children["enrichment"] = second
            pipeline.envs["enrichment"] = env


class Commits:
    """A job's markers in its commits topic, committed from its creation on."""

    def __init__(self, servers: str, topic: str, name: str) -> None:
        self.name = name
        self.consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": f"faults-{time.time_ns()}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        meta = self.consumer.list_topics(topic, timeout=10).topics[topic]
        ends = []
        for p in sorted(meta.partitions):
            _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends.append(TopicPartition(topic, p, high))
        self.consumer.assign(ends)

    def poll(self, timeout_s: float = 0.2) -> list[tuple[str, bytes]]:
        """(key, value) of the markers committed since the last call: the driver's is keyed by
        the job's name, a task's by `<name>/ratings/<partition>`."""
        found = []
        for msg in self.consumer.consume(1000, timeout_s):
            key, value = msg.key(), msg.value()
            if msg.error() is None and key is not None and value is not None:
                found.append((key.decode(), value))
        return found

    def partitions(self, timeout_s: float = 0.2) -> set[int]:
        """The ratings partitions whose task committed since the last call."""
        prefix = f"{self.name}/ratings/"
        return {int(k[len(prefix) :]) for k, _ in self.poll(timeout_s) if k.startswith(prefix)}

    def close(self) -> None:
        self.consumer.close()


def tasks_job_env(stack: dict[str, str], paths: DemoPaths) -> dict[str, str]:
    """The job's settings for a matrix with the join in tasks on the stack's cluster: a job name
    of its own for each matrix run (a name that ran in tasks cannot go back to the driver, and
    the demo's job keeps its own), starting at the ratings' end, with its UI on for the task
    attempts."""
    name = f"enrichment-tasks-{time.strftime('%Y%m%d-%H%M%S')}"
    return {
        **spark_job_on_cluster(stack),
        "ENRICH_JOIN_IN": "tasks",
        "ENRICH_MIN_EXECUTORS": str(StackSettings().spark_workers),
        "ENRICH_JOB_NAME": name,
        "ENRICH_STATE_DIR": str(paths.root / name),
        "ENRICH_METRICS_FILE": str(paths.job_state / "metrics.json"),  # where the demo's screen reads
        "ENRICH_STARTING_OFFSETS": "latest",
        "ENRICH_UI_ENABLED": "true",
        "PYSPARK_SUBMIT_ARGS": cluster.submit_args(cluster.TASKS_SPARK_CONF),
    }


class FaultRun(Demo):
    """The demo's pipeline, supervised, with a fake Slack behind the notifier."""

    def __init__(self, args: argparse.Namespace, stack: dict[str, str], paths: DemoPaths) -> None:
        super().__init__(args, stack, paths)
        self.slack = FakeSlack()
        self.pipeline.envs["slack_notifier"].update(
            {
                "SLACK_BOT_TOKEN": TOKEN,
                "SLACK_CHANNEL": CHANNEL,
                "SLACK_BASE_URL": self.slack.base_url,
                "SLACK_TIMEOUT_S": "5",
            }
        )
        # A service whose loop stops coming back is ended and restarted well within a row's
        # drain time (the default, five minutes, is sized for production's slower sinks).
        for name, prefix in (("slack_notifier", "SLACK_"), ("es_sink", "ES_SINK_"), ("s3_sink", "S3_SINK_")):
            self.pipeline.envs[name][f"{prefix}STALL_TIMEOUT_S"] = str(STALL_TIMEOUT_S)
        # A cap the 10-minute CDC stall reaches: past it, ratings are left in Kafka.
        self.pipeline.envs["enrichment"]["ENRICH_MAX_WAITING_RATINGS"] = "100000"
        # The built-in views only: views a demo declared in SQL would each backfill the whole
        # enriched topic in every row's views job, and no row checks them.
        self.pipeline.envs["views"]["VIEWS_JOB_CATALOG_TOPIC"] = ""
        if args.join_in == "tasks":
            self.pipeline.envs["enrichment"].update(tasks_job_env(stack, paths))
        self.lock = threading.Lock()
        self.final: list[str] = []  # children that ended for good (exit 2 or 3)
        self.exits: list[Exit] = []  # every end of a pipeline process, in order
        self._ended: list[Child] = []  # the children whose end is in `exits`
        self._shown = 0.0
        self._scenario: Scenario | None = None
        self._faults: Faults | None = None

    def _check_children(self) -> None:
        with self.lock:
            for child in self.pipeline.dead():
                if not any(child is seen for seen in self._ended):
                    self._ended.append(child)
                    self.exits.append(Exit(child.name, child.proc.returncode, last_error(child.tail(200))))
                    log.warning("%s exited with %s", child.name, child.proc.returncode)
            for child in self.pipeline.supervise():
                if child.name not in self.final:
                    log.warning("%s exited with %s: not restarted", child.name, child.proc.returncode)
                    self.final.append(child.name)

    def show(self, phase: str) -> None:
        """A progress line every 10 s (the demo's screen asks the broker for more than that,
        and the broker may be the thing that is down)."""
        now = time.monotonic()
        if now - self._shown >= 10:
            self._shown = now
            print(f"[{time.strftime('%H:%M:%S')}] {phase}", flush=True)

    def scenario(self, scn: Scenario, seed: int) -> Row:
        row = Row(scn.name, scn.injected, scn.expected)
        log.info("==> %s: %s", scn.name, scn.injected)
        print(f"==> {scn.name}: {scn.injected}", flush=True)
        self.start_offsets = {role: self.observer.ends(role) for role in TOPICS}
        self.paths.metrics("loadgen").unlink(missing_ok=True)
        self.slack.messages.clear()
        self.slack.held_messages.clear()
        self.injected_bad = 0
        restarts_before = {n: c.restarts for n, c in self.pipeline.children.items()}
        exits_before = len(self.exits)
        rate = scn.rate or self.args.rate
        load_args = tuple(
            f"{x}"
            for x in (
                "--rate",
                rate,
                "--customers",
                self.args.customers,
                "--duration",
                scn.load_s,
                "--seed",
                seed,
            )
        )
        with self.lock:
            loadgen = self.pipeline.start("loadgen", load_args)
        faults = Faults(self, seed)
        self._scenario, self._faults = scn, faults
        injector = threading.Thread(target=self._inject, args=(scn, faults), daemon=True)
        time.sleep(3)  # the first ratings are out before anything breaks
        injector.start()
        recovery: Recovery | None = None
        deadline = time.monotonic() + scn.load_s + self.args.drain_timeout
        while True:
            self._check_children()
            if not injector.is_alive():
                if recovery is None:
                    recovery = self._recovery(faults.ended_at)
                    # An injection that outlasted the load (restarts back off) still gets the
                    # whole drain time after it.
                    deadline = max(deadline, time.monotonic() + self.args.drain_timeout)
                if recovery is not None and recovery.seconds is None:
                    recovery.poll()
                if not loadgen.alive() and (recovery is None or recovery.seconds is not None):
                    break
            if time.monotonic() > deadline:
                faults.note("did not recover within the load and the drain timeout")
                self.show_stacks()
                break
            time.sleep(1)
        if recovery is not None:
            row.recovered_s = recovery.seconds
            recovery.close()
        result = self.reconcile()
        faults.restore_view_rows()
        self._check_children()
        row.unexpected_exits = [
            f"{e.name} ({e.code}{_signal_name(e.code)}): {e.last_error}"
            for e in unexpected(self.exits[exits_before:], faults.injected, scn.touches)
        ]
        self._fill(scn, row, result, faults)
        row.restarts = {
            n: c.restarts - restarts_before.get(n, 0)
            for n, c in self.pipeline.children.items()
            if c.restarts - restarts_before.get(n, 0)
        }
        print(result.text(), flush=True)
        return row

    def before_views_check(self) -> None:
        if self._scenario is not None and self._faults is not None and self._scenario.before_check:
            self._scenario.before_check(self._faults)

    def show_stacks(self) -> None:
        """Has each consumer service write where its threads are (SIGUSR1, see services.core.main)
        and prints that with the end of its log: what a stage that did not catch up waits for."""
        with self.lock:
            services = [c for c in self.pipeline.children.values() if c.module in STACK_DUMPERS and c.alive()]
            for child in services:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.proc.pid, signal.SIGUSR1)
        time.sleep(2)
        for child in services:
            quiet = [line for line in child.tail(400).splitlines() if not line.startswith("%")]
            print(f"==> {child.name}: the end of its log\n" + "\n".join(quiet[-60:]), flush=True)

    def _inject(self, scn: Scenario, faults: Faults) -> None:
        try:
            scn.inject(faults)
        except NotInjected as err:  # the row did not test what it says: not met
            log.error("%s: the fault was not injected: %s", scn.name, err)
            faults.not_injected = str(err)
        except Exception as err:  # a failed injection is a finding of the row
            log.exception("injection of %s failed", scn.name)
            faults.note(f"the injection failed: {err}")
        faults.ended_at = time.monotonic()

    def _recovery(self, fault_end: float) -> "Recovery | None":
        """Follows the stages from the end of the fault until they hold every rating produced
        until then (None when the load generator has not reported yet)."""
        load = read_json(self.paths.metrics("loadgen"))
        if "first_rating_id" not in load:
            return None
        ids = (int(load["first_rating_id"]), int(load["last_rating_id"]))
        counter = TopicCounter(self.stack["KAFKA_BOOTSTRAP_SERVERS"], self.start_offsets["enriched"], ids)
        return Recovery(self, fault_end, ids, counter)

    def _fill(self, scn: Scenario, row: Row, result: Reconciliation, faults: Faults) -> None:
        checks = {c.name.strip(): c for c in result.checks}

        def got(name: str) -> int | None:
            check = checks.get(name)
            return None if check is None else check.got

        produced = got("ratings produced") or 0
        total, distinct = got("enriched records"), got("distinct ratings enriched")
        alerts, alerts_distinct = got("alerts (stars < 3, platinum)"), got("distinct alerts")
        should_alert = checks["distinct alerts"].want if "distinct alerts" in checks else None
        row.ratings = produced
        if total is not None and distinct is not None:
            row.lost, row.duplicated = produced - distinct, total - distinct
        if alerts is not None and alerts_distinct is not None and should_alert is not None:
            row.alerts_lost, row.alerts_duplicated = should_alert - alerts_distinct, alerts - alerts_distinct
        es = got("Elasticsearch documents")
        row.es_missing = None if es is None else produced - es
        lake, lake_distinct = got("lake rows"), got("distinct ratings in the lake")
        if lake is not None and lake_distinct is not None:
            row.lake_lost, row.lake_duplicated = produced - lake_distinct, lake - lake_distinct
        load = read_json(self.paths.metrics("loadgen"))
        first, last = int(load.get("first_rating_id", 0)), int(load.get("last_rating_id", -1))
        posted = {i: n for i, n in self.slack.covered().items() if first <= i <= last}
        if should_alert is not None:
            row.slack_lost = should_alert - len(posted)
            row.slack_duplicated = sum(posted.values()) - len(posted)
        dlq = checks.get("enrichment-dlq")
        if dlq is not None:
            row.dlq = f"{dlq.got}/{dlq.want}"
        compared = {
            name[: -len(views.VIEW_ROWS)]: c for name, c in checks.items() if name.endswith(views.VIEW_ROWS)
        }
        row.views_differ = [name for name, c in compared.items() if not c.ok]
        row.views_ok = (not row.views_differ) if compared else None
        others = unmet_without_column(checks)
        lost_or_doubled = [
            row.lost,
            row.duplicated,
            row.alerts_lost,
            row.alerts_duplicated,
            row.es_missing,
            row.lake_lost,
            row.lake_duplicated,
            row.slack_lost,
        ]
        slack_ok = row.slack_duplicated == 0
        if scn.slack_reposts_held and row.slack_duplicated:
            doubled = {i for i, n in posted.items() if n > 1}
            slack_ok = doubled <= self.slack.held_ids() and all(posted[i] == 2 for i in doubled)
            faults.note(
                f"{len(doubled)} alert(s) posted twice"
                + (", all of the message held at the crash" if slack_ok else ", not only the held message's")
            )
        row.not_injected = faults.not_injected
        row.notes = [
            *faults.notes,
            *([f"NOT INJECTED: {faults.not_injected}"] if faults.not_injected else []),
            *[f"{n} ended for good" for n in self.final],
            *[f"not expected: {e}" for e in row.unexpected_exits],
            *[f"{c.name}: {c.got} (expected {c.want})" for c in others],
        ]
        row.built_to_fail = scn.built_to_fail
        self.final.clear()
        row.ok = (
            all(v == 0 for v in lost_or_doubled)
            and slack_ok
            and (dlq is None or dlq.ok)
            and row.views_ok is True
            and not row.unexpected_exits
            and not row.not_injected
            and not others
            and row.recovered_s is not None
        )


def unmet_without_column(checks: dict[str, Check]) -> list[Check]:
    """The checks with a count to meet that no column of the matrix shows (records that are not
    UTF-8, dead letters whose bytes are nowhere), where the count was not met."""
    return [c for name, c in checks.items() if name in (NOT_UTF8, WITHOUT_BYTES) and not c.ok]


class Recovery:
    """Polled until the enriched topic, Elasticsearch and the lake hold all of `ids`."""

    def __init__(self, run: FaultRun, since: float, ids: tuple[int, int], counter: TopicCounter) -> None:
        self.run, self.since, self.ids, self.counter = run, since, ids, counter
        self.want = ids[1] - ids[0] + 1
        self.seconds: float | None = None
        self._next = 0.0

    def poll(self) -> None:
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + 2
        self.counter.read(budget_s=0.5)
        if len(self.counter.ids) < self.want:
            return
        if es_count(self.run.stack["ELASTICSEARCH_URL"], "ratings", self.ids) != self.want:
            return
        lake = lake_ids(self.run.lake, self.ids)
        if lake is not None and len(lake) >= self.want:
            self.seconds = round(time.monotonic() - self.since, 1)

    def close(self) -> None:
        self.counter.close()


def write_matrix(rows: list[Row], path: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": [r.as_json() for r in rows]}, indent=1))


COLUMNS = (
    ("fault", "fault"),
    ("ratings", "ratings"),
    ("lost", "lost"),
    ("duplicated", "dup"),
    ("alerts_lost", "alerts lost"),
    ("alerts_duplicated", "alerts dup"),
    ("es_missing", "ES missing"),
    ("lake_lost", "lake lost"),
    ("lake_duplicated", "lake dup"),
    ("slack_lost", "Slack lost"),
    ("slack_duplicated", "Slack dup"),
    ("dlq", "DLQ got/want"),
    ("views", "views"),
    ("exits", "unexpected exits"),
    ("recovered_s", "recovered s"),
    ("ok", "ok"),
)


def table(rows: list[Row]) -> str:
    """The matrix as a Markdown table, then what was injected and noted per row."""

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, bool):
            return "yes" if value else "NO"
        return f"{value:,}" if isinstance(value, int) else str(value)

    lines = [
        "| " + " | ".join(title for _, title in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for row in rows:
        data = {**row.as_json(), "views": row.views, "exits": row.exits}
        if row.built_to_fail:
            data["ok"] = "self-test " + ("met: not ok" if row.judged else "FAILED: the row passed")
        lines.append("| " + " | ".join(cell(data[key]) for key, _ in COLUMNS) + " |")
    lines.append("")
    for row in rows:
        restarts = ", ".join(f"{n} {k}x" for n, k in row.restarts.items()) or "none"
        lines.append(f"- {row.fault}: {row.injected}. Expected: {row.expected}. Restarts: {restarts}.")
        lines += [f"  - {note}" for note in row.notes]
    return "\n".join(lines)
