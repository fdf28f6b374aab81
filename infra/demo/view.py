"""The live terminal view: one frame per second, per stage events in and out per second, lag,
dead letters, the latest alerts the way Slack shows them, and the materialized views."""

import time
from datetime import UTC, datetime
from typing import Any

from infra.demo.figures import Snapshot, labelled, sample

CLEAR = "\x1b[H\x1b[2J"


def _rate(now: Snapshot, before: Snapshot, value_now: float, value_before: float) -> str:
    seconds = max(now.at - before.at, 1e-6)
    return f"{max(value_now - value_before, 0) / seconds:,.0f}"


def _n(value: int | float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _metric(snap: Snapshot, process: str, name: str) -> float:
    """A figure of the load generator's metrics file (it is tooling: no Prometheus endpoint)."""
    value = snap.metrics.get(process, {}).get(name)
    return float(value) if isinstance(value, int | float) else 0.0


def _scraped(snap: Snapshot, program: str, name: str) -> float | None:
    return sample(snap.samples.get(program, {}), name)


def stage_rows(start: Snapshot, before: Snapshot, now: Snapshot) -> list[tuple[str, ...]]:
    """One row per stage, from each program's Prometheus endpoint ("-" until it answers)."""
    enriched = "ratings_job_enriched_total"
    watermark_lag = _scraped(now, "enrichment", "ratings_job_watermark_lag_seconds")
    rows: list[tuple[str, ...]] = [
        (
            "load generator",
            "-",
            _rate(now, before, now.ends["ratings"], before.ends["ratings"]),
            _n(now.since(start, "ratings")),
            "-",
            "-",
            f"{_n(_metric(now, 'loadgen', 'customers'))} customers",
        ),
        (
            "enrichment job",
            _rate(now, before, now.ends["ratings"], before.ends["ratings"]),
            _rate(now, before, now.total("enrichment", enriched), before.total("enrichment", enriched)),
            _n(_scraped(now, "enrichment", enriched)),
            _n(_scraped(now, "enrichment", "ratings_job_waiting_ratings")),
            _n(now.since(start, "enrichment_dlq")),
            f"CDC lag {_n(None if watermark_lag is None else watermark_lag * 1000)} ms",
        ),
    ]
    batch_id = _scraped(now, "views", "ratings_query_last_batch_id")
    batch_s = _scraped(now, "views", "ratings_query_batch_duration_seconds")
    rows.append(
        (
            "views job",
            _n(_scraped(now, "views", "ratings_query_input_rows_per_second")),
            _n(_scraped(now, "views", "ratings_query_processed_rows_per_second")),
            "-",
            "-",
            _n(now.since(start, "views_dlq")),
            f"batch {_n(batch_id)}, {_n(None if batch_s is None else batch_s * 1000)} ms"
            if batch_id is not None
            else "starting",
        )
    )
    consumed, written = "ratings_records_consumed_total", "ratings_records_written_total"
    for process, label, dlq, extra in (
        (
            "slack_notifier",
            "slack notifier",
            "slack_dlq",
            f"{_n(now.total('slack_notifier', written))} alerts",
        ),
        ("es_sink", "elasticsearch sink", "es_dlq", f"{_n(now.es_docs)} docs in ratings"),
        ("s3_sink", "s3 lake sink", "s3_dlq", f"{_n(now.lake_files)} files in the lake"),
    ):
        state = labelled(now.samples.get(process, {}), "ratings_service_state", "ratings_service_state")
        rows.append(
            (
                label,
                _rate(now, before, now.total(process, consumed), before.total(process, consumed)),
                _rate(now, before, now.total(process, written), before.total(process, written)),
                _n(_scraped(now, process, written)),
                _n(now.lag.get(process)),
                _n(now.since(start, dlq)),
                f"{state or 'starting'}; {extra}",
            )
        )
    return rows


def alert_lines(alerts: list[dict[str, Any]]) -> list[str]:
    lines = []
    for a in reversed(alerts):
        when = datetime.fromtimestamp(a.get("rating_time", 0) / 1000, UTC).strftime("%H:%M:%S")
        stars = "★" * int(a.get("stars", 0)) + "☆" * (5 - int(a.get("stars", 0)))
        lines.append(f"  :rotating_light: {a.get('full_name')} ({a.get('club_status')}, {a.get('email')})")
        lines.append(f'     {stars} via {a.get("channel")} at {when} UTC: "{a.get("message")}"')
    return lines or ["  (none yet)"]


def frame(
    title: str,
    start: Snapshot,
    before: Snapshot,
    now: Snapshot,
    *,
    alerts: list[dict[str, Any]],
    views: list[str],
) -> str:
    header = ("STAGE", "IN/s", "OUT/s", "OUT TOTAL", "LAG", "DLQ", "")
    rows = [header, *stage_rows(start, before, now)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    table = [
        "  ".join(
            cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=False))
        )
        + "  "
        + r[-1]
        for r in rows
    ]
    stamp = time.strftime("%H:%M:%S")
    return "\n".join(
        [
            f"{title}   [{stamp}]",
            "",
            *table,
            "",
            "Latest alerts, as Slack shows them:",
            *alert_lines(alerts),
            "",
            "Materialized views (services/views on 127.0.0.1:8087):",
            *views,
            "",
        ]
    )
