"""The demo's reconciliation verdict, latency figures and live view, from figures alone."""

import time
from pathlib import Path

from infra.demo.figures import Snapshot
from infra.demo.reconcile import (
    Check,
    Reconciliation,
    TopicCounter,
    dlq_since,
    dlq_without_bytes,
    percentiles,
)
from infra.demo.view import alert_lines, frame


def test_the_verdict_fails_when_any_stage_disagrees_and_says_which() -> None:
    good = Reconciliation([Check("enriched records", 10, 10), Check("lake rows", 10, 10)])
    assert good.ok
    bad = Reconciliation([Check("enriched records", 10, 10), Check("lake rows", 9, 10)])
    assert not bad.ok
    assert "BAD lake rows" in bad.text() and "expected 10" in bad.text()
    assert bad.as_json()["reconciled"] is False
    missing = Reconciliation([Check("Slack posts", None, 3)])
    assert not missing.ok
    shown = Reconciliation([Check("ratings produced", 10), Check("lake rows", 10, 10)])
    assert shown.ok
    assert shown.text().splitlines()[0].startswith("      ratings produced")


def test_percentiles() -> None:
    figures = percentiles([float(v) for v in range(1, 101)])
    assert figures == {"p50": 51.0, "p99": 100.0, "max": 100.0}
    assert percentiles([]) == {"p50": None, "p99": None, "max": None}


def test_dead_letters_count_only_ratings_this_run_produced() -> None:
    counter = TopicCounter.__new__(TopicCounter)
    counter.headers = [
        {"dlq.topic": b"ratings", "dlq.partition": b"0", "dlq.offset": b"99"},  # an earlier run
        {"dlq.topic": b"ratings", "dlq.partition": b"0", "dlq.offset": b"100"},
        {"dlq.topic": b"ratings", "dlq.partition": b"1", "dlq.offset": b"7"},
        {"dlq.topic": b"asgard.demo.customers", "dlq.partition": b"0", "dlq.offset": b"500"},
    ]
    assert dlq_since(counter, {0: 100, 1: 5}) == 2


def test_the_live_view_shows_every_stage_and_the_latest_alerts() -> None:
    start = Snapshot(
        at=time.time() - 2, ends={"ratings": 0, "enrichment_dlq": 0, "slack_dlq": 0, "es_dlq": 0, "s3_dlq": 0}
    )
    now = Snapshot(
        at=time.time(),
        ends={"ratings": 200, "enrichment_dlq": 1, "slack_dlq": 0, "es_dlq": 0, "s3_dlq": 0},
        lag={"slack_notifier": 0, "es_sink": 5, "s3_sink": 150},
        metrics={"loadgen": {"customers": 3000}},
        samples={  # as the programs' Prometheus endpoints answer
            "enrichment": {
                'ratings_job_enriched_total{job="ratings-enrichment"}': 190.0,
                'ratings_job_waiting_ratings{job="ratings-enrichment"}': 9.0,
                'ratings_job_watermark_lag_seconds{job="ratings-enrichment"}': 0.9,
            },
            "es_sink": {
                'ratings_records_consumed_total{service="es-sink"}': 185.0,
                'ratings_records_written_total{service="es-sink"}': 185.0,
                'ratings_service_state{ratings_service_state="running",service="es-sink"}': 1.0,
                'ratings_service_state{ratings_service_state="waiting for downstream"}': 0.0,
            },
        },
        es_docs=185,
        lake_files=3,
    )
    alert = {
        "full_name": "Rica Blaisdell",
        "club_status": "platinum",
        "email": "r@example.com",
        "stars": 1,
        "channel": "iOS",
        "rating_time": 0,
        "message": "late again",
    }
    views = ["  customer_ratings: 12 rows, 0.5 s behind the newest rating"]
    text = frame("demo", start, start, now, alerts=[alert], views=views)
    stages = (
        "load generator",
        "enrichment job",
        "views job",
        "slack notifier",
        "elasticsearch sink",
        "s3 lake sink",
    )
    for stage in stages:
        assert stage in text
    rows = {line.split("  ")[0].strip(): line for line in text.splitlines()}
    assert "CDC lag 900 ms" in rows["enrichment job"]
    assert rows["enrichment job"].split()[2:6] == ["100", "95", "190", "9"]  # in/s out/s total waiting
    assert "running; 185 docs in ratings" in rows["elasticsearch sink"]
    assert "starting" in rows["s3 lake sink"] and "starting" in rows["views job"]  # not answering yet
    assert views[0] in text
    assert "185 docs in ratings" in text and "3 files in the lake" in text
    assert "★☆☆☆☆ via iOS" in "\n".join(alert_lines([alert]))


def test_a_dead_letter_without_its_value_counts_as_kept_only_where_its_claim_check_file_is(
    tmp_path: Path,
) -> None:
    kept = tmp_path / "enrichment" / "ratings" / "0" / "101"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"x" * 7)
    ours = {"dlq.topic": b"ratings", "dlq.partition": b"0"}
    counter = TopicCounter.__new__(TopicCounter)
    counter.headers = [
        {**ours, "dlq.offset": b"100"},  # with its value
        {**ours, "dlq.offset": b"101", "dlq.value.location": kept.as_uri().encode(), "dlq.value.bytes": b"7"},
        {**ours, "dlq.offset": b"102", "dlq.value.location": kept.as_uri().encode(), "dlq.value.bytes": b"8"},
        {**ours, "dlq.offset": b"103"},  # no value, nowhere
        {**ours, "dlq.offset": b"104", "dlq.reason": b"empty value"},  # it had none
        {**ours, "dlq.offset": b"105", "dlq.value.location": (tmp_path / "gone").as_uri().encode()},
        {"dlq.topic": b"ratings", "dlq.partition": b"0", "dlq.offset": b"9"},  # an earlier run's
    ]
    counter.valued = [True, False, False, False, False, False, False]
    assert dlq_since(counter, {0: 100}) == 6
    assert dlq_without_bytes(counter, {0: 100}) == 3  # 102 (another size), 103, 105
