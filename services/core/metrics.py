"""A service's figures: counters, rates, consumer lag, batch times and the last error, logged now
and then, kept in a JSON file that people and `make demo` read, and served to Prometheus
(`ServiceCollector`)."""

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import (
    GaugeMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from foundation import prometheus

__all__ = ["STATES", "Metrics", "ServiceCollector"]

log = logging.getLogger(__name__)


class Metrics:
    def __init__(self, service: str, path: Path | None, interval_s: float) -> None:
        self.service, self.path, self.interval_s = service, path, interval_s
        self.counters: dict[str, int] = {"consumed": 0, "written": 0, "dead_letters": 0, "retries": 0}
        self.gauges: dict[str, Any] = {"state": "starting", "last_error": None}
        self.batches, self.batch_seconds = 0, 0.0  # batches delivered and committed, their time
        self.lag: dict[tuple[str, int], int] = {}  # (topic, partition) -> records behind its end
        self.started = time.time()
        self._last_report = time.monotonic()
        self._last_counts = dict(self.counters)

    def add(self, name: str, value: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + value

    def set(self, name: str, value: Any) -> None:
        self.gauges[name] = value

    def batch_done(self, seconds: float) -> None:
        self.batches += 1
        self.batch_seconds += seconds

    def set_lag(self, topic: str, partition: int, records: int) -> None:
        self.lag[(topic, partition)] = max(0, records)

    def snapshot(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "pid": os.getpid(),
            "started_at": self.started,
            "updated_at": time.time(),
            **self.counters,
            **self.gauges,
            "batches": self.batches,
            "batch_seconds": round(self.batch_seconds, 3),
            "lag": {f"{t}[{p}]": n for (t, p), n in sorted(self.lag.items())},
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


STATES = ("starting", "running", "waiting for downstream", "stopped")


class ServiceCollector(Collector):
    """A service's figures for Prometheus, read at each scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m, service = self.metrics, [self.metrics.service]
        counters = dict(m.counters)
        yield from prometheus.counters(
            (
                ("ratings_records_consumed", "consumed", "records read from the input topics"),
                ("ratings_records_written", "written", "records the sink confirmed (committed)"),
                ("ratings_dead_letters", "dead_letters", "records sent to the dead-letter topic"),
                ("ratings_downstream_retries", "retries", "retries while the downstream was unavailable"),
            ),
            counters,
            "service",
            m.service,
        )
        batches = SummaryMetricFamily(
            "ratings_batch_seconds", "from a batch collected to its offsets committed", labels=["service"]
        )
        batches.add_metric(service, count_value=m.batches, sum_value=m.batch_seconds)
        yield batches
        lag = GaugeMetricFamily(
            "ratings_consumer_lag_records",
            "records between the committed offset and the end of the partition, at the last batch",
            labels=["service", "topic", "partition"],
        )
        for (topic, partition), records in sorted(dict(m.lag).items()):  # copied at once (GIL)
            lag.add_metric([m.service, topic, str(partition)], records)
        yield lag
        state = StateSetMetricFamily("ratings_service_state", "what the service is doing", labels=["service"])
        current = m.gauges.get("state")
        state.add_metric(service, {s: s == current for s in STATES})
        yield state
        started = GaugeMetricFamily(
            "ratings_service_start_time_seconds", "when the process started (Unix time)", labels=["service"]
        )
        started.add_metric(service, m.started)
        yield started
