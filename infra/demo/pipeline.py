"""The demo's processes: the enrichment job, the views job, the four services and the load
generator, each a child in its own process group with its log under <state>/demo/logs, all
configured from the stack's client settings (<state>/stack.env)."""

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from enrichment_job.runtime.cli import CONFIG_EXIT, FENCED_EXIT
from infra.stack.secrets import read_env_file
from infra.stack.settings import StackSettings
from infra.stack.stack import stack_env_path

log = logging.getLogger("demo")


@dataclass(frozen=True)
class DemoPaths:
    root: Path

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def metrics(self, name: str) -> Path:
        return self.root / "metrics" / f"{name}.json"

    @property
    def job_state(self) -> Path:
        return self.root / "enrichment"

    @property
    def slack_state(self) -> Path:
        return self.root / "slack-notifier"

    @property
    def views_state(self) -> Path:
        return self.root / "views"

    @property
    def views_api_state(self) -> Path:
        return self.root / "views-api"


VIEWS_PORT = 8087
# Where each program serves Prometheus metrics in the demo (the views service: on VIEWS_PORT).
METRICS_PORTS = {"enrichment": 9461, "views": 9462, "slack_notifier": 9463, "es_sink": 9464, "s3_sink": 9465}
SPARK_JOBS = ("enrichment", "views")  # they stop their queries on SIGINT; the services on SIGTERM


def without_endpoint(env: dict[str, str]) -> dict[str, str]:
    """The settings that turn a program's Prometheus endpoint off: for a second instance of it,
    which would find the first one's port taken."""
    return {k: "0" for k in env if k.endswith("_METRICS_PORT")}


def service_envs(stack: dict[str, str], paths: DemoPaths) -> dict[str, dict[str, str]]:
    """Each process's environment: the stack's addresses and credentials under its own prefix."""
    kafka = stack["KAFKA_BOOTSTRAP_SERVERS"]
    return {
        "enrichment": {
            "ENRICH_BOOTSTRAP_SERVERS": kafka,
            "ENRICH_SPARK_JARS": stack["SPARK_JARS"],
            "ENRICH_STATE_DIR": str(paths.job_state),
            "ENRICH_UI_ENABLED": "false",
            "ENRICH_METRICS_PORT": str(METRICS_PORTS["enrichment"]),
            "JAVA_HOME": stack["JAVA_HOME"],
        },
        "views": {
            "VIEWS_JOB_BOOTSTRAP_SERVERS": kafka,
            "VIEWS_JOB_SPARK_JARS": stack["SPARK_JARS"],
            "VIEWS_JOB_STATE_DIR": str(paths.views_state),
            "VIEWS_JOB_METRICS_PORT": str(METRICS_PORTS["views"]),
            "JAVA_HOME": stack["JAVA_HOME"],
        },
        "views_api": {
            "VIEWS_BOOTSTRAP_SERVERS": kafka,
            "VIEWS_STATE_DIR": str(paths.views_api_state),
            "VIEWS_PORT": str(VIEWS_PORT),
        },
        "slack_notifier": {
            "SLACK_BOOTSTRAP_SERVERS": kafka,
            "SLACK_VIEWS_URL": f"http://127.0.0.1:{VIEWS_PORT}",
            "SLACK_STATE_DIR": str(paths.slack_state),
            "SLACK_METRICS_FILE": str(paths.metrics("slack_notifier")),
            "SLACK_METRICS_INTERVAL_S": "1",
            "SLACK_METRICS_PORT": str(METRICS_PORTS["slack_notifier"]),
        },
        "es_sink": {
            "ES_SINK_BOOTSTRAP_SERVERS": kafka,
            "ES_SINK_URL": stack["ELASTICSEARCH_URL"],
            "ES_SINK_METRICS_FILE": str(paths.metrics("es_sink")),
            "ES_SINK_METRICS_INTERVAL_S": "1",
            "ES_SINK_METRICS_PORT": str(METRICS_PORTS["es_sink"]),
        },
        "s3_sink": {
            "S3_SINK_BOOTSTRAP_SERVERS": kafka,
            "S3_SINK_ENDPOINT_URL": stack["S3_ENDPOINT_URL"],
            "S3_SINK_REGION": stack["S3_REGION"],
            "S3_SINK_BUCKET": stack["S3_BUCKET"],
            "S3_SINK_ACCESS_KEY": stack["S3_ACCESS_KEY"],
            "S3_SINK_SECRET_KEY": stack["S3_SECRET_KEY"],
            "S3_SINK_BATCH_MAX_WAIT_MS": "5000",
            "S3_SINK_METRICS_FILE": str(paths.metrics("s3_sink")),
            "S3_SINK_METRICS_INTERVAL_S": "1",
            "S3_SINK_METRICS_PORT": str(METRICS_PORTS["s3_sink"]),
        },
        "loadgen": {
            "LOADGEN_BOOTSTRAP_SERVERS": kafka,
            "LOADGEN_DB_KIND": stack.get("CUSTOMER_DB", "mariadb"),
            "LOADGEN_DB_HOST": stack.get("CUSTOMER_DB_HOST", stack["MARIADB_HOST"]),
            "LOADGEN_DB_PORT": stack.get("CUSTOMER_DB_PORT", stack["MARIADB_PORT"]),
            "LOADGEN_DB_NAME": stack.get("CUSTOMER_DB_NAME", stack["MARIADB_DATABASE"]),
            "LOADGEN_DB_USER": stack["APP_DB_USER"],
            "LOADGEN_DB_PASSWORD": stack["APP_DB_PASSWORD"],
            "LOADGEN_METRICS_FILE": str(paths.metrics("loadgen")),
        },
    }


def running_stack() -> tuple[dict[str, str], Path]:
    """How clients reach the running stack (what `make up` wrote) and the folder it sits in;
    exits 2 with the command to run when the stack is not up."""
    env_path = stack_env_path(StackSettings())
    if not env_path.exists():
        print(f"error: the local stack is not up ({env_path} is missing): run `make up`", file=sys.stderr)
        sys.exit(2)
    return read_env_file(env_path), env_path.parent


MODULES = {
    "enrichment": "enrichment_job",
    "views": "enrichment_job.views",
    "views_api": "services.views",
    "slack_notifier": "services.slack_notifier",
    "es_sink": "services.es_sink",
    "s3_sink": "services.s3_sink",
    "loadgen": "services.loadgen",
}


# Exit codes after which a restart cannot help: a bad setting, or the job fenced by another
# instance of its name (restarting it would fence that one in turn).
NO_RESTART = {CONFIG_EXIT: "a bad setting", FENCED_EXIT: "another instance of the job took over"}
BACKOFF_FIRST_S, BACKOFF_MAX_S, STEADY_S = 1.0, 30.0, 60.0


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    args: tuple[str, ...] = ()
    module: str = ""
    started: float = field(default_factory=time.monotonic)
    restarts: int = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Pipeline:
    """Starts children and stops every one of them, whatever happens (Ctrl-C included)."""

    paths: DemoPaths
    envs: dict[str, dict[str, str]]
    children: dict[str, Child] = field(default_factory=dict)
    _backoff: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (delay, due)

    def start(self, name: str, args: tuple[str, ...] = (), module: str | None = None) -> Child:
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        logfile = self.paths.logs / f"{name}.log"
        module = module or MODULES[name]
        with logfile.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                env={**os.environ, **self.envs[name]},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches the demo only; it stops each child itself
            )
        child = Child(name, proc, logfile, args, module)
        self.children[name] = child
        log.info("started %s (pid %d, log %s)", name, proc.pid, logfile)
        return child

    def stop(self, name: str, timeout_s: float = 60) -> int | None:
        child = self.children.get(name)
        if child is None:
            return None
        if child.alive():
            child.proc.send_signal(signal.SIGINT if name in SPARK_JOBS else signal.SIGTERM)
            try:
                child.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0f s; killing it", name, timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)  # what is left of its group (the Spark JVM)
        child.proc.wait(30)
        return child.proc.returncode

    def stop_all(self) -> None:
        for name in reversed(list(self.children)):
            self.stop(name)

    def dead(self) -> list[Child]:
        return [c for name, c in self.children.items() if name != "loadgen" and not c.alive()]

    def supervise(self) -> list[Child]:
        """Restarts what died, as a process supervisor would: after 1 s, doubling up to 30 s
        while it keeps dying within a minute of its start. Returns the children that must not
        be restarted (see NO_RESTART); the load generator is left alone (it has an end)."""
        final = []
        now = time.monotonic()
        for child in self.dead():
            code = child.proc.returncode
            if code in NO_RESTART:
                final.append(child)
                continue
            delay, due = self._backoff.get(child.name, (0.0, 0.0))
            if due == 0.0:  # just found dead: schedule its restart
                ran = now - child.started  # about: it was found dead now
                delay = (
                    BACKOFF_FIRST_S
                    if ran >= STEADY_S
                    else min(BACKOFF_MAX_S, max(BACKOFF_FIRST_S, 2 * delay))
                )
                self._backoff[child.name] = (delay, now + delay)
                log.warning("%s exited with code %s; restarting it in %.0f s", child.name, code, delay)
                continue
            if now < due:
                continue
            self._backoff[child.name] = (delay, 0.0)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.proc.pid, signal.SIGKILL)  # what is left of its group
            restarted = self.start(child.name, child.args, child.module)
            restarted.restarts = child.restarts + 1
        return final
