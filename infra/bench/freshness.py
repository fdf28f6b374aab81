"""python -m infra.bench.freshness: follows a view's change stream from a process of its own and
records how old each change is when it arrives.

A subscriber of the views query service: GET /views/customer_ratings/changes?snapshot=false
(Server-Sent Events, the changes from the subscription on, without the view's rows first),
again after a pause whenever the service ends the stream (a view with no rows yet, or a
subscriber cut off for falling behind). For each change event it records the arrival time and
now - the row's `last_rating_time`, the time its newest rating was produced: how old that rating
is when its row becomes readable by key.

It runs until SIGTERM or SIGINT, then writes `{"samples": [[arrived_ms, age_ms], ...], ...}`
to --out. The benchmark reads the follower's CPU time from /proc by its pid.
"""

import argparse
import json
import re
import signal
import sys
import threading
import time
from http.client import HTTPConnection
from pathlib import Path
from types import FrameType
from typing import Any

LAST_RATING_TIME = re.compile(rb'"last_rating_time":(\d+)')
EVENT_END = b"\n\n"


class Follower:
    def __init__(self, port: int, view: str) -> None:
        self.port = port
        self.path = f"/views/{view}/changes?snapshot=false"
        self.samples: list[tuple[int, int]] = []
        self.changes = 0
        self.subscriptions = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._follow()
            except OSError:
                pass
            self.stop.wait(0.5)

    def _follow(self) -> None:
        conn = HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", self.path)
            response = conn.getresponse()
            if response.status != 200:
                return
            self.subscriptions += 1
            pending = b""
            while not self.stop.is_set():
                # Whatever has arrived, in one read: the events of a batch come together, and a
                # regex over the bytes, not a JSON parse of each row, keeps this client light.
                chunk = response.read1(1 << 16)
                if not chunk:
                    return
                arrived = int(time.time() * 1000)
                events = (pending + chunk).split(EVENT_END)
                pending = events.pop()
                for event in events:
                    if b"event: change\n" not in event:  # "id: N" may come first
                        continue
                    self.changes += 1
                    if (found := LAST_RATING_TIME.search(event)) is not None:
                        self.samples.append((arrived, arrived - int(found.group(1))))
        finally:
            conn.close()

    def figures(self) -> dict[str, Any]:
        return {
            "samples": list(self.samples),
            "changes": self.changes,
            "subscriptions": self.subscriptions,
        }


def in_window(samples: list[list[int]], start_ms: int, end_ms: int) -> list[int]:
    """The ages of the changes that arrived between start_ms and end_ms."""
    return [age for arrived, age in samples if start_ms <= arrived <= end_ms]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.bench.freshness", description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="the views query service's port")
    parser.add_argument("--view", default="customer_ratings", help="default: %(default)s")
    parser.add_argument("--out", type=Path, required=True, help="where to write the samples (JSON)")
    args = parser.parse_args(argv)
    follower = Follower(args.port, args.view)

    def _stop(signum: int, frame: FrameType | None) -> None:
        follower.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    thread = threading.Thread(target=follower.run, daemon=True)
    thread.start()
    follower.stop.wait()
    thread.join(5)  # a read in progress ends with its socket's timeout at the latest
    args.out.write_text(json.dumps(follower.figures()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
