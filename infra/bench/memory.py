"""A benchmark's view of a process's memory."""

import threading

from infra.stack.stack import tree_rss_kib


class PeakRss(threading.Thread):
    """The largest resident memory of a process and its descendants, sampled every 0.2 s until
    stop()."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kib = 0
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.peak_kib = max(self.peak_kib, tree_rss_kib(self.pid))

    def stop(self) -> float:
        self.done.set()
        self.join()
        return round(self.peak_kib / 1024, 1)
