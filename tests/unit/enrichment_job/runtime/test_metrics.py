"""The job's figures as Prometheus scrapes them: totals, batch times, waiting ratings, the
watermark's lag behind now, and Spark's progress per query."""

import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from pyspark.sql.streaming.listener import QueryProgressEvent

from enrichment_job.runtime.metrics import JobCollector, Metrics, ProgressListener, Steps

COUNTS = {
    "changes": 4,
    "enriched": 90,
    "alerts": 2,
    "dlq": 1,
    "cdc_events": 6,
    "duplicates": 0,
    "new": 95,
    "waiting": 5,
}


def _scrape(metrics: Metrics, job: str) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(metrics, job))
    return generate_latest(registry).decode()


def test_the_enrichment_job_s_figures(tmp_path: Path) -> None:
    metrics = Metrics(tmp_path / "metrics.json")
    watermark_ms = int(time.time() * 1000) - 2_000
    metrics.batch(7, COUNTS, watermark_ms, 0.4, Steps())
    metrics.batch(8, {**COUNTS, "waiting": 3}, watermark_ms, 0.2, Steps())
    metrics.progress("enrichment", {"batch_id": 8, "input_rows_per_s": 190.0, "batch_duration_ms": 450})
    text = _scrape(metrics, "enrichment")
    assert 'ratings_job_enriched_total{job="enrichment"} 180.0' in text
    assert 'ratings_job_alerts_total{job="enrichment"} 4.0' in text
    assert 'ratings_job_dead_letters_total{job="enrichment"} 2.0' in text
    assert 'ratings_job_cdc_changes_total{job="enrichment"} 8.0' in text
    assert 'ratings_job_batch_seconds_count{job="enrichment"} 2.0' in text
    assert 'ratings_job_batch_seconds_sum{job="enrichment"} 0.6' in text
    assert 'ratings_job_waiting_ratings{job="enrichment"} 3.0' in text
    assert 'ratings_query_input_rows_per_second{job="enrichment",query="enrichment"} 190.0' in text
    assert 'ratings_query_batch_duration_seconds{job="enrichment",query="enrichment"} 0.45' in text
    assert 'ratings_query_last_batch_id{job="enrichment",query="enrichment"} 8.0' in text
    lag_line = next(
        line for line in text.splitlines() if line.startswith("ratings_job_watermark_lag_seconds{")
    )
    assert 2.0 <= float(lag_line.rsplit(" ", 1)[1]) < 60


def test_the_views_job_has_its_queries_only(tmp_path: Path) -> None:
    metrics = Metrics(tmp_path / "metrics.json")
    metrics.progress("views", {"batch_id": 3, "input_rows_per_s": 50.0, "batch_duration_ms": 900})
    text = _scrape(metrics, "views")
    assert 'ratings_query_batch_duration_seconds{job="views",query="views"} 0.9' in text
    assert "ratings_job_enriched_total" not in text
    assert "ratings_job_watermark_lag_seconds" not in text


def _state_operator(updated: int, update_ms: int, removal_ms: int, commit_ms: int) -> dict[str, object]:
    return {
        "operatorName": "stateStoreSave",
        "numRowsTotal": 0,
        "numRowsUpdated": updated,
        "numRowsRemoved": 0,
        "allUpdatesTimeMs": update_ms,
        "allRemovalsTimeMs": removal_ms,
        "commitTimeMs": commit_ms,
        "memoryUsedBytes": 0,
        "numRowsDroppedByWatermark": 0,
        "numShufflePartitions": 2,
        "numStateStoreInstances": 2,
    }


def test_a_stateful_query_s_progress_says_where_its_state_store_time_went(tmp_path: Path) -> None:
    metrics = Metrics(tmp_path / "metrics.json")
    progress = {
        "id": "7d1a9bd4-4b43-4c5e-9d0e-6c1a8f1e2a01",
        "runId": "0c6e3e6c-7c1e-4b5e-8f6a-2b9e4b7d9a02",
        "name": "views",
        "timestamp": "2026-11-25T20:00:00.000Z",
        "batchId": 41,
        "batchDuration": 310,
        "durationMs": {"queryPlanning": 12, "addBatch": 270, "walCommit": 9, "triggerExecution": 310},
        "numInputRows": 2500,
        "inputRowsPerSecond": 5000.0,
        "processedRowsPerSecond": 8064.5,
        "stateOperators": [_state_operator(2400, 120, 15, 30), _state_operator(5, 3, 1, 2)],
        "sources": [],
        "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
    }
    ProgressListener(metrics).onQueryProgress(QueryProgressEvent.fromJson({"progress": progress}))
    recorded = metrics.snapshot()["query:views"]
    assert recorded["batch_id"] == 41 and recorded["batch_duration_ms"] == 310
    assert (recorded["state_update_ms"], recorded["state_removal_ms"], recorded["state_commit_ms"]) == (
        123,
        16,
        32,
    )
    assert recorded["state_rows_updated"] == 2405
    assert (recorded["queryPlanning_ms"], recorded["addBatch_ms"], recorded["walCommit_ms"]) == (12, 270, 9)
    text = _scrape(metrics, "views")
    assert 'ratings_query_state_seconds{job="views",query="views",step="removal"} 0.016' in text
    assert 'ratings_query_state_seconds{job="views",query="views",step="commit"} 0.032' in text
