"""make bench-views: the materialized views under the enrichment job's load, as figures.

Against the running local stack, on topics of its own: seeds customers in the customer
database (MariaDB or PostgreSQL), starts the enrichment job (fresh state), the views job (two
processes of its own: customer_ratings in one, the windowed query (which finds the dead
letters) at a lower CPU weight in the other; one process with --one-views-process; inside the
enrichment job's application with --in-job) and the views query service, creates the views
declared in SQL (--sql-views, by default the three of views/examples: five views with the
built-in ones) with the CLI and waits until they are live, keeps a trickle of customer updates
going, then
0. warm-up: ratings at --rate per second for --warmup seconds (the JVMs compile Spark's planning
   code for their first minutes), reported apart;
1. measured: ratings at --rate per second for --duration seconds, while a second process (in C,
   pull.c; --pull-client python for infra.bench.pull) sends pull queries at --pull-rate per
   second (keys drawn at random over the --customers customers with the lowest ids: the table
   may hold more, seeded by another benchmark). Figures:
   the enrichment job's latency (rating produced -> enriched record readable, read_committed),
   the views' freshness (rating produced -> the customer_ratings row that counts it applied in
   the query service, read from its change stream by a third process), whether the views kept
   up, and the pull queries' rate and latency (client side). The two clients of the query
   service have sessions of their own, as clients on other machines would have their own cores;
   the query service's session has about nine times a session's CPU weight (--api-session-nice,
   -10), as an operator gives it on a host it shares with Spark jobs;
2. measured_pg: the same again, the pulls over the PostgreSQL wire protocol at --pg-pull-rate
   (infra.bench.pull --kind pg: `SELECT * FROM customer_ratings WHERE user_id = <id>`);
   measured_pg_extended (with --pg-extended-pull-rate): the same with the key as a parameter, over
   the extended query protocol as drivers send it (psycopg, JDBC, pgx; --kind pg-extended);
3. measured_scan: the same for --scan-duration, with range scans of 100 rows over HTTP at
   --scan-rate (`GET /views/customer_ratings?user_id.gte=<id>&limit=100`);
4. measured_hostile (--hostile): the HTTP pulls of the measured phase again, for --duration,
   while `infra.bench.hostile` holds 50 idle connections, 20 SSE subscribers of the whole
   customer_ratings view (5 of which never read) and one client sending a 10 MB URL slowly;
   what those clients saw, and the pulls' figures beside them;
5. restart: the query service stopped and started again; time from its start to /health 200,
   with the rows it then serves.
Each phase also gives the query service's largest resident memory (its processes together,
sampled every 0.2 s).
Prints the figures, and whether each Spark driver mapped its class archive or recorded it (a
first start with its jars and Java options, which costs CPU in the measured minute too), and
writes them as JSON (--out).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from infra.bench import hostile
from infra.bench.freshness import in_window
from infra.bench.job import (
    JOB_TOPIC_ROLES,
    Latencies,
    children,
    cores_used,
    fixed_rate,
    job_jvm,
    percentile,
    runqueue_wait_s,
    seed_customers,
    start_job,
    thread_cpu_s,
    trickle_updates,
    wait_caught_up,
    waited_per_s,
)
from infra.bench.memory import PeakRss
from infra.bench.results import exit_on_sigterm
from infra.demo.figures import read_json
from infra.demo.views import behind
from infra.stack.secrets import read_env_file
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.stack import stack_env_path

PORT = 8097  # not the demo's 8087: a demo may be running
PG_PORT = 6877  # nor its 6875
EXAMPLES = sorted((REPO_ROOT / "views" / "examples").glob("*.sql"))


def stop_follower(follower: subprocess.Popen[bytes], out: Path) -> list[list[int]]:
    """Stops the freshness follower; the samples it wrote, [arrived_ms, age_ms] each."""
    follower.send_signal(signal.SIGTERM)
    try:
        follower.wait(60)
    except subprocess.TimeoutExpired:
        follower.kill()
        raise SystemExit("the freshness follower did not stop within 60 s") from None
    samples: list[list[int]] = json.loads(out.read_text())["samples"]
    return samples


def http_get(port: int, path: str, timeout_s: float = 2) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, None
    except OSError:
        return 0, None


def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> float:
    """Seconds until /health answers 200."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"the query service exited with {proc.returncode}; see its log")
        if http_get(port, "/health", 1)[0] == 200:
            return time.monotonic() - started
        time.sleep(0.05)
    raise SystemExit(f"the query service was not healthy within {timeout_s} s")


def _child_running(parent: int, accept: Callable[[bytes], bool]) -> int | None:
    """The first child of `parent` whose command line `accept`s."""
    for pid in children(parent):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if accept(command):
            return pid
    return None


def changelog_process(api_pid: int) -> int | None:
    """The query service's changelog process (its child started by multiprocessing's spawn,
    not the resource tracker)."""
    return _child_running(api_pid, lambda c: b"spawn_main" in c and b"resource_tracker" not in c)


def background_views_process(views_pid: int) -> int | None:
    """The views job's second process (VIEWS_JOB_BACKGROUND_PROCESS): its child running the
    same module (not its Spark JVM)."""
    return _child_running(views_pid, lambda c: b"enrichment_job.views" in c)


def realtime(pid: int) -> None:
    """Every thread of `pid` on the real-time round-robin policy at its lowest priority: it runs
    as soon as it is ready, ahead of every ordinary thread (the kernel still keeps 5 % of each
    second for those)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setscheduler(int(task.name), os.SCHED_RR, os.sched_param(1))
        except PermissionError as err:
            raise SystemExit(f"real-time policy for {pid}: {err} (needs root or CAP_SYS_NICE)") from err
        except ProcessLookupError:
            continue


def session_nice(pid: int, nice: int | None, option: str) -> None:
    """Sets the CPU weight of `pid`'s session (its autogroup), when given (by `option`)."""
    if nice is None:
        return
    autogroup = Path(f"/proc/{pid}/autogroup")
    try:
        autogroup.write_text(str(nice))
    except OSError as err:
        raise SystemExit(f"{option} {nice}: cannot write {autogroup}: {err}") from err


PULL_C = Path(__file__).with_name("pull.c")


def pull_client(kind: str) -> list[str]:
    """The command of the pull client: `infra.bench.pull` on Python, or the same loop in C
    (`pull.c`, built with the system's C compiler into .state/bench on first use)."""
    if kind == "python":
        return [sys.executable, "-m", "infra.bench.pull"]
    built = REPO_ROOT / ".state" / "bench" / "pull"
    if not built.exists() or built.stat().st_mtime < PULL_C.stat().st_mtime:
        built.parent.mkdir(parents=True, exist_ok=True)
        compiler = os.environ.get("CC", "cc")
        partial = built.with_name(f"pull.{os.getpid()}")  # then renamed: no half-written program
        try:
            subprocess.run([compiler, "-O2", "-o", str(partial), str(PULL_C)], check=True)
        except (OSError, subprocess.CalledProcessError) as err:
            raise SystemExit(
                f"--pull-client c: cannot build {PULL_C} with {compiler} ({err}): install a C compiler "
                "(Debian: apt-get install gcc), set CC, or use --pull-client python"
            ) from err
        partial.replace(built)
    return [str(built)]


def spawn(module: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGINT) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, sig)
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def class_archives(metrics_files: list[Path]) -> list[str]:
    """How each Spark driver whose metrics file is among `metrics_files` started, as it says
    there: "mapped" (its class archive was there), "recording" (the first start with its jars
    and Java options: it records the archive as it runs, which costs CPU, and writes it at its
    stop) or "off"."""
    return [
        str(read_json(path).get("driver", {}).get("class_archive", "unknown"))
        for path in metrics_files
        if path.exists()
    ]


def views_lag(servers: str, enriched: str, port: int) -> int | None:
    """Enriched records the customer_ratings view has not reflected yet."""
    return (each_views_lag(servers, enriched, port) or {}).get("customer_ratings")


def each_views_lag(servers: str, enriched: str, port: int) -> dict[str, int] | None:
    """Enriched records each view has not reflected yet (the built-in ones and those in SQL)."""
    status, answer = http_get(port, "/views")
    if status != 200:
        return None
    return {v["name"]: behind(servers, enriched, v) for v in answer["views"]}


def create_sql_views(env: dict[str, str], files: list[Path], log: Path) -> dict[str, float]:
    """Each file created as users do (the CLI: a local Spark checks it, then the catalog takes
    it); seconds each create took."""
    took = {}
    for path in files:
        started = time.monotonic()
        with log.open("ab") as out:
            done = subprocess.run(
                [sys.executable, "-m", "enrichment_job.views", "create", str(path)],
                env={**os.environ, **env},
                stdout=out,
                stderr=out,
                check=False,
                timeout=600,
            )
        if done.returncode != 0:
            raise SystemExit(f"creating the view {path.name} failed: see {log}")
        took[path.stem] = round(time.monotonic() - started, 1)
    return took


def wait_views_live(port: int, names: list[str], timeout_s: float) -> float | None:
    """Seconds until every view in `names` says live in GET /views; None if not in time."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        status, answer = http_get(port, "/views")
        states = {v["name"]: v["state"] for v in answer["views"]} if status == 200 else {}
        if all(states.get(n) == "live" for n in names):
            return round(time.monotonic() - started, 1)
        time.sleep(1)
    return None


def _machine_s() -> tuple[float, float]:
    """CPU seconds all cores spent busy so far (not idle, not waiting for I/O), and of those the
    seconds the hypervisor ran something else on this machine's virtual cores ("steal")."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    tick_s = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - ticks[3] - ticks[4]) / tick_s, ticks[7] / tick_s


class Steal(threading.Thread):
    """Samples the host's steal every second: a virtual machine whose cores the host takes away
    at moments runs everything late then, whatever this machine's own load."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.worst_s, self._done = 0.0, threading.Event()

    def run(self) -> None:
        was = _machine_s()[1]
        while not self._done.wait(1.0):
            now = _machine_s()[1]
            self.worst_s, was = max(self.worst_s, now - was), now

    def stop(self) -> float:
        """The most cores stolen in any one second."""
        self._done.set()
        self.join()
        return round(self.worst_s, 2)


def topics_for(suffix: str) -> tuple[dict[str, str], dict[str, str]]:
    """The enrichment job's topics (role -> name) and the views' (role -> name)."""
    job = {role: f"bench-{role}-{suffix}" for role in JOB_TOPIC_ROLES}
    prefix = f"bench-view-{suffix}."
    views = {
        "prefix": prefix,
        "customer_ratings": f"{prefix}customer_ratings",
        "segment_hourly": f"{prefix}segment_hourly",
        "commits": f"bench-views-commits-{suffix}",
        "dlq": f"bench-views-dlq-{suffix}",
        "catalog": f"bench-views-catalog-{suffix}",
    }
    return job, views


def views_job_env(
    env: dict[str, str], job_topics: dict[str, str], views: dict[str, str], state: Path
) -> dict[str, str]:
    return {
        "VIEWS_JOB_BOOTSTRAP_SERVERS": env["KAFKA_BOOTSTRAP_SERVERS"],
        "VIEWS_JOB_SPARK_JARS": env["SPARK_JARS"],
        "JAVA_HOME": env["JAVA_HOME"],
        "VIEWS_JOB_STATE_DIR": str(state),
        "VIEWS_JOB_ENRICHED_TOPIC": job_topics["enriched"],
        "VIEWS_JOB_TOPIC_PREFIX": views["prefix"],
        "VIEWS_JOB_COMMITS_TOPIC": views["commits"],
        "VIEWS_JOB_DLQ_TOPIC": views["dlq"],
        "VIEWS_JOB_NAME": f"bench-{state.name}",
        "VIEWS_JOB_CATALOG_TOPIC": views["catalog"],
    }


def service_env(env: dict[str, str], views: dict[str, str], state: Path) -> dict[str, str]:
    return {
        "VIEWS_BOOTSTRAP_SERVERS": env["KAFKA_BOOTSTRAP_SERVERS"],
        "VIEWS_PORT": str(PORT),
        "VIEWS_STATE_DIR": str(state),
        "VIEWS_CHANGELOG_TOPICS": json.dumps([views["customer_ratings"], views["segment_hourly"]]),
        "VIEWS_COMMITS_TOPIC": views["commits"],
        "VIEWS_TOPIC_PREFIX": views["prefix"],  # the views declared in SQL too
        "VIEWS_PG_PORT": str(PG_PORT),
    }


def create_topics(servers: str, job: dict[str, str], views: dict[str, str]) -> list[str]:
    compact = {"cleanup.policy": "compact"}
    new = [NewTopic(t, num_partitions=4, replication_factor=1) for t in job.values()]
    new += [
        NewTopic(views["customer_ratings"], num_partitions=4, replication_factor=1, config=compact),
        NewTopic(views["segment_hourly"], num_partitions=1, replication_factor=1, config=compact),
        NewTopic(views["commits"], num_partitions=1, replication_factor=1, config=compact),
        NewTopic(views["dlq"], num_partitions=1, replication_factor=1),
        NewTopic(views["catalog"], num_partitions=1, replication_factor=1, config=compact),
    ]
    admin = AdminClient({"bootstrap.servers": servers})  # kept until every future is done
    for future in admin.create_topics(new).values():
        future.result(30)
    return [t.topic for t in new]


def wait_views_caught_up(servers: str, enriched: str, port: int, timeout_s: float) -> float | None:
    """Seconds until customer_ratings reflects every enriched record there is now; None if not in time."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if views_lag(servers, enriched, port) == 0:
            return round(time.monotonic() - started, 1)
        time.sleep(0.5)
    return None


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="make bench-views", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=5_000, help="ratings per second")
    parser.add_argument(
        "--warmup", type=float, default=360, help="seconds at --rate before the measured phase"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=180,
        help="seconds of the measured phase (a minute of pulls gave a p99 anywhere from 12 to 26 ms "
        "with the same code: too small a sample of the tail)",
    )
    parser.add_argument("--pull-rate", type=float, default=1_000, help="pull queries per second (0: none)")
    parser.add_argument(
        "--pull-client",
        choices=("c", "python"),
        default="c",
        help="the pull client: an open loop in C (pull.c, built with the system's C compiler on first "
        "use) or the same in Python (infra.bench.pull, about twice the CPU a pull): on this machine the "
        "client shares the cores it measures, and its own wait for one is part of every latency",
    )
    parser.add_argument("--in-job", action="store_true", help="run the views inside the enrichment job")
    parser.add_argument(
        "--one-views-process",
        dest="split_views",
        action="store_false",
        help="the views job as one process; by default it runs as two (VIEWS_JOB_BACKGROUND_PROCESS): "
        "customer_ratings in one, the windowed query (it finds the dead letters) in the other, whose "
        "session has a nice of --background-session-nice",
    )
    parser.add_argument(
        "--background-session-nice",
        type=int,
        default=10,
        help="VIEWS_JOB_BACKGROUND_NICE: the nice of the second views process and its session",
    )
    parser.add_argument(
        "--api-session-nice",
        type=int,
        default=-10,
        help="the query service's CPU weight, as the nice of its session (Linux autogroup: each "
        "program here has a session of its own, and the scheduler shares the cores between "
        "sessions); -10 gives it about nine times a session's weight, as the CPU weight an "
        "operator gives it beside Spark jobs (below 0 needs root; 0: the same weight as the rest)",
    )
    parser.add_argument(
        "--client-session-nice",
        type=int,
        default=-10,
        help="the pull client's CPU weight, as --api-session-nice: the load generator stands for "
        "applications on other machines, so its latencies should carry little of its own wait for "
        "a core here (0: the same weight as the rest, its wait in every pull's time)",
    )
    parser.add_argument(
        "--api-realtime",
        action="store_true",
        help="the query service's server process (not its changelog process) on the real-time "
        "round-robin policy, as a core of its own would serve it (needs root or CAP_SYS_NICE)",
    )
    parser.add_argument(
        "--client-realtime",
        action="store_true",
        help="the pull client on the real-time round-robin policy too: its latencies then leave out "
        "its own wait for a core, which a client on another machine would not share",
    )
    parser.add_argument(
        "--sql-views",
        type=Path,
        nargs="*",
        default=EXAMPLES,
        help="views declared in SQL, created (with the CLI) beside the built-in ones before the "
        "warm-up; default: views/examples/*.sql",
    )
    parser.add_argument(
        "--pg-pull-rate",
        type=float,
        default=1_000,
        help="a phase of --duration after the measured one: the same pulls over the PostgreSQL wire "
        "protocol (infra.bench.pull --kind pg) at this rate (0: none)",
    )
    parser.add_argument(
        "--pg-extended-pull-rate",
        type=float,
        default=0,
        help="a phase of --duration after measured_pg: the pulls with the key as a parameter, over the "
        "extended query protocol as drivers send it (infra.bench.pull --kind pg-extended) at this rate "
        "(0: none)",
    )
    parser.add_argument(
        "--scan-rate",
        type=float,
        default=50,
        help="then a phase of --scan-duration: range scans of 100 rows over HTTP at this rate (0: none)",
    )
    parser.add_argument("--scan-duration", type=float, default=60)
    parser.add_argument(
        "--hostile",
        action="store_true",
        help="a last phase of --duration: the HTTP pulls again beside hostile clients (infra.bench.hostile)",
    )
    parser.add_argument("--updates-per-s", type=float, default=5)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "views.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0912, PLR0915 - one benchmark, its phases in order
    exit_on_sigterm()
    args = parse(argv)
    # Built before anything starts: a missing compiler stops the benchmark at once, and the build
    # does not take the cores while the jobs start.
    pull_command = pull_client(args.pull_client) if args.pull_rate > 0 else []
    if http_get(PORT, "/health", 1)[0] != 0:
        raise SystemExit(f"port {PORT} answers already (a query service left running?): stop it first")
    env = read_env_file(stack_env_path(StackSettings()))
    servers = env["KAFKA_BOOTSTRAP_SERVERS"]
    suffix = uuid.uuid4().hex[:8]
    job_topics, view_topics = topics_for(suffix)
    created = create_topics(servers, job_topics, view_topics)
    print(f"seeding {args.customers} customers ...", flush=True)
    ids = seed_customers(env, args.customers)
    work = args.out.parent / f"views-{suffix}"
    work.mkdir(parents=True)
    (work / "ids.json").write_text(json.dumps(ids))
    views_env = views_job_env(env, job_topics, view_topics, work / "views")
    job_extra = {"ENRICH_VIEWS_IN_JOB": "true", **views_env} if args.in_job else {}
    results: dict[str, Any] = {
        "customers": len(ids),
        "views_in_job": args.in_job,
        "split_views": args.split_views and not args.in_job,
        "rate": args.rate,
        "api_session_nice": args.api_session_nice,
        "client_session_nice": args.client_session_nice,
        "api_realtime": args.api_realtime,
        "client_realtime": args.client_realtime,
        "pull_client": args.pull_client,
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    follower: subprocess.Popen[bytes] | None = None
    stop_trickle = threading.Event()
    try:
        print(f"starting the enrichment job (logs in {work}) ...", flush=True)
        procs["job"] = start_job(env, job_topics, work / "job", 0, work / "job.log", extra=job_extra)
        wait_caught_up(work / "job", procs["job"], 900)
        background_pid = None
        if args.split_views and not args.in_job:
            split_env = {
                **views_env,
                "VIEWS_JOB_BACKGROUND_PROCESS": "true",
                "VIEWS_JOB_BACKGROUND_NICE": str(args.background_session_nice),
            }
            procs["views"] = spawn("enrichment_job.views", split_env, work / "views.log")
            deadline = time.monotonic() + 60
            while (background_pid := background_views_process(procs["views"].pid)) is None:
                if time.monotonic() > deadline or procs["views"].poll() is not None:
                    raise SystemExit(f"the views job started no second process: see {work / 'views.log'}")
                time.sleep(0.2)
        elif not args.in_job:
            procs["views"] = spawn("enrichment_job.views", views_env, work / "views.log")
        api_env = service_env(env, view_topics, work / "api")
        procs["api"] = spawn("services.views", api_env, work / "api.log")
        session_nice(procs["api"].pid, args.api_session_nice, "--api-session-nice")
        wait_healthy(PORT, procs["api"], 300)
        if args.api_realtime:
            realtime(procs["api"].pid)
        # The freshness follower and the pull client are processes with sessions of their own,
        # as clients on other machines would be: in the benchmark's session they would wait for
        # a core behind its producer and latency reader, and their figures would carry that wait.
        fresh_out = work / "freshness.json"
        follower = subprocess.Popen(
            [sys.executable, "-m", "infra.bench.freshness", "--port", str(PORT), "--out", str(fresh_out)],
            start_new_session=True,
        )
        threading.Thread(
            target=trickle_updates, args=(env, ids, args.updates_per_s, stop_trickle), daemon=True
        ).start()
        latencies = Latencies(servers, job_topics["enriched"])
        latencies.start()
        producer = Producer({"bootstrap.servers": servers, "linger.ms": 5, "compression.type": "lz4"})
        if args.sql_views and not args.in_job:
            print(f"creating {len(args.sql_views)} views declared in SQL ...", flush=True)
            names = [path.stem for path in args.sql_views]
            results["sql_views"] = {
                "create_s": create_sql_views(views_env, args.sql_views, work / "views-cli.log"),
                "all_live_after_s": wait_views_live(PORT, names, 600),
            }
            print(json.dumps(results["sql_views"]), flush=True)
        pg_client = [sys.executable, "-m", "infra.bench.pull", "--kind", "pg", "--port", str(PG_PORT)]
        driver_client = [*pg_client[:4], "pg-extended", *pg_client[5:]]
        scan_client = [sys.executable, "-m", "infra.bench.pull", "--kind", "scan", "--port", str(PORT)]
        phases: tuple[tuple[str, float, list[str], float], ...] = (
            ("warm_up", args.warmup, [], 0.0),
            ("measured", args.duration, [*pull_command, "--port", str(PORT)], args.pull_rate),
            ("measured_pg", args.duration if args.pg_pull_rate > 0 else 0, pg_client, args.pg_pull_rate),
            (
                "measured_pg_extended",
                args.duration if args.pg_extended_pull_rate > 0 else 0,
                driver_client,
                args.pg_extended_pull_rate,
            ),
            ("measured_scan", args.scan_duration if args.scan_rate > 0 else 0, scan_client, args.scan_rate),
            (
                "measured_hostile",
                args.duration if args.hostile else 0,
                [*pull_command, "--port", str(PORT)],
                args.pull_rate,
            ),
        )
        for phase, seconds, client, client_rate in phases:
            if seconds <= 0:
                continue
            print(f"{phase}: {int(args.rate * seconds)} ratings at {args.rate:.0f}/s ...", flush=True)
            measured = phase == "measured"
            pull = None
            if client and client_rate > 0:
                pull = subprocess.Popen(
                    [
                        *client,
                        "--ids",
                        str(work / "ids.json"),
                        "--rate",
                        str(client_rate),
                        "--duration",
                        str(seconds),
                    ],
                    stdout=subprocess.PIPE,
                    start_new_session=True,
                )
                session_nice(pull.pid, args.client_session_nice, "--client-session-nice")
                if args.client_realtime:
                    realtime(pull.pid)
            clients = None
            if phase == "measured_hostile":
                clients = hostile.start(PORT, seconds, start_new_session=True)
                session_nice(clients.pid, args.client_session_nice, "--client-session-nice")
            api_memory = PeakRss(procs["api"].pid)
            top = {name: proc.pid for name, proc in procs.items()}
            if background_pid is not None:
                top["views_background"] = background_pid
            jvms: dict[str, int] = {
                name: pid
                for name in ("job", "views", "views_background")
                if name in top and (pid := job_jvm(top[name]))
            }
            cpu_before = {name: thread_cpu_s(pid) for name, pid in jvms.items()}
            pythons = {f"{name}_python": pid for name, pid in top.items()}
            if follower.poll() is None:  # it follows until the first measured phase ends
                pythons["freshness_client"] = follower.pid
            if "api" in procs and (changelog := changelog_process(procs["api"].pid)):
                pythons["api_changelog"] = changelog
            python_before = {name: thread_cpu_s(pid) for name, pid in pythons.items()}
            watched: dict[str, int] = {**jvms, **pythons, "bench_python": os.getpid()}
            waits_before = {name: runqueue_wait_s(pid) for name, pid in watched.items()}
            (machine_before, stolen_before), bench_before = _machine_s(), time.process_time()
            steal = Steal()
            steal.start()
            t0, window_start_ms = time.monotonic(), int(time.time() * 1000)
            figures = fixed_rate(
                latencies,
                producer,
                job_topics["ratings"],
                ids,
                count=int(args.rate * seconds),
                rate=args.rate,
            )
            figures["views_lag_at_end"] = each_views_lag(servers, job_topics["enriched"], PORT)
            figures["views_caught_up_after_s"] = wait_views_caught_up(
                servers, job_topics["enriched"], PORT, 120
            )
            window_end_ms = int(time.time() * 1000)
            elapsed = time.monotonic() - t0
            figures["jvm_cores"] = {
                name: cores_used(before, thread_cpu_s(jvms[name]), elapsed)
                for name, before in cpu_before.items()
            }
            # Where the two cores went: each process of the pipeline, and the machine as a whole
            # (the rest is the broker, Connect, Elasticsearch and this benchmark's own clients).
            machine_after, stolen_after = _machine_s()
            machine = (machine_after - machine_before) / elapsed
            processes = {
                **{name: round(sum(groups.values()), 2) for name, groups in figures["jvm_cores"].items()},
                **{
                    name: round(sum(cores_used(before, thread_cpu_s(pythons[name]), elapsed).values()), 2)
                    for name, before in python_before.items()
                },
            }
            # This benchmark's own clients run on the same cores: its producer, the latency
            # consumer and the change follower in this process, the pull client in its own.
            processes["bench_python"] = round((time.process_time() - bench_before) / elapsed, 2)
            # Seconds per second each process's threads were ready to run but waited for a core;
            # the query service's event loop (its main thread) alone, since it answers the pulls.
            waits_after = {name: runqueue_wait_s(pid) for name, pid in watched.items()}
            figures["runqueue_wait_per_s"] = {
                name: waited_per_s(was, waits_after[name], elapsed) for name, was in waits_before.items()
            }
            if "api_python" in watched:
                loop = str(watched["api_python"])
                figures["runqueue_wait_per_s"]["api_event_loop"] = waited_per_s(
                    {loop: waits_before["api_python"].get(loop, 0.0)},
                    {loop: waits_after["api_python"].get(loop, 0.0)},
                    elapsed,
                )
            if pull is not None:
                out, _ = pull.communicate(timeout=seconds + 300)
                figures["pull"] = json.loads(out.decode().strip().splitlines()[-1])
                processes["pull_client"] = round(figures["pull"]["cpu_s"] / elapsed, 2)
                figures["runqueue_wait_per_s"]["pull_client"] = round(
                    figures["pull"]["runqueue_wait_s"] / elapsed, 3
                )
            if clients is not None:
                figures["hostile"] = hostile.seen(clients, seconds + 60)
            figures["api_rss_mb_max"] = api_memory.stop()
            figures["cores"] = {
                **processes,
                "machine": round(machine, 2),
                # of "machine", the cores the hypervisor took: on average, and in the worst second
                "stolen": round((stolen_after - stolen_before) / elapsed, 2),
                "stolen_worst_second": steal.stop(),
            }
            if measured:
                fresh = in_window(stop_follower(follower, fresh_out), window_start_ms, window_end_ms)
                figures["freshness"] = {
                    "changes": len(fresh),
                    "p50_ms": percentile(fresh, 0.5),
                    "p99_ms": percentile(fresh, 0.99),
                    "max_ms": max(fresh, default=None),
                }
            results[phase] = figures
            print(json.dumps(figures), flush=True)

        # A first start records the drivers' class archives, and its figures carry that cost.
        results["class_archives"] = {
            "job": class_archives([work / "job" / "metrics.json"]),
            "views": class_archives(
                [work / "views" / "metrics.json", work / "views" / "background" / "metrics.json"]
            ),
        }
        print(f"class archives: {json.dumps(results['class_archives'])}", flush=True)
        print("restart: the query service stopped and started again ...", flush=True)
        stop(procs.pop("api"), signal.SIGTERM)
        procs["api"] = spawn("services.views", api_env, work / "api.log")
        session_nice(procs["api"].pid, args.api_session_nice, "--api-session-nice")
        restart_s = wait_healthy(PORT, procs["api"], 300)
        status, answer = http_get(PORT, "/views")
        rows = {v["name"]: v["rows"] for v in answer["views"]} if status == 200 else {}
        results["restart"] = {"to_healthy_s": round(restart_s, 2), "rows": rows}
        print(json.dumps(results["restart"]), flush=True)
        latencies.stop.set()
    finally:
        stop_trickle.set()
        if follower is not None and follower.poll() is None:
            follower.kill()
        stop_all(procs, servers, created, view_topics["prefix"])
    write_results(args.out, results)
    return 0


def stop_all(
    procs: dict[str, subprocess.Popen[bytes]], servers: str, created: list[str], prefix: str
) -> None:
    """Stops the benchmark's programs (the query service with SIGTERM, the Spark jobs with
    SIGINT) and deletes its topics: those it created, and the views' (`prefix`) the views job made."""
    for name, proc in procs.items():
        stop(proc, signal.SIGTERM if name == "api" else signal.SIGINT)
    admin = AdminClient({"bootstrap.servers": servers})
    views = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
    for future in admin.delete_topics(sorted({*created, *views})).values():
        future.result(30)


def write_results(out: Path, results: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"results in {out}:\n{json.dumps(results, indent=2)}")


if __name__ == "__main__":
    sys.exit(main())
