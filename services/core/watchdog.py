"""Ends a service whose consumer loop stopped coming back.

Some client calls have no timeout of their own: librdkafka's synchronous commit and seek wait
for an answer for as long as it takes, and `close()` can wait for a coordinator that is gone.
When one of them never returns, the process looks alive (its metrics endpoint answers, its
supervisor sees it running) and consumes nothing, for good.

The loop beats at every step (each fetch, each wait between retries, each batch). When no beat
came for `stall_timeout_s`, the watchdog logs where every thread is and ends the process with
exit code 1, for its supervisor to start it again. Nothing is lost: offsets are committed only
after the sink confirmed, so the new process replays the batch from the last commit, and the
sinks are idempotent.

Time inside the sink is excused: each of its requests has a timeout of its own, and a Slack
batch paced at one message a second may rightly take minutes.
"""

import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["STALLED_EXIT", "Watchdog"]

log = logging.getLogger(__name__)

STALLED_EXIT = 1  # what a supervisor restarts (see services.core.main)


def _end_process(_stalled_s: float) -> None:
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(STALLED_EXIT)


class Watchdog:
    def __init__(
        self,
        name: str,
        stall_timeout_s: float,
        on_stall: Callable[[float], None] = _end_process,
    ) -> None:
        self.name, self.stall_timeout_s, self._on_stall = name, stall_timeout_s, on_stall
        self._last = time.monotonic()
        self._excused = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"{name}-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self.beat()
        self._thread.start()
        return self

    def beat(self) -> None:
        self._last = time.monotonic()

    @contextmanager
    def excused(self) -> Iterator[None]:
        """Time spent inside does not count (a call bounded by timeouts of its own)."""
        self._excused = True
        try:
            yield
        finally:
            self._excused = False
            self.beat()

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        period = min(5.0, self.stall_timeout_s / 4)
        while not self._stopped.wait(period):
            stalled = time.monotonic() - self._last
            if self._excused or stalled < self.stall_timeout_s:
                continue
            log.error(
                "%s: the consumer loop has not come back for %.0f s (a call that does not return); "
                "ending the process for its supervisor to restart it (the stacks follow)",
                self.name,
                stalled,
            )
            self._on_stall(stalled)
            return
