"""A service's figures: counters, rates and the last error, logged now and then and kept in a JSON
file that people, `make demo` and dashboards read."""

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class Metrics:
    def __init__(self, service: str, path: Path | None, interval_s: float) -> None:
        self.service, self.path, self.interval_s = service, path, interval_s
        self.counters: dict[str, int] = {"consumed": 0, "written": 0, "dead_letters": 0, "retries": 0}
        self.gauges: dict[str, Any] = {"state": "starting", "last_error": None}
        self.started = time.time()
        self._last_report = time.monotonic()
        self._last_counts = dict(self.counters)

    def add(self, name: str, value: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + value

    def set(self, name: str, value: Any) -> None:
        self.gauges[name] = value

    def snapshot(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "pid": os.getpid(),
            "started_at": self.started,
            "updated_at": time.time(),
            **self.counters,
            **self.gauges,
        }

    def maybe_report(self, force: bool = False) -> None:
        """A progress log line every interval (and the file), with per-second rates since the last."""
        now = time.monotonic()
        elapsed = now - self._last_report
        if not force and elapsed < self.interval_s:
            return
        rates = {
            k: (self.counters[k] - self._last_counts.get(k, 0)) / max(elapsed, 1e-9) for k in self.counters
        }
        log.info(
            "%s: state=%s consumed=%d (%.0f/s) written=%d (%.0f/s) dead_letters=%d retries=%d",
            self.service,
            self.gauges.get("state"),
            self.counters["consumed"],
            rates["consumed"],
            self.counters["written"],
            rates["written"],
            self.counters["dead_letters"],
            self.counters["retries"],
        )
        self._last_report, self._last_counts = now, dict(self.counters)
        self.write_file()

    def write_file(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.snapshot(), indent=1))
        tmp.replace(self.path)
