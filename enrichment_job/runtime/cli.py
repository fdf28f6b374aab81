"""What the job's entry points share: `--help` from the settings class, and settings read once
with a bad value reported by its variable name (exit code 2)."""

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsError
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from foundation.help import settings_help
from foundation.settings import problems

__all__ = ["CONFIG_EXIT", "FENCED_EXIT", "load_or_exit", "run_until_stopped", "stop_on_signals"]

S = TypeVar("S", bound=BaseSettings)

# Exit codes after which restarting the same process cannot help (a supervisor should not).
CONFIG_EXIT = 2  # a bad setting, an unknown argument, topics other than the job name's
FENCED_EXIT = 3  # another instance of the same job name took over


def load_or_exit(cls: type[S], argv: list[str], prog: str, doc: str) -> S:
    """Settings from the environment (and <PREFIX>ENV_FILE); `--help` prints them and exits 0; a
    bad value or an unknown argument exits 2 naming it. Connects nowhere."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(settings_help(cls, prog, doc))
        sys.exit(0)
    if argv:
        print(
            f"error: unknown arguments {' '.join(argv)} (settings are environment variables; see --help)",
            file=sys.stderr,
        )
        sys.exit(CONFIG_EXIT)
    prefix = str(cls.model_config.get("env_prefix", ""))
    try:
        return cls(_env_file=os.environ.get(f"{prefix}ENV_FILE"))
    except (ValidationError, SettingsError) as err:
        for problem in problems(prefix, err):
            print(f"error: {problem}", file=sys.stderr)
    sys.exit(CONFIG_EXIT)


def run_until_stopped(
    spark: SparkSession,
    stop: Callable[[], None],
    log: logging.Logger,
    stopping: threading.Event,
    explain: Callable[[], BaseException | None] = lambda: None,
    *,
    goes_on: Callable[[], bool] = lambda: False,
    tick: Callable[[], None] = lambda: None,
) -> int:
    """Waits until a query ends or SIGINT/SIGTERM asks to stop (`stopping`, from
    `stop_on_signals`), then `stop()`s. Exit code 1 when a query failed, else 0. `explain`: the
    job's own reason for a failure, when it has one that says all (logged alone: Spark's text
    holds the whole Python traceback). `goes_on`, asked when a query ended or failed: whether
    the job can go on without it (a view dropped, or one that failed alone). `tick`: called
    about every second meanwhile."""
    stop_on_signals(log, stopping)  # again: starting Spark put its own SIGINT handler in place
    code = 0
    try:
        while not stopping.is_set():
            tick()
            try:
                ended = spark.streams.awaitAnyTermination(1)
            except StreamingQueryException:
                if not goes_on():
                    raise
                spark.streams.resetTerminated()  # else the same failure is raised again at once
                continue
            if ended and not goes_on():
                log.warning("a query stopped; the job stops")
                break
            if ended:
                spark.streams.resetTerminated()
    except StreamingQueryException as err:
        reason = explain()
        if reason is not None:
            log.error("the job stops: %s", reason)
        else:
            log.error("a query failed; the job stops (restart it to resume from the checkpoint): %s", err)
        code = 1
    finally:
        stop()
    return code


def stop_on_signals(log: logging.Logger, stopping: threading.Event | None = None) -> threading.Event:
    """Turns SIGINT and SIGTERM into a request to stop (the event returned), acted on between
    calls into the JVM. Called before Spark starts, so a stop asked for during the start is a
    clean stop once it is over, not a kill.

    PySpark's own SIGINT handler calls into the JVM from inside the signal handler, which breaks
    the py4j connection the main thread is waiting on and ends the job with a traceback.
    """
    stopping = stopping or threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping (a batch in flight is redone on restart)", signal.Signals(signum).name)
        stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, request_stop)
    return stopping
