"""The views job's second process (VIEWS_JOB_BACKGROUND_PROCESS): every query but the keyed
views', started, watched and stopped by the first.

On a host short of cores the windowed query's batches (25,000 records every 5 s at 5,000
ratings a second) delay a `customer_ratings` batch that waits for a task slot beside them. In
a process of their own, with a lower CPU weight, the kernel hands the cores to
`customer_ratings` as soon as it is ready, where Spark would wait for a task to end.
The two processes share only the topics: each query keeps its own checkpoint (the second
process's state is `<state dir>/background`) and transactional id.

The second process is a session of its own (where Linux groups processes by session, its nice
then weighs against the other programs', not only inside this one's session), gets SIGTERM if
this process dies, and its end ends this one: the views are never left half running.
"""

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

from enrichment_job.views.settings import BACKGROUND, ViewsSettings

__all__ = ["BackgroundProcess", "background_env"]

log = logging.getLogger("enrichment_job.views")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it ends, kill -9 too."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def background_env(settings: ViewsSettings, environ: dict[str, str]) -> dict[str, str]:
    """The second process's environment: this one's, with its queries, state and ports."""
    env = {
        **environ,
        "VIEWS_JOB_QUERIES": BACKGROUND,
        "VIEWS_JOB_BACKGROUND_PROCESS": "false",
        "VIEWS_JOB_STATE_DIR": f"{settings.state_dir.rstrip('/')}/background",
        "VIEWS_JOB_METRICS_PORT": "0",  # the port is this process's
        "VIEWS_JOB_NICE": str(settings.background_nice),
    }
    if settings.metrics_file is not None:
        path = settings.metrics_file
        env["VIEWS_JOB_METRICS_FILE"] = str(path.with_name(f"{path.stem}-background{path.suffix}"))
    return env


class BackgroundProcess:
    """The second process, running until `stop()`; if it ends before, `on_end` is called (the
    first process then stops too) and `failed` holds its exit code."""

    def __init__(self, settings: ViewsSettings, on_end: Callable[[], None]) -> None:
        self._stopping = False
        self.failed: int | None = None
        self._on_end = on_end
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "enrichment_job.views"],
            env=background_env(settings, dict(os.environ)),
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - before any thread of ours starts
        )
        log.info(
            "background views process started (pid %d, nice %d): the windowed views and the dead letters",
            self.proc.pid,
            settings.background_nice,
        )
        threading.Thread(target=self._watch, name="background-views", daemon=True).start()

    def _watch(self) -> None:
        code = self.proc.wait()
        if not self._stopping:
            self.failed = code
            log.error("the background views process ended (exit code %d): the job stops", code)
            self._on_end()

    def stop(self, timeout_s: float = 120) -> int:
        """SIGTERM (a clean stop: its batch in flight is redone on restart), then kill -9 after
        `timeout_s`; returns its exit code."""
        self._stopping = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("the background views process did not stop in %.0f s: killed", timeout_s)
                os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait()
