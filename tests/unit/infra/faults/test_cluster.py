"""How the fault matrix finds the job's executors and tells a Python worker in a task from one
waiting for its next, read from a /proc tree laid out as Linux lays it out; and which rows a
matrix with the join in tasks or on the driver runs."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from infra.faults import cluster
from infra.faults.__main__ import parse
from infra.faults.scenarios import SCENARIOS, speculative_args


def _process(
    proc: Path, pid: int, argv: list[str], children: tuple[int, ...] = (), syscall: str = "0 0x3"
) -> None:
    (proc / str(pid) / "task" / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")
    (proc / str(pid) / "task" / str(pid) / "children").write_text(" ".join(map(str, children)))
    (proc / str(pid) / "syscall").write_text(syscall + " 0x0 0x0\n")


@pytest.fixture
def proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(cluster, "PROC", tmp_path)
    (tmp_path / "self").mkdir()  # not a process directory
    executor = ["java", "-cp", "x", cluster.EXECUTOR_MAIN, "--driver-url", "spark://d", "--app-id"]
    now, before = "app-20261202080449-0003", "app-20261202075012-0002"
    _process(tmp_path, 100, [*executor, now, "--executor-id", "1", "--hostname", "127.0.0.2"], (101, 150))
    _process(tmp_path, 101, ["python", "-m", "pyspark.daemon", "pyspark.worker"], (102, 103))
    _process(tmp_path, 102, ["python", "-m", "pyspark.daemon", "pyspark.worker"], syscall="0 0x5")  # waits
    _process(
        tmp_path, 103, ["python", "-m", "pyspark.daemon", "pyspark.worker"], syscall="202 0x7f"
    )  # commits
    _process(tmp_path, 150, ["sh", "-c", "true"])  # another child of the executor
    _process(
        tmp_path, 200, [*executor, now, "--executor-id", "0", "--hostname", "127.0.0.1"]
    )  # no Python yet
    # A killed driver's executor, not ended by its worker yet.
    _process(tmp_path, 250, [*executor, before, "--executor-id", "1", "--hostname", "127.0.0.2"])
    _process(tmp_path, 300, ["java", "org.apache.spark.deploy.worker.Worker"], (100,))
    return tmp_path


def test_each_executor_of_the_newest_application_is_found_with_its_python_daemon_and_workers(
    proc: Path,
) -> None:
    assert cluster.executors() == [
        cluster.Executor("0", "127.0.0.1", 200, None, ()),
        cluster.Executor("1", "127.0.0.2", 100, 101, (102, 103)),
    ]
    assert cluster.executors()[1].pids == (100, 101, 102, 103)


def test_a_worker_in_a_task_is_told_from_one_waiting_for_its_next_or_writing_its_outcome(proc: Path) -> None:
    assert not cluster.in_task(102)  # read(2) on its socket to the executor
    assert cluster.in_task(103)  # futex(2): waiting on librdkafka
    (proc / "102" / "syscall").write_text("running\n")
    assert cluster.in_task(102)
    (proc / "102" / "syscall").write_text("1 0x5 0x7f 0x10\n")  # write(2): its outcome
    assert not cluster.in_task(102)
    assert not cluster.in_task(999)  # gone
    found = cluster.worker_in_task(1.0)
    assert found is not None and found[1] == 103 and found[0].executor_id == "1"
    assert cluster.worker_in_task(0.05, executor_id="0") is None
    assert not cluster.all_waiting(cluster.executors())
    (proc / "103" / "syscall").write_text("45 0x5\n")
    assert cluster.all_waiting(cluster.executors())


def test_the_rows_of_a_cluster_s_own_faults_run_only_with_the_join_in_tasks() -> None:
    tasks_only = {s.name for s in SCENARIOS if "driver" not in s.join_in}
    assert tasks_only == {"python-worker-kill", "driver-kill-after-cdc", "executor-freeze", "speculation"}
    assert parse([]).join_in == "driver"
    assert parse(["--join-in", "tasks", "--only", "speculation"]).join_in == "tasks"
    with pytest.raises(SystemExit):
        parse(["--join-in", "executors"])


def test_spark_settings_reach_pyspark_as_submit_arguments() -> None:
    assert (
        cluster.submit_args({"spark.a": "1", "spark.b": "2s"})
        == "--conf spark.a=1 --conf spark.b=2s pyspark-shell"
    )
    args = speculative_args()
    assert "--conf spark.speculation=true" in args and args.endswith(" pyspark-shell")
    assert all(
        f"--conf {k}={v}" in args for k, v in {**cluster.TASKS_SPARK_CONF, **cluster.SPECULATION_CONF}.items()
    )


class _SparkRest(BaseHTTPRequestHandler):
    """Answers like a driver's REST API: one application, with `jobs` (newest first)."""

    jobs: ClassVar[list[dict[str, object]]] = []

    def do_GET(self) -> None:
        app = "app-20261202080449-0003"
        if self.path == "/api/v1/applications":
            body: object = [{"id": app}]
        elif self.path == f"/api/v1/applications/{app}/jobs":
            body = self.jobs
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def spark_ui() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SparkRest)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _job(job_id: int, status: str, description: str | None = None) -> dict[str, object]:
    job: dict[str, object] = {"jobId": job_id, "name": "collect at launch.py:150", "status": status}
    if description is not None:
        job["description"] = description
    return job


def test_the_driver_tells_which_batch_s_tasks_all_ran_and_whether_a_job_runs(spark_ui: str) -> None:
    _SparkRest.jobs = [
        _job(9, "RUNNING", "batch 189: the join, 4 ratings partitions"),
        _job(8, "SUCCEEDED", "batch 188: the join, 4 ratings partitions"),
        _job(7, "FAILED", "batch 190: the join, 4 ratings partitions"),  # a replaced run's
        _job(6, "SUCCEEDED"),  # no batch of the join
    ]
    assert cluster.batches(spark_ui) == cluster.Batches(running=1, done=188)
    _SparkRest.jobs = [_job(6, "SUCCEEDED")]
    assert cluster.batches(spark_ui) == cluster.Batches(running=0, done=None)
    assert cluster.batches("http://127.0.0.1:9") is None  # nothing listens: not "nothing runs"
