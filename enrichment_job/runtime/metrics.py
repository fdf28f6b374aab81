"""Progress of the job as Spark users expect it: a log line per batch, a JSON file of the
latest figures (rows/s, batch duration, waiting ratings, CDC watermark lag, dead letters), and
the same figures for Prometheus (`JobCollector`)."""

import copy
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector
from pyspark.sql.streaming.listener import StreamingQueryListener

from enrichment_job.runtime.spark_internals import JsonProgressEvents
from foundation.prometheus import counters

__all__ = ["JobCollector", "Metrics", "ProgressListener", "Steps", "caught_up"]

log = logging.getLogger("enrichment_job")


def _lag_ms(watermark_ms: int | None) -> int | None:
    return None if watermark_ms is None else int(time.time() * 1000) - watermark_ms


def caught_up(metrics: dict[str, Any], max_lag_ms: int) -> bool:
    """From a metrics.json: the CDC watermark is within `max_lag_ms` of now and the enrichment
    query has run a batch (the customer table is loaded and ratings can be released)."""
    lag = metrics.get("cdc", {}).get("watermark_lag_ms")
    return lag is not None and lag < max_lag_ms and "enrichment" in metrics


class Steps:
    """Where a batch's time goes: `with steps("name"): ...` adds the seconds spent under a name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str) -> "_Step":
        return _Step(self, name)

    def summary(self) -> str:
        return " ".join(f"{name}={secs:.2f}" for name, secs in self.seconds.items())


class _Step:
    def __init__(self, steps: Steps, name: str) -> None:
        self.steps, self.name = steps, name

    def __enter__(self) -> None:
        self.started = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        elapsed = time.monotonic() - self.started
        self.steps.seconds[self.name] = self.steps.seconds.get(self.name, 0.0) + elapsed


class Metrics:
    """Latest figures per query, written to `path` (atomically) after each batch (None: kept
    in memory for the Prometheus endpoint only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._totals: dict[str, float] = {
            "dlq_records": 0,
            "enriched": 0,
            "alerts": 0,
            "cdc_changes": 0,
            "batches": 0,
            "batch_seconds": 0.0,
        }
        self._data: dict[str, Any] = {"totals": self._totals}

    def snapshot(self) -> dict[str, Any]:
        """A copy of the latest figures, as the JSON file has them."""
        with self._lock:
            return copy.deepcopy(self._data)

    def _update(self, section: str, values: dict[str, Any]) -> None:
        with self._lock:
            self._data[section] = {
                **self._data.get(section, {}),
                **values,
                "updated_at_ms": int(time.time() * 1000),
            }
            if self.path is None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._data, indent=2))
            tmp.replace(self.path)

    def batch(
        self, batch_id: int, counts: dict[str, int], watermark_ms: int | None, seconds: float, steps: Steps
    ) -> None:
        """One micro-batch: the CDC side (section "cdc") and the ratings side ("enrichment")."""
        self._totals["cdc_changes"] += counts["changes"]
        self._totals["enriched"] += counts["enriched"]
        self._totals["alerts"] += counts["alerts"]
        self._totals["dlq_records"] += counts["dlq"]
        self._totals["batches"] += 1
        self._totals["batch_seconds"] = round(self._totals["batch_seconds"] + seconds, 3)
        lag = _lag_ms(watermark_ms)
        common = {
            "batch_id": batch_id,
            "watermark_ms": watermark_ms,
            "watermark_lag_ms": lag,
            "handler_s": round(seconds, 3),
            "steps_s": {k: round(v, 3) for k, v in steps.seconds.items()},
        }
        self._update(
            "cdc",
            {
                **common,
                "events": counts["cdc_events"],
                "changes": counts["changes"],
                "duplicates": counts["duplicates"],
            },
        )
        self._update(
            "enrichment",
            {
                **common,
                **{k: counts[k] for k in ("new", "enriched", "alerts", "dlq", "waiting")},
                "released": counts.get("released", 0),  # of `enriched`: in the second transaction
            },
        )
        log.info(
            "batch %d: %d new, %d enriched, %d alerts, %d dead letters, %d waiting, %d CDC events "
            "(%d changes, %d duplicates), watermark lag %s ms, %.2f s (%s)",
            batch_id,
            counts["new"],
            counts["enriched"],
            counts["alerts"],
            counts["dlq"],
            counts["waiting"],
            counts["cdc_events"],
            counts["changes"],
            counts["duplicates"],
            lag,
            seconds,
            steps.summary(),
        )

    def progress(self, name: str, values: dict[str, Any]) -> None:
        self._update(f"query:{name}", values)

    def driver(self, values: dict[str, Any]) -> None:
        """How the driver started (section "driver"): its class archive, say."""
        self._update("driver", values)


class JobCollector(Collector):
    """The job's figures for Prometheus, read from `Metrics` at each scrape. `job` labels them:
    the enrichment job's name, or `views`."""

    def __init__(self, metrics: Metrics, job: str) -> None:
        self.metrics, self.job = metrics, job

    def collect(self) -> Iterator[Metric]:
        data, job = self.metrics.snapshot(), [self.job]
        totals = data.get("totals", {})
        if "enrichment" in data:  # the enrichment job's own figures (the views job has none)
            yield from counters(
                (
                    ("ratings_job_enriched", "enriched", "enriched records committed to Kafka"),
                    ("ratings_job_alerts", "alerts", "alerts committed to Kafka"),
                    ("ratings_job_dead_letters", "dlq_records", "ratings sent to the dead-letter topic"),
                    ("ratings_job_cdc_changes", "cdc_changes", "customer changes applied to the table"),
                ),
                totals,
                "job",
                self.job,
            )
            batches = SummaryMetricFamily(
                "ratings_job_batch_seconds", "the job's handling of a micro-batch", labels=["job"]
            )
            batches.add_metric(job, count_value=totals["batches"], sum_value=totals["batch_seconds"])
            yield batches
            waiting = GaugeMetricFamily(
                "ratings_job_waiting_ratings",
                "ratings held until their customer's version is known, after the last batch",
                labels=["job"],
            )
            waiting.add_metric(job, data["enrichment"].get("waiting", 0))
            yield waiting
        watermark = data.get("cdc", {}).get("watermark_ms")
        if watermark is not None:
            lag = GaugeMetricFamily(
                "ratings_job_watermark_lag_seconds",
                "now minus the CDC watermark (the database clock the join has seen up to)",
                labels=["job"],
            )
            lag.add_metric(job, max(0.0, time.time() - watermark / 1000))
            yield lag
        queries = [(k.removeprefix("query:"), v) for k, v in sorted(data.items()) if k.startswith("query:")]
        for name, key, doc, scale in (
            ("ratings_query_input_rows_per_second", "input_rows_per_s", "Spark: rows read per second", 1),
            (
                "ratings_query_processed_rows_per_second",
                "processed_rows_per_s",
                "Spark: rows processed per second of batch time",
                1,
            ),
            ("ratings_query_batch_duration_seconds", "batch_duration_ms", "Spark: the last batch", 1e-3),
            ("ratings_query_last_batch_id", "batch_id", "Spark: the last batch's id", 1),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=["job", "query"])
            for query, progress in queries:
                gauge.add_metric([self.job, query], progress.get(key, 0) * scale)
            yield gauge
        stateful = [(query, progress) for query, progress in queries if "state_update_ms" in progress]
        if stateful:
            state = GaugeMetricFamily(
                "ratings_query_state_seconds",
                "Spark: the last batch's time in its state store, by step (update, removal, commit)",
                labels=["job", "query", "step"],
            )
            for query, progress in stateful:
                for step in ("update", "removal", "commit"):
                    state.add_metric([self.job, query, step], progress[f"state_{step}_ms"] / 1000)
            yield state


class ProgressListener(JsonProgressEvents, StreamingQueryListener):
    """Spark's own progress per query: input and processed rows per second, batch duration."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def onQueryStarted(self, event: Any) -> None:
        log.info("query %s started (run %s)", event.name, event.runId)

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        values = {
            "batch_id": p.batchId,
            "input_rows": p.numInputRows,
            "input_rows_per_s": round(p.inputRowsPerSecond or 0.0, 1),
            "processed_rows_per_s": round(p.processedRowsPerSecond or 0.0, 1),
            "batch_duration_ms": p.batchDuration,
        }
        for step in ("queryPlanning", "addBatch", "walCommit", "commitOffsets"):
            if step in p.durationMs:
                values[f"{step}_ms"] = p.durationMs[step]
        if p.stateOperators:  # where a stateful batch's time went
            values["state_update_ms"] = sum(s.allUpdatesTimeMs for s in p.stateOperators)
            values["state_removal_ms"] = sum(s.allRemovalsTimeMs for s in p.stateOperators)
            values["state_commit_ms"] = sum(s.commitTimeMs for s in p.stateOperators)
            values["state_rows_updated"] = sum(s.numRowsUpdated for s in p.stateOperators)
        self.metrics.progress(p.name, values)
        if p.numInputRows:
            log.info("query %s progress: %s", p.name, values)

    def onQueryIdle(self, event: Any) -> None:
        return

    def onQueryTerminated(self, event: Any) -> None:
        log.log(
            logging.ERROR if event.exception else logging.INFO,
            "query %s terminated %s",
            event.id,
            event.exception or "",
        )
