"""The job's figures as Prometheus scrapes them: totals, batch times, waiting ratings, the
watermark's lag behind now, and Spark's progress per query."""

import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from enrichment_job.metrics import JobCollector, Metrics, Steps

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
