"""A benchmark's view of a process's memory."""

import threading
from collections.abc import Callable

from infra.stack.stack import tree_rss_kib


class PeakRss(threading.Thread):
    """The largest resident memory of a process and its descendants, sampled every `interval_s`
    until stop() (`measure`: another figure of the process tree in KiB, such as its PSS)."""

    def __init__(
        self, pid: int, interval_s: float = 0.2, measure: Callable[[int], int] = tree_rss_kib
    ) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval_s = interval_s
        self.measure = measure
        self.peak_kib = 0
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.done.wait(self.interval_s):
            self.peak_kib = max(self.peak_kib, self.measure(self.pid))

    def stop(self) -> float:
        self.done.set()
        self.join()
        return round(self.peak_kib / 1024, 1)
