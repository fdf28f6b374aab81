"""make bench-versus: the enrichment job beside a Kafka Streams application doing the same join
(infra/bench/kstreams, exactly-once v2, the customer table loaded before the first rating), on the
running local stack, one engine at a time, each from a fresh start (new state, new outputs).

throughput: --n ratings of known customers are produced once into a fresh topic laid out like
  `ratings` (infra/kafka/topics.txt), before either engine starts. Each engine then reads them all
  from offset 0. From the engine's process start: the time to its first enriched record readable
  with read_committed, the time to all N, and the steady rate over the middle 80 % (from the
  record that reached 10 % of N to the one that reached 90 %). Then the outputs are checked: N
  distinct ratings, how many matched, how many alerts.
latency: per engine a fresh ratings topic; the engine starts and loads the table, then ratings
  come at --rate for --latency-s seconds with 5 customer updates a second; latency is the time
  from a rating's production to its enriched record being readable. The first minute is
  reported apart from the rest.

Both engines as the README tells users to run them: the job with its defaults (local[2], a 500 ms
trigger, ENRICH_GRACE_MS=0 so that neither holds ratings back); the reference with a 500 ms commit
interval and --peer-threads stream threads (2: the job's two cores).
"""

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from enrichment_job.settings import JobSettings
from infra.bench import peer
from infra.bench.job import (
    CHANNELS,
    RATING_JSON,
    RATING_TIME,
    committed_reader,
    percentile,
    produce_backlog,
    produce_ratings,
    seed_customers,
    start_job,
    trickle_updates,
    wait_caught_up,
)
from infra.bench.results import exit_on_sigterm
from infra.stack.secrets import read_env_file
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.stack import stack_env_path

RATING_ID = re.compile(rb'"rating_id":\s*(\d+)')
MATCHED = re.compile(rb'"customer_matched":\s*true')
ENGINES = ("job", "peer")


class Arrivals(threading.Thread):
    """Reads an output topic with read_committed: per record, when it became readable, its
    rating_id, whether it matched, and (when `timing`) now - rating_time in ms."""

    def __init__(self, servers: str, topic: str, *, timing: bool) -> None:
        super().__init__(daemon=True)
        self.consumer = committed_reader(servers, topic)
        self.timing = timing
        self.seen: list[float] = []
        self.ids: set[int] = set()
        self.matched = 0
        self.latency_ms: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            first = self.consumer.poll(0.2)
            if first is None:
                continue
            now = time.time()
            for msg in (first, *self.consumer.consume(10_000, 0)):
                value = msg.value()
                if msg.error() is not None or value is None:
                    continue
                self.seen.append(now)
                if (found := RATING_ID.search(value)) is not None:
                    self.ids.add(int(found.group(1)))
                self.matched += MATCHED.search(value) is not None
                if self.timing and (at := RATING_TIME.search(value)) is not None:
                    self.latency_ms.append((now, int(now * 1000) - int(at.group(1))))
        self.consumer.close()

    def wait(self, count: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
        """Until `count` records came (True), the time is up or `proc` ended (False)."""
        deadline = time.monotonic() + timeout_s
        while len(self.seen) < count and time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                print(f"  the engine exited with {proc.returncode}; see its log", flush=True)
                break
            time.sleep(0.2)
        return len(self.seen) >= count


def count_records(servers: str, topic: str) -> int:
    """Records readable with read_committed in `topic` now (the engine stopped)."""
    reader = Arrivals(servers, topic, timing=False)
    reader.start()
    idle_since = time.monotonic()
    last = -1
    while time.monotonic() - idle_since < 5:
        if len(reader.seen) != last:
            last, idle_since = len(reader.seen), time.monotonic()
        time.sleep(0.5)
    reader.stop.set()
    reader.join(10)
    return len(reader.seen)


def tree_cpu_s(root: int) -> float:
    """CPU seconds of `root` and every process under it (user + system), while they live."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total


class Engines:
    """Starts either engine fresh against the stack: new state, new application id, its own
    output topics."""

    def __init__(self, env: dict[str, str], work: Path, peer_threads: int) -> None:
        self.env = env
        self.servers = env["KAFKA_BOOTSTRAP_SERVERS"]
        self.work = work
        self.peer_threads = peer_threads
        self.classpath = peer.build()
        self.cdc_topic = JobSettings.model_fields["cdc_topic"].default

    def start(self, engine: str, topics: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
        run = self.work / f"{engine}-{uuid.uuid4().hex[:8]}"
        run.mkdir(parents=True)
        log = run.with_suffix(".log")
        if engine == "job":
            return start_job(self.env, topics, run, 0, log), run
        proc = peer.start(
            self.classpath,
            self.env["JAVA_HOME"],
            servers=self.servers,
            topics=topics,
            cdc_topic=self.cdc_topic,
            app_id=f"versus-{run.name}",
            state_dir=run,
            log=log,
            threads=self.peer_threads,
        )
        return proc, run

    def wait_ready(self, engine: str, proc: subprocess.Popen[bytes], run: Path) -> None:
        if engine == "job":
            wait_caught_up(run, proc, 900)
        else:
            peer.wait_running(proc, run.with_suffix(".log"), 900)


def stop(proc: subprocess.Popen[bytes], engine: str) -> None:
    """The job stops on SIGINT (finishing its batch), the reference on SIGTERM (committing)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT if engine == "job" else signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def output_topics(admin: AdminClient, label: str, partitions: int) -> dict[str, str]:
    suffix = f"{label}-{uuid.uuid4().hex[:8]}"
    topics = {role: f"versus-{role}-{suffix}" for role in ("enriched", "alerts", "dlq", "customers")}
    create(admin, topics.values(), partitions)
    return topics


def create(admin: AdminClient, names: Any, partitions: int) -> None:
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in names]
    ).values():
        future.result(30)


def throughput(
    engines: Engines, admin: AdminClient, *, ratings_topic: str, engine: str, n: int, partitions: int
) -> dict[str, Any]:
    topics = {"ratings": ratings_topic, **output_topics(admin, engine, partitions)}
    reader = Arrivals(engines.servers, topics["enriched"], timing=False)
    reader.start()
    t0 = time.time()
    proc, _run = engines.start(engine, topics)
    try:
        complete = reader.wait(n, 900, proc)
        cpu_s = tree_cpu_s(proc.pid)
    finally:
        stop(proc, engine)
        reader.stop.set()
    seen = reader.seen
    low, high = (
        seen[int(0.1 * n)] if len(seen) > n // 10 else None,
        seen[int(0.9 * n) - 1] if complete else None,
    )
    steady = (int(0.9 * n) - int(0.1 * n)) / (high - low) if low and high and high > low else None
    alerts = count_records(engines.servers, topics["alerts"])
    admin.delete_topics(list(topics.values())[1:])
    return {
        "first_output_s": round(seen[0] - t0, 2) if seen else None,
        "all_n_s": round(seen[n - 1] - t0, 2) if complete else None,
        "steady_per_s": round(steady) if steady else None,
        "cpu_s": round(cpu_s, 1),
        "enriched": len(seen),
        "distinct_ratings": len(reader.ids),
        "matched": reader.matched,
        "alerts": alerts,
        "complete": complete,
    }


def latency(
    engines: Engines,
    admin: AdminClient,
    *,
    ids: list[int],
    engine: str,
    rate: float,
    seconds: float,
    partitions: int,
) -> dict[str, Any]:
    topics = {
        "ratings": f"versus-ratings-lat-{uuid.uuid4().hex[:8]}",
        **output_topics(admin, engine, partitions),
    }
    create(admin, [topics["ratings"]], partitions)
    proc, run = engines.start(engine, topics)
    updates = threading.Event()
    try:
        engines.wait_ready(engine, proc, run)
        threading.Thread(target=trickle_updates, args=(engines.env, ids, 5, updates), daemon=True).start()
        reader = Arrivals(engines.servers, topics["enriched"], timing=True)
        reader.start()
        producer = Producer({"bootstrap.servers": engines.servers, "linger.ms": 5, "compression.type": "lz4"})
        t0 = time.time()
        count = int(rate * seconds)
        produce_ratings(producer, topics["ratings"], ids, count, rate)
        complete = reader.wait(count, 300, proc)
        reader.stop.set()
    finally:
        updates.set()
        stop(proc, engine)
    admin.delete_topics(list(topics.values()))
    first = [ms for at, ms in reader.latency_ms if at - t0 < 60]
    rest = [ms for at, ms in reader.latency_ms if at - t0 >= 60]
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "complete": complete,
        "first_minute": {"p50_ms": percentile(first, 0.5), "p99_ms": percentile(first, 0.99)},
        "after_first_minute": {"p50_ms": percentile(rest, 0.5), "p99_ms": percentile(rest, 0.99)},
        "all": {
            "p50_ms": percentile([ms for _, ms in reader.latency_ms], 0.5),
            "p99_ms": percentile([ms for _, ms in reader.latency_ms], 0.99),
        },
    }


def known_ratings(ids: list[int], n: int) -> list[tuple[bytes, bytes]]:
    """`n` ratings of known customers (neither engine holds or dead-letters any), keyed by
    user_id as the load generator keys them."""
    rnd, base, now_ms = random.Random(7), time.time_ns() // 1000, int(time.time() * 1000)
    out = []
    for i in range(n):
        user = rnd.choice(ids)
        value = RATING_JSON % (
            base + i,
            user,
            rnd.randint(1, 5),
            rnd.randint(1, 50),
            now_ms,
            rnd.choice(CHANNELS),
        )
        out.append((str(user).encode(), value.encode()))
    return out


def ratings_partitions() -> int:
    for line in (REPO_ROOT / "infra" / "kafka" / "topics.txt").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "ratings":
            return int(parts[1])
    raise SystemExit("infra/kafka/topics.txt declares no ratings topic")


def ratio(job: float | None, other: float | None) -> float | None:
    return round(job / other, 2) if job and other else None


def table(results: dict[str, Any]) -> str:
    """The side-by-side figures: job, reference, job / reference."""
    rows = []
    th = results.get("throughput", {})
    if th:
        for label, key in (
            ("first output after a fresh start (s)", "first_output_s"),
            (f"all {results['n']:,} enriched (s)", "all_n_s"),
            ("steady rate, middle 80 % (/s)", "steady_per_s"),
            ("CPU in total (s)", "cpu_s"),
        ):
            rows.append((label, th["job"][key], th["peer"][key], ratio(th["job"][key], th["peer"][key])))
    lat = results.get("latency", {})
    if lat:
        for label, phase in (
            ("p99, first minute (ms)", "first_minute"),
            ("p99 after it (ms)", "after_first_minute"),
        ):
            j, p = lat["job"][phase]["p99_ms"], lat["peer"][phase]["p99_ms"]
            rows.append((f"{label} at {lat['job']['rate_per_s']:,.0f}/s", j, p, ratio(j, p)))
    width = max(len(r[0]) for r in rows) if rows else 10
    lines = [f"{'figure':<{width}}  {'job':>10}  {'Kafka Streams':>13}  {'job/KS':>6}"]
    lines += [f"{a:<{width}}  {b!s:>10}  {c!s:>13}  {d!s:>6}" for a, b, c, d in rows]
    return "\n".join(lines)


def main() -> int:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(
        prog="make bench-versus", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--n", type=int, default=300_000, help="ratings in the throughput backlog")
    parser.add_argument("--rate", type=float, default=5_000, help="ratings per second in the latency run")
    parser.add_argument("--latency-s", type=float, default=120, help="seconds of the latency run (0: none)")
    parser.add_argument(
        "--peer-threads", type=int, default=2, help="stream threads of the Kafka Streams reference"
    )
    parser.add_argument(
        "--engines", nargs="+", choices=ENGINES, default=list(ENGINES), help="which, in this order"
    )
    parser.add_argument("--settle-s", type=float, default=10, help="pause between engines")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "versus.json")
    args = parser.parse_args()

    env = read_env_file(stack_env_path(StackSettings()))
    admin = AdminClient({"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"]})
    partitions = ratings_partitions()
    print(f"seeding {args.customers} customers ...", flush=True)
    ids = seed_customers(env, args.customers)
    print("building the Kafka Streams reference ...", flush=True)
    work = Path(tempfile.mkdtemp(prefix="versus-", dir=args.out.parent if args.out.parent.exists() else None))
    engines = Engines(env, work, args.peer_threads)
    results: dict[str, Any] = {
        "n": args.n,
        "customers": len(ids),
        "machine_cores": os.cpu_count(),
        "ratings_partitions": partitions,
        "peer_threads": args.peer_threads,
    }

    ratings_topic = f"versus-ratings-{uuid.uuid4().hex[:8]}"
    create(admin, [ratings_topic], partitions)
    print(f"producing {args.n:,} ratings into {ratings_topic} ...", flush=True)
    producer = Producer(
        {"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"], "linger.ms": 5, "compression.type": "lz4"}
    )
    produce_backlog(producer, ratings_topic, known_ratings(ids, args.n))
    results["throughput"] = {}
    for engine in args.engines:
        time.sleep(args.settle_s)
        print(f"throughput: {engine} from a fresh start ...", flush=True)
        results["throughput"][engine] = throughput(
            engines, admin, ratings_topic=ratings_topic, engine=engine, n=args.n, partitions=partitions
        )
        print(json.dumps(results["throughput"][engine]), flush=True)
    admin.delete_topics([ratings_topic])
    if args.latency_s > 0:
        results["latency"] = {}
        for engine in args.engines:
            time.sleep(args.settle_s)
            print(f"latency: {engine}, {args.rate:.0f}/s for {args.latency_s:.0f} s ...", flush=True)
            results["latency"][engine] = latency(
                engines,
                admin,
                ids=ids,
                engine=engine,
                rate=args.rate,
                seconds=args.latency_s,
                partitions=partitions,
            )
            print(json.dumps(results["latency"][engine]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    if set(args.engines) == set(ENGINES):
        print(table(results))
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
