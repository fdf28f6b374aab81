"""make bench-scale: how the enrichment job grows with executors, on one machine, with CPU caps.

A Spark standalone cluster of the stack's own make (master and workers from the pyspark package,
as `make up` starts them, on ports of its own, as the stack's user when run as root, with the
executors' Python `make up` builds for it) runs 1, 2 and then 3 workers. Each worker, and so
every executor and Python worker it starts, is in a cgroup v1 `cpu` group of its own, capped at
--cap of a core (cpu.cfs_quota_us), with a `cpuacct` group beside it for its CPU time. The job
runs on that cluster with ENRICH_JOIN_IN=tasks (a Spark task per ratings partition) and reads a
preloaded backlog of --n ratings of known customers (a topic of --partitions partitions) from a
fresh start. The figures: the steady rate over the middle 80 % of the backlog, the rate per
executor and the ratio to one executor, and the CPU seconds per 100,000 ratings of the driver
(the job's process tree), of each executor group and of the Kafka broker.

The reference is the Kafka Streams application of infra/bench/kstreams run the same way: 1 and
then 3 instances of one application, one stream thread each, each instance in its own group
capped at --cap.

A run is void, and the table says so, when the machine had no idle CPU left over the measured
window (under --void-idle cores on average): then the uncapped processes (driver, broker) were
short of CPU and the capped groups are not what limited the rate.
"""

import argparse
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from enrichment_job.settings import JobSettings
from infra.bench import peer
from infra.bench.job import produce_backlog, seed_customers, start_job
from infra.bench.results import exit_on_sigterm
from infra.bench.versus import Arrivals, create, known_ratings, output_topics, stop, tree_cpu_s
from infra.stack.components import Component, executor_python_path, spark_cluster, spark_conf_dir
from infra.stack.health import http_json
from infra.stack.secrets import read_env_file
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.stack import private_state, stack_env_path

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
CGROUP_ACCT = Path("/sys/fs/cgroup/cpuacct")
PERIOD_US = 100_000
MASTER_PORT, UI_PORT = 7177, 8190  # beside the stack's own cluster (7077, 8090)


@dataclass
class Group:
    """A cgroup v1 `cpu` group capped at `cap` of a core, and a `cpuacct` group of the same name."""

    name: str
    cap: float

    def create(self) -> "Group":
        for root in (CGROUP_CPU, CGROUP_ACCT):
            (root / self.name).mkdir(exist_ok=True)
        (CGROUP_CPU / self.name / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (CGROUP_CPU / self.name / "cpu.cfs_quota_us").write_text(str(int(self.cap * PERIOD_US)))
        (CGROUP_ACCT / self.name / "cpuacct.usage").write_text("0")
        return self

    def add(self, pid: int) -> None:
        """Moves `pid` into the group; what it starts from now on is in the group too."""
        for root in (CGROUP_CPU, CGROUP_ACCT):
            (root / self.name / "cgroup.procs").write_text(str(pid))

    def cpu_s(self) -> float:
        return int((CGROUP_ACCT / self.name / "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        for root in (CGROUP_CPU, CGROUP_ACCT):
            group = root / self.name
            if group.exists():
                for pid in (group / "cgroup.procs").read_text().split():
                    (root / "cgroup.procs").write_text(pid)  # back to the root group
                group.rmdir()


def check_cgroups() -> None:
    if not (CGROUP_CPU / "cpu.cfs_quota_us").exists() or not (CGROUP_ACCT / "cpuacct.usage").exists():
        raise SystemExit(
            "bench-scale needs cgroup v1's cpu and cpuacct controllers at /sys/fs/cgroup/cpu and"
            " /sys/fs/cgroup/cpuacct, writable (run as root)"
        )


def machine_busy_s() -> tuple[float, float]:
    """(busy CPU seconds, idle CPU seconds) of the whole machine so far, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / ticks, idle / ticks


def broker_pid() -> int | None:
    """The Kafka broker's process (its main class on the command line)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"kafka.Kafka\x00" in cmdline:
                return int(entry.name)
    return None


class Cluster:
    """A standalone master and workers built as the stack builds its own, in `work` (its logs);
    run as root, they run as the stack's user from a service folder of their own, removed at
    `stop`."""

    def __init__(self, java_home: str, work: Path, workers: int, cap: float) -> None:
        settings = StackSettings(
            state_dir=work,
            spark_cluster=True,
            spark_master_port=MASTER_PORT,
            spark_ui_port=UI_PORT,
            spark_workers=workers,
            spark_worker_cores=1,
        )
        private_state(settings)
        self.service_dir = settings.service_state_dir
        self.components = spark_cluster(settings, Path(java_home), secrets.token_urlsafe(24))
        self.conf_dir = str(spark_conf_dir(settings))
        self.executor_python = executor_python_path(settings)  # empty: the job's own interpreter
        self.groups = [Group(f"ratings-bench-worker-{i}", cap).create() for i in range(1, workers + 1)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.work = work
        self.url = f"spark://127.0.0.1:{MASTER_PORT}"

    def _start(self, component: Component) -> subprocess.Popen[bytes]:
        log = (self.work / f"{component.name}.log").open("ab")
        user = pwd.getpwnam(component.user) if component.user else None
        proc = subprocess.Popen(
            component.command,
            cwd=component.directory,
            env={**os.environ, **component.environment},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            user=None if user is None else user.pw_uid,
            group=None if user is None else user.pw_gid,
            extra_groups=None if user is None else [],
        )
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        master, *workers = self.components
        self._start(master)
        time.sleep(3)
        for group, worker in zip(self.groups, workers, strict=True):
            group.add(self._start(worker).pid)
        self._wait_workers(len(workers))

    def _wait_workers(self, count: int) -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                workers = http_json("GET", f"http://127.0.0.1:{UI_PORT}/json/", timeout=2).get("workers", [])
                if sum(w.get("state") == "ALIVE" for w in workers) >= count:
                    return
            except OSError:
                pass
            time.sleep(1)
        raise SystemExit(f"the benchmark's Spark cluster did not get {count} workers; see {self.work}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
        for group in self.groups:
            group.remove()
        if self.service_dir != self.work:
            shutil.rmtree(self.service_dir, ignore_errors=True)


class Window:
    """CPU use over the steady window: from the record that reached 10 % of the backlog to the
    one that reached 90 %. Sampled by the caller at both ends."""

    def __init__(self, groups: list[Group], driver: int | None, broker: int | None) -> None:
        self.groups, self.driver, self.broker = groups, driver, broker
        self.start: dict[str, float] | None = None
        self.end: dict[str, float] | None = None

    def sample(self) -> dict[str, float]:
        busy, idle = machine_busy_s()
        out = {"time": time.time(), "busy": busy, "idle": idle}
        out |= {g.name: g.cpu_s() for g in self.groups}
        if self.driver is not None:
            out["driver"] = tree_cpu_s(self.driver)
        if self.broker is not None:
            out["broker"] = tree_cpu_s(self.broker)
        return out


def measure(
    arrivals: Arrivals, window: Window, n: int, timeout_s: float, procs: list[subprocess.Popen[bytes]]
) -> dict[str, Any]:
    """Waits for the backlog, sampling CPU at 10 % and 90 % of it: the rate and CPU figures."""
    low, high = int(0.1 * n), int(0.9 * n)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(proc.poll() is not None for proc in procs):
            print("  an engine process exited; see its log in the work folder", flush=True)
            break
        seen = len(arrivals.seen)
        if window.start is None and seen >= low:
            window.start = window.sample()
        if window.end is None and seen >= high:
            window.end = window.sample()
            break
        time.sleep(0.05)
    if window.start is None or window.end is None:
        return {"complete": False, "enriched": len(arrivals.seen)}
    a, b = window.start, window.end
    seconds = arrivals.seen[high - 1] - arrivals.seen[low]
    records = high - low
    per_100k = 100_000 / records

    def cpu(key: str) -> float:
        return round((b[key] - a[key]) * per_100k, 2)

    idle_cores = (b["idle"] - a["idle"]) / (b["time"] - a["time"])
    return {
        "complete": True,
        "rate_per_s": round(records / seconds),
        "window_s": round(seconds, 1),
        "cpu_s_per_100k": {
            **({"driver": cpu("driver")} if "driver" in a else {}),
            **{g.name.rsplit("-", 1)[-1]: cpu(g.name) for g in window.groups},
            **({"broker": cpu("broker")} if "broker" in a else {}),
        },
        "machine_idle_cores": round(idle_cores, 2),
    }


def run_job(
    env: dict[str, str], work: Path, backlog: str, *, workers: int, cap: float, n: int, partitions: int
) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"]})
    cluster = Cluster(env["JAVA_HOME"], work / f"cluster-{workers}", workers, cap)
    topics = {"ratings": backlog, **output_topics(admin, f"scale{workers}", partitions)}
    arrivals = Arrivals(env["KAFKA_BOOTSTRAP_SERVERS"], topics["enriched"], timing=False)
    try:
        cluster.start()
        arrivals.start()
        state = work / f"job-{workers}"
        state.mkdir()
        extra = {
            "ENRICH_MASTER": cluster.url,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_CONF_DIR": cluster.conf_dir,
            "ENRICH_JOIN_IN": "tasks",
            "ENRICH_MIN_EXECUTORS": str(workers),  # as on any cluster: start with all of them
            "ENRICH_EXECUTOR_PYTHON": cluster.executor_python,
            "ENRICH_JOB_NAME": f"scale-{workers}-{uuid.uuid4().hex[:8]}",  # reads the backlog anew
        }
        proc = start_job(env, topics, state, 0, state.with_suffix(".log"), extra=extra)
        try:
            window = Window(cluster.groups, proc.pid, broker_pid())
            figures = measure(arrivals, window, n, 1800, [proc])
        finally:
            stop(proc, "job")
    finally:
        arrivals.stop.set()
        cluster.stop()
        admin.delete_topics(list(topics.values())[1:])
    return figures


def run_peer(
    env: dict[str, str],
    work: Path,
    backlog: str,
    *,
    classpath: str,
    instances: int,
    cap: float,
    n: int,
    partitions: int,
) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"]})
    topics = {"ratings": backlog, **output_topics(admin, f"scalepeer{instances}", partitions)}
    arrivals = Arrivals(env["KAFKA_BOOTSTRAP_SERVERS"], topics["enriched"], timing=False)
    groups = [Group(f"ratings-bench-peer-{i}", cap).create() for i in range(1, instances + 1)]
    app = f"scale-peer-{uuid.uuid4().hex[:8]}"
    procs = []
    try:
        arrivals.start()
        for i, group in enumerate(groups, 1):
            state = work / f"peer-{instances}-{i}"
            state.mkdir()
            proc = peer.start(
                classpath,
                env["JAVA_HOME"],
                servers=env["KAFKA_BOOTSTRAP_SERVERS"],
                topics=topics,
                cdc_topic=JobSettings.model_fields["cdc_topic"].default,
                app_id=app,
                state_dir=state,
                log=state.with_suffix(".log"),
                threads=1,
            )
            group.add(proc.pid)
            procs.append(proc)
        window = Window(groups, None, broker_pid())
        figures = measure(arrivals, window, n, 1800, procs)
    finally:
        for proc in procs:
            stop(proc, "peer")
        arrivals.stop.set()
        for group in groups:
            group.remove()
        admin.delete_topics(list(topics.values())[1:])
    return figures


def summary(runs: dict[str, dict[str, Any]], void_idle: float) -> dict[str, Any]:
    rates = {k: r.get("rate_per_s") for k, r in runs.items()}
    first = rates.get(min(runs, key=int)) if runs else None
    last = rates.get(max(runs, key=int)) if runs else None
    return {
        "rate_per_s": rates,
        "rate_per_executor": {k: round(v / int(k)) if v else None for k, v in rates.items()},
        f"ratio_{max(runs, key=int)}_over_{min(runs, key=int)}" if runs else "ratio": (
            round(last / first, 2) if first and last else None
        ),
        "runs": runs,
        "void": [k for k, r in runs.items() if r.get("machine_idle_cores", 1.0) < void_idle],
    }


def print_table(results: dict[str, Any]) -> None:
    for engine, label, unit in (
        ("job", "the job (join in tasks)", "executors"),
        ("peer", "Kafka Streams", "instances"),
    ):
        part = results.get(engine)
        if not part:
            continue
        print(f"\n{label}, each of the {unit} capped at {results['cap']} of a core:")
        print(
            f"{unit:>10}  {'rate/s':>8}  {'per one':>8}  {'CPU s per 100k (driver, each, broker)':<44}  idle"
        )
        for k, run in part["runs"].items():
            if not run.get("complete"):
                print(f"{k:>10}  incomplete ({run.get('enriched')} enriched)")
                continue
            cpu = run["cpu_s_per_100k"]
            void = "  VOID: machine saturated" if k in part["void"] else ""
            cpus = ", ".join(f"{name} {value}" for name, value in cpu.items())
            print(
                f"{k:>10}  {run['rate_per_s']:>8,}  {part['rate_per_executor'][k]:>8,}  {cpus:<44}"
                f"  {run['machine_idle_cores']}{void}"
            )
        ratio = next((v for key, v in part.items() if key.startswith("ratio")), None)
        print(f"  ratio, most over fewest: {ratio}")


def main() -> int:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(
        prog="make bench-scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 3], help="cluster sizes, in order")
    parser.add_argument("--peer-instances", type=int, nargs="*", default=[1, 3], help="reference sizes")
    parser.add_argument("--cap", type=float, default=0.3, help="cores each worker (or instance) may use")
    parser.add_argument("--n", type=int, default=1_000_000, help="ratings in the backlog")
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=12, help="partitions of the backlog topic")
    parser.add_argument("--void-idle", type=float, default=0.05, help="idle cores under which a run is void")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "scale.json")
    args = parser.parse_args()
    check_cgroups()

    env = read_env_file(stack_env_path(StackSettings()))
    admin = AdminClient({"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"]})
    print(f"seeding {args.customers} customers ...", flush=True)
    ids = seed_customers(env, args.customers)
    classpath = ""
    if args.peer_instances:
        print("building the Kafka Streams reference ...", flush=True)
        classpath = peer.build()
    backlog = f"scale-ratings-{uuid.uuid4().hex[:8]}"
    create(admin, [backlog], args.partitions)
    print(f"producing {args.n:,} ratings into {backlog} ({args.partitions} partitions) ...", flush=True)
    producer = Producer(
        {"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"], "linger.ms": 20, "compression.type": "lz4"}
    )
    produce_backlog(producer, backlog, known_ratings(ids, args.n))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="scale-", dir=args.out.parent))
    results: dict[str, Any] = {
        "n": args.n,
        "customers": len(ids),
        "cap": args.cap,
        "partitions": args.partitions,
        "machine_cores": os.cpu_count(),
    }
    sizes = {"job": args.workers, "peer": args.peer_instances}
    try:
        for engine, label, unit in (("job", "job", "worker(s)"), ("peer", "Kafka Streams", "instance(s)")):
            runs = {}
            for size in sizes[engine]:
                print(f"{label}: {size} {unit} at {args.cap} of a core each ...", flush=True)
                common = {"cap": args.cap, "n": args.n, "partitions": args.partitions}
                runs[str(size)] = (
                    run_job(env, work, backlog, workers=size, **common)
                    if engine == "job"
                    else run_peer(env, work, backlog, classpath=classpath, instances=size, **common)
                )
                print(json.dumps(runs[str(size)]), flush=True)
            if runs:
                results[engine] = summary(runs, args.void_idle)
    finally:
        admin.delete_topics([backlog])
    args.out.write_text(json.dumps(results, indent=2))
    print_table(results)
    print(f"\nresults in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
