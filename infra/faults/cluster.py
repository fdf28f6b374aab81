"""What the fault matrix does to the enrichment job's executors when the join runs in tasks on
the stack's Spark cluster (`--join-in tasks`): it finds each executor's JVM and the Python
workers under it, tells a worker that is running a task from one waiting for its next, freezes
and thaws processes, and counts the job's task attempts from Spark's REST API.

A Python worker that runs no task waits for the next one on its socket to the executor: its
main thread sits in read(2) or recvfrom(2); one that has done its task writes the outcome
back with write(2) or sendto(2). Any other place (on the CPU, in a futex wait for librdkafka's
answer to a commit, in poll(2)) is inside a task, and a task holds its partition's Kafka
transaction open from the first record it produces to its commit.
"""

import contextlib
import os
import re
import signal
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.stack.health import http_json

EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
PYTHON_DAEMON = "pyspark.daemon"
# x86_64 system call numbers of a worker waiting for its next task, read(2) and recvfrom(2), or
# writing its last one's outcome back, write(2) and sendto(2).
WAITING_SYSCALLS = {"0", "45", "1", "44"}
PROC = Path("/proc")

# With the join in tasks (--join-in tasks): the job's Spark UI, for its task attempts, and how
# soon the driver gives up on an executor that stopped answering (Spark's default is 120 s).
TASKS_UI_PORT = 4047
TASKS_SPARK_CONF = {
    "spark.ui.port": str(TASKS_UI_PORT),
    "spark.network.timeout": "30s",
    "spark.network.timeoutInterval": "5s",  # how often the driver looks for silent executors
    "spark.executor.heartbeatInterval": "3s",
}
# Forced speculation: a copy of a task that runs twice as long as the median of its stage's
# finished half, and at least a second, starts on another host's executor.
SPECULATION_CONF = {
    "spark.speculation": "true",
    "spark.speculation.interval": "200ms",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "2",
    "spark.speculation.minTaskRuntime": "1s",
}


def submit_args(conf: dict[str, str]) -> str:
    """PYSPARK_SUBMIT_ARGS that give a PySpark program these Spark settings."""
    return " ".join(f"--conf {k}={v}" for k, v in conf.items()) + " pyspark-shell"


@dataclass(frozen=True)
class Executor:
    """One executor of the job: its JVM, and the Python daemon and workers it started."""

    executor_id: str
    host: str
    pid: int
    daemon: int | None
    workers: tuple[int, ...]

    @property
    def pids(self) -> tuple[int, ...]:
        return (self.pid, *((self.daemon,) if self.daemon else ()), *self.workers)


def _cmdline(pid: int) -> list[str]:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    found = []
    for task in (PROC / str(pid) / "task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _arg(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1] if name in argv[:-1] else ""


def executors() -> list[Executor]:
    """The executors of the newest application on this machine's cluster (during the matrix,
    the job's: a killed job's executors may linger while their worker ends them), by id."""
    found: list[tuple[str, Executor]] = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        argv = _cmdline(int(entry.name))
        if EXECUTOR_MAIN not in argv:
            continue
        pid = int(entry.name)
        daemons = [c for c in _children(pid) if PYTHON_DAEMON in " ".join(_cmdline(c))]
        daemon = daemons[0] if daemons else None
        workers = tuple(_children(daemon)) if daemon else ()
        executor = Executor(_arg(argv, "--executor-id"), _arg(argv, "--hostname"), pid, daemon, workers)
        found.append((_arg(argv, "--app-id"), executor))
    newest = max((app for app, _ in found), default="")  # app-<yyyyMMddHHmmss>-<seq>
    mine = [e for app, e in found if app == newest]
    return sorted(mine, key=lambda e: (len(e.executor_id), e.executor_id))


def exists(pid: int) -> bool:
    """Whether the process is there and not a zombie (ended, not yet reaped)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def in_task(pid: int) -> bool:
    """Whether a Python worker is running a task (see the module's doc); False once it is gone."""
    try:
        call = (PROC / str(pid) / "syscall").read_text().split()
    except OSError:
        return False
    return bool(call) and call[0] not in WAITING_SYSCALLS


def worker_in_task(timeout_s: float, executor_id: str | None = None) -> tuple[Executor, int] | None:
    """A Python worker (of `executor_id`, or of any executor) caught running a task, and its
    executor; None when none was within the time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for executor in executors():
            if executor_id is not None and executor.executor_id != executor_id:
                continue
            for pid in executor.workers:
                if in_task(pid):
                    return executor, pid
        time.sleep(0.002)
    return None


def all_waiting(found: list[Executor]) -> bool:
    """Whether no Python worker of these executors is running a task."""
    return all(not in_task(pid) for e in found for pid in e.workers)


def signal_all(pids: tuple[int, ...], sig: signal.Signals) -> list[int]:
    """`sig` to each process still there; the ones it reached."""
    reached = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            reached.append(pid)
    return reached


def task_attempts(ui_url: str) -> Counter[str]:
    """The job's task attempts so far, from Spark's REST API: all of them, the speculative
    ones, and by status (SUCCESS, FAILED, KILLED)."""
    counts: Counter[str] = Counter()
    apps = _get(f"{ui_url}/api/v1/applications")
    if not apps:
        return counts
    app = apps[0]["id"]
    for stage in _get(f"{ui_url}/api/v1/applications/{app}/stages?details=true&status=complete") or []:
        for task in (stage.get("tasks") or {}).values():
            counts["attempts"] += 1
            counts[str(task.get("status", "?"))] += 1
            if task.get("speculative"):
                counts["speculative"] += 1
    return counts


@dataclass(frozen=True)
class Batches:
    """The job's batches as its driver's Spark jobs show them: how many jobs run now, and the
    newest batch whose join job succeeded (None before the first)."""

    running: int
    done: int | None


_BATCH_JOB = re.compile(r"^batch (\d+): ")


def batches(ui_url: str) -> Batches | None:
    """The driver's jobs (its REST API), None when it does not answer. Only the driver can
    tell a Python worker loading its executor's copy of the customer table, in read(2) inside
    a task, from one waiting for its next; and a job just submitted shows a moment later."""
    apps = _get(f"{ui_url}/api/v1/applications")
    if not apps:
        return None
    jobs = _get(f"{ui_url}/api/v1/applications/{apps[0]['id']}/jobs")
    if jobs is None:
        return None
    running = sum(1 for job in jobs if job.get("status") == "RUNNING")
    done = [
        int(m.group(1))
        for job in jobs
        if job.get("status") == "SUCCEEDED" and (m := _BATCH_JOB.match(str(job.get("description", ""))))
    ]
    return Batches(running, max(done, default=None))


def _get(url: str) -> list[dict[str, Any]] | None:
    try:
        data = http_json("GET", url, timeout=10)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, list) else None
