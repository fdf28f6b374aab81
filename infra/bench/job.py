"""make bench-job: the enrichment job's throughput and latency on this machine, as figures.

Against the running local stack: seeds customers in the customer database (MariaDB or PostgreSQL),
starts the job (fresh state, its own topics), keeps a trickle of customer updates going, then
0. warm-up: ratings at --rate per second for --warmup seconds, reported apart (a cold job: the
   JVM compiles Spark's planning code for its first minutes: 0.6 to 1.2 of a core in the first
   two, 0.2 to 0.33 from the fourth to the sixth, about 0.1 after, with `jstat -compiler`);
1. fixed rate: ratings at --rate per second for --duration seconds; latency is the time from a
   rating's production (its rating_time) to its enriched record being readable with
   read_committed;
2. saturation: a backlog of --saturation ratings, serialized beforehand and sent as fast as the
   producer takes them; throughput is backlog / time from the first sent to the last readable.
Prints the figures and writes them as JSON (--out).
"""

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from enrichment_job.runtime.metrics import caught_up
from infra.bench.results import exit_on_sigterm
from infra.stack.clients import app_db, spark_job_on_cluster, spark_job_state_in_s3
from infra.stack.secrets import read_env_file
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.stack import stack_env_path

STATUSES = ("bronze", "silver", "gold", "platinum")


def seed_customers(env: dict[str, str], count: int) -> list[int]:
    conn = app_db(env)
    with conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM customers")
        missing = count - int(cur.fetchone()[0])
        rnd = random.Random(1)
        for start in range(0, max(missing, 0), 5000):
            rows = [
                (
                    f"First{i}",
                    f"Last{i}",
                    f"c{i}-{uuid.uuid4().hex[:6]}@example.com",
                    rnd.choice(STATUSES),
                    "EMEA",
                )
                for i in range(start, min(start + 5000, missing))
            ]
            cur.executemany(
                "INSERT INTO customers (first_name, last_name, email, club_status, region)"
                " VALUES (%s, %s, %s, %s, %s)",
                rows,
            )
            print(f"  seeded {start + len(rows)}/{missing} customers", flush=True)
        # The first `count` of them: a table seeded larger by another benchmark (the peer
        # comparison seeds a million) must not widen the keys this run draws from.
        cur.execute("SELECT id FROM customers ORDER BY id LIMIT %s", (count,))
        return [int(r[0]) for r in cur.fetchall()]


def trickle_updates(env: dict[str, str], ids: list[int], per_s: float, stop: threading.Event) -> None:
    conn, rnd = app_db(env), random.Random()  # not seeded: a re-run must change rows again
    with conn, conn.cursor() as cur:
        while not stop.wait(1 / per_s):
            cur.execute(
                "UPDATE customers SET club_status = %s WHERE id = %s", (rnd.choice(STATUSES), rnd.choice(ids))
            )


# An enriched record's rating_time, found without decoding the record: the reader shares the
# cores it measures (a JSON decode of each record cost it a tenth of a core at 5,000/s).
RATING_TIME = re.compile(rb'"rating_time":\s*(\d+)')


def committed_reader(servers: str, topic: str) -> Consumer:
    """A consumer of `topic` from its start, seeing committed records only, in a group of its own."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    return consumer


class Latencies(threading.Thread):
    """Reads the enriched topic (read_committed) and records, per record, when it became
    readable and now - rating_time. With `timing` off (the saturation phase) it only counts."""

    def __init__(self, servers: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = committed_reader(servers, topic)
        self.samples: list[tuple[float, int | None]] = []  # (seen at, latency ms)
        self.timing = True
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            # poll returns as soon as a record is readable; consume(n, 0) then takes what came
            # with it. (consume(n, timeout) alone waits out its timeout whenever fewer than n
            # came, which added up to that timeout to every latency.)
            first = self.consumer.poll(0.2)
            if first is None:
                continue
            messages = [first, *self.consumer.consume(10_000, 0)]
            now = time.time()
            for msg in messages:
                value = msg.value()
                if msg.error() is None and value is not None:
                    found = RATING_TIME.search(value) if self.timing else None
                    latency = int(now * 1000) - int(found.group(1)) if found is not None else None
                    self.samples.append((now, latency))
        self.consumer.close()


# A rating's JSON, by formatting: json.dumps of a dict took half of the producer's CPU. Every
# field is a number or one of the fixed strings below.
RATING_JSON = (
    '{"rating_id": %d, "user_id": %d, "stars": %d, "route_id": %d, "rating_time": %d, '
    '"channel": "%s", "message": "the train was on time"}'
)
CHANNELS = ("web", "iOS", "android")


def rating(rnd: random.Random, ids: list[int], rating_id: int, i: int, at_ms: int) -> tuple[bytes, bytes]:
    """A rating's key and value: a random known customer, or (one in 20) an unknown one."""
    user = rnd.choice(ids) if rnd.random() > 0.05 else 10_000_000 + i
    stars, route = rnd.randint(1, 5), rnd.randint(1, 50)
    value = RATING_JSON % (rating_id, user, stars, route, at_ms, rnd.choice(CHANNELS))
    return str(user).encode(), value.encode()


# How often the producer sends what has come due: a web site's many producers send all the time,
# so the topic sees a steady flow either way. Sleeping between single records instead cost this
# process a fifth of a core at 5,000/s (a wake-up per record) on the cores it measures.
PRODUCE_TICK_S = 0.005


def produce_ratings(producer: Producer, topic: str, ids: list[int], count: int, rate: float) -> None:
    """`count` ratings at `rate` per second, each stamped with its rating_time as it is sent:
    every PRODUCE_TICK_S, the ratings that have come due by then."""
    rnd = random.Random(3)
    started = time.monotonic()
    base = time.time_ns() // 1000
    i = 0
    while i < count:
        due = min(count, int((time.monotonic() - started) * rate) + 1)
        now_ms = int(time.time() * 1000)
        while i < due:
            _produce(producer, topic, *rating(rnd, ids, base + i, i, now_ms))
            i += 1
        producer.poll(0)
        if i < count:
            time.sleep(PRODUCE_TICK_S)
    producer.flush(60)


def produce_backlog(producer: Producer, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """Ready-made records as fast as the producer takes them."""
    for key, value in records:
        _produce(producer, topic, key, value)
    producer.flush(60)


def _produce(producer: Producer, topic: str, key: bytes, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, key=key, value=value)
            return
        except BufferError:
            producer.poll(0.01)


def fixed_rate(
    latencies: Latencies, producer: Producer, topic: str, ids: list[int], *, count: int, rate: float
) -> dict[str, Any]:
    """Produces `count` ratings at `rate`, waits for their enriched records: latency figures."""
    before = len(latencies.samples)
    t0 = time.time()
    produce_ratings(producer, topic, ids, count, rate)
    produced_s = time.time() - t0
    drained = wait_for(latencies, before + count, 300)
    done = latencies.samples[before : before + count]
    lat = [ms for _, ms in done if ms is not None]
    return {
        "target_per_s": rate,
        "produced_per_s": round(count / produced_s),
        "enriched": len(lat),
        "complete": drained,
        "p50_ms": percentile(lat, 0.5),
        "p99_ms": percentile(lat, 0.99),
        "max_ms": max(lat, default=None),
        "last_enriched_after_s": round(done[-1][0] - t0, 1) if done else None,
    }


# The job JVM's threads, by what they do (Linux thread names, 15 characters at most).
THREAD_GROUPS = (
    ("tasks", re.compile(r"^Executor task")),
    ("jit", re.compile(r"^C\d CompilerThre")),
    ("query", re.compile(r"^stream executio")),  # plans each batch, runs foreachBatch's calls
    ("gc", re.compile(r"^(GC Thread|G1 |GC |VM Thread|ParGC)")),
)


def _stat(entry: Path) -> tuple[str, list[str]] | None:
    """A process's or thread's name and the fields after it in /proc/.../stat (state first);
    None when it has ended."""
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return None
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def children(parent: int) -> dict[int, str]:
    """The processes `parent` started, by pid: their names."""
    found = {}
    for entry in Path("/proc").iterdir():
        stat = _stat(entry) if entry.name.isdigit() else None
        if stat is not None and int(stat[1][1]) == parent:
            found[int(entry.name)] = stat[0]
    return found


def job_jvm(job_pid: int) -> int | None:
    """The Spark JVM that the job's Python process started (its child named java)."""
    return next((pid for pid, name in children(job_pid).items() if name == "java"), None)


def thread_cpu_s(pid: int) -> dict[str, tuple[str, float]]:
    """CPU seconds so far of the process ("" key) and of each live thread (by thread id: its
    THREAD_GROUPS group, "other" for the rest)."""
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu_s(fields: list[str]) -> float:  # utime + stime
        return (int(fields[11]) + int(fields[12])) / ticks

    threads: dict[str, tuple[str, float]] = {}
    if (process := _stat(Path(f"/proc/{pid}"))) is not None:  # includes threads that ended
        threads[""] = ("total", cpu_s(process[1]))
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (stat := _stat(task)) is None:
            continue
        name, rest = stat
        group = next((g for g, pattern in THREAD_GROUPS if pattern.match(name)), "other")
        threads[task.name] = (group, cpu_s(rest))
    return threads


def runqueue_wait_s(pid: int) -> dict[str, float]:
    """Seconds each live thread of `pid` has spent runnable but not running so far (the
    scheduler's run queue, /proc/.../schedstat), by thread id: how long the cores were taken by
    others when the thread had work."""
    waits: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            waits[task.name] = int((task / "schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue
    return waits


def waited_per_s(before: dict[str, float], after: dict[str, float], seconds: float) -> float:
    """Run-queue seconds per second between two `runqueue_wait_s` readings (threads summed)."""
    return round(sum(w - before.get(tid, 0.0) for tid, w in after.items()) / seconds, 3)


def cores_used(
    before: dict[str, tuple[str, float]], after: dict[str, tuple[str, float]], seconds: float
) -> dict[str, float]:
    """Cores used between two `thread_cpu_s` readings, by group. Threads that ended between them
    (executor task threads come and go) show as "ended": the process's CPU less its live threads'."""
    groups: dict[str, float] = {}
    for tid, (group, cpu) in after.items():
        groups[group] = groups.get(group, 0.0) + cpu - before.get(tid, (group, 0.0))[1]
    groups["ended"] = max(0.0, groups.pop("total", 0.0) - sum(groups.values()))  # ticks round
    return {g: round(cpu / seconds, 2) for g, cpu in groups.items()}


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))]) if ordered else float("nan")


def wait_for(latencies: Latencies, count: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while len(latencies.samples) < count and time.monotonic() < deadline:
        time.sleep(0.5)
    return len(latencies.samples) >= count


# The topics a job of start_job's reads and writes, by role: `topics` maps each to a name.
JOB_TOPIC_ROLES = ("ratings", "enriched", "alerts", "dlq", "customers")


def start_job(
    env: dict[str, str],
    topics: dict[str, str],
    state: Path,
    grace_ms: int,
    log: Path,
    *,
    extra: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    job_env = {
        **os.environ,
        "ENRICH_BOOTSTRAP_SERVERS": env["KAFKA_BOOTSTRAP_SERVERS"],
        "ENRICH_SPARK_JARS": env["SPARK_JARS"],
        "JAVA_HOME": env["JAVA_HOME"],
        "ENRICH_STATE_DIR": str(state),
        "ENRICH_JOB_NAME": f"job-{topics['ratings']}",  # its own topics: its own name
        "ENRICH_GRACE_MS": str(grace_ms),
        "ENRICH_UI_ENABLED": "false",
        **{f"ENRICH_{role.upper()}_TOPIC": name for role, name in topics.items()},
        **(extra or {}),
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "enrichment_job"],
            env=job_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def placement(
    env: dict[str, str], state: Path, name: str, *, cluster: bool, s3_state: bool
) -> dict[str, str]:
    """The job's settings to run on the stack's Spark cluster and/or keep its state in S3 (its
    metrics file stays in `state`, where the benchmark reads it)."""
    extra: dict[str, str] = {}
    if cluster:
        try:
            extra |= spark_job_on_cluster(env)
        except ValueError as err:
            raise SystemExit(str(err)) from None
    if s3_state:
        extra |= spark_job_state_in_s3(env, f"bench/job-{name}")
        extra["ENRICH_METRICS_FILE"] = str(state / "metrics.json")
    return extra


def wait_caught_up(state: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the job exited with {proc.returncode}; see its log")
        path = state / "metrics.json"
        if path.exists():
            if caught_up(json.loads(path.read_text()), max_lag_ms=5000):
                return
        time.sleep(1)
    raise SystemExit("the job did not catch up with the CDC topic in time")


def main() -> int:  # noqa: PLR0915 - one benchmark, its phases in order
    exit_on_sigterm()
    parser = argparse.ArgumentParser(
        prog="make bench-job", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument(
        "--rate", type=float, default=5_000, help="ratings per second in the fixed-rate phase"
    )
    parser.add_argument("--duration", type=float, default=60, help="seconds of the fixed-rate phase")
    parser.add_argument(
        "--warmup",
        type=float,
        default=360,
        help="seconds at --rate before the measured phase (0: none); the JIT compiler settles in about 6 min",
    )
    parser.add_argument("--saturation", type=int, default=200_000, help="ratings in the saturation backlog")
    parser.add_argument("--updates-per-s", type=float, default=5)
    parser.add_argument("--grace-ms", type=int, default=0)
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="run the job on the stack's Spark standalone cluster (client mode) instead of local[2]",
    )
    parser.add_argument(
        "--s3-state", action="store_true", help="keep the job's state in the stack's S3 (s3a://), not on disk"
    )
    parser.add_argument(
        "--join-in",
        choices=("driver", "tasks"),
        default="driver",
        help="where the job joins (ENRICH_JOIN_IN): on the driver, or a Spark task per ratings partition",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "job.json")
    args = parser.parse_args()

    env = read_env_file(stack_env_path(StackSettings()))
    servers = env["KAFKA_BOOTSTRAP_SERVERS"]
    suffix = uuid.uuid4().hex[:8]
    topics = {role: f"bench-{role}-{suffix}" for role in JOB_TOPIC_ROLES}
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=4, replication_factor=1) for t in topics.values()]
    ).values():
        future.result(30)
    print(f"seeding {args.customers} customers ...", flush=True)
    ids = seed_customers(env, args.customers)
    state = args.out.parent / f"job-state-{suffix}"
    state.parent.mkdir(parents=True, exist_ok=True)
    log = state.with_suffix(".log")
    print(f"starting the job (log {log}) and waiting for it to load the customer table ...", flush=True)
    started = time.monotonic()
    extra = placement(env, state, suffix, cluster=args.cluster, s3_state=args.s3_state)
    extra["ENRICH_JOIN_IN"] = args.join_in
    proc = start_job(env, topics, state, args.grace_ms, log, extra=extra)
    stop = threading.Event()
    results: dict[str, Any] = {
        "customers": len(ids),
        "grace_ms": args.grace_ms,
        "machine_cores": os.cpu_count(),
        "master": extra.get("ENRICH_MASTER", "local[2]"),
        "state": extra.get("ENRICH_STATE_DIR", "local"),
        "join_in": args.join_in,
    }
    try:
        wait_caught_up(state, proc, 900)
        results["startup_s"] = round(time.monotonic() - started, 1)
        threading.Thread(
            target=trickle_updates, args=(env, ids, args.updates_per_s, stop), daemon=True
        ).start()
        latencies = Latencies(servers, topics["enriched"])
        latencies.start()
        producer = Producer({"bootstrap.servers": servers, "linger.ms": 5, "compression.type": "lz4"})

        # A cold job (JIT, first plans, a first large batch) is slower than one that has run a
        # while: the same rate first warms it up, reported apart.
        for phase, seconds in (("warm_up", args.warmup), ("fixed_rate", args.duration)):
            if seconds <= 0:
                continue
            count = int(args.rate * seconds)
            print(f"{phase}: {count} ratings at {args.rate:.0f}/s ...", flush=True)
            jvm = job_jvm(proc.pid)
            cpu_before, t0 = (thread_cpu_s(jvm) if jvm else {}), time.monotonic()
            results[phase] = fixed_rate(
                latencies, producer, topics["ratings"], ids, count=count, rate=args.rate
            )
            if jvm:  # where the job's CPU went, in cores: tasks, JIT compiler, query thread, GC
                results[phase]["job_jvm_cores"] = cores_used(
                    cpu_before, thread_cpu_s(jvm), time.monotonic() - t0
                )
            print(json.dumps(results[phase]), flush=True)

        print(f"saturation: a backlog of {args.saturation} ratings ...", flush=True)
        # Serialized beforehand, and counted without decoding: the job's throughput is measured,
        # not the Python client's JSON work, on the same two cores.
        rnd, base, now_ms = random.Random(5), time.time_ns() // 1000, int(time.time() * 1000)
        backlog = [rating(rnd, ids, base + i, i, now_ms) for i in range(args.saturation)]
        latencies.timing = False
        before = len(latencies.samples)
        t1 = time.time()
        produce_backlog(producer, topics["ratings"], backlog)
        produced_s = time.time() - t1
        drained = wait_for(latencies, before + args.saturation, 900)
        done = latencies.samples[before:]
        elapsed = (done[-1][0] - t1) if done else float("nan")
        results["saturation"] = {
            "backlog": args.saturation,
            "produced_in_s": round(produced_s, 1),
            "enriched": len(done),
            "complete": drained,
            "drain_s": round(elapsed, 1),
            "events_per_s": round(len(done) / elapsed) if done else 0,
        }
        print(json.dumps(results["saturation"]), flush=True)
        latencies.stop.set()
        metrics = json.loads((state / "metrics.json").read_text())
        results["last_batch_steps_s"] = metrics.get("enrichment", {}).get("steps_s")
    finally:
        stop.set()
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(120)
        admin.delete_topics(list(topics.values()))
    args.out.write_text(json.dumps(results, indent=2))
    print(f"results in {args.out}:\n{json.dumps(results, indent=2)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
