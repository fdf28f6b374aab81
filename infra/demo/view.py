"""The live terminal view: one frame per second, per stage events in and out per second, lag,
dead letters, the latest alerts the way Slack shows them, and the materialized views."""

import time
from datetime import UTC, datetime
from typing import Any

from infra.demo.figures import Snapshot

CLEAR = "\x1b[H\x1b[2J"


def _rate(now: Snapshot, before: Snapshot, value_now: float, value_before: float) -> str:
    seconds = max(now.at - before.at, 1e-6)
    return f"{max(value_now - value_before, 0) / seconds:,.0f}"


def _n(value: int | float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _metric(snap: Snapshot, process: str, name: str) -> float:
    value = snap.metrics.get(process, {}).get(name)
    return float(value) if isinstance(value, int | float) else 0.0


def _job_total(snap: Snapshot, name: str) -> float:
    return float(snap.metrics.get("enrichment", {}).get("totals", {}).get(name, 0))


def stage_rows(start: Snapshot, before: Snapshot, now: Snapshot) -> list[tuple[str, ...]]:
    job = now.metrics.get("enrichment", {})
    enrichment = job.get("enrichment", {})
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
            _rate(now, before, _job_total(now, "enriched"), _job_total(before, "enriched")),
            _n(_job_total(now, "enriched")),
            _n(enrichment.get("waiting")),
            _n(now.since(start, "enrichment_dlq")),
            f"CDC lag {_n(job.get('cdc', {}).get('watermark_lag_ms'))} ms",
        ),
    ]
    views = now.metrics.get("views", {}).get("query:views", {})
    rows.append(
        (
            "views job",
            f"{views.get('input_rows_per_s', 0):,.0f}" if views else "-",
            f"{views.get('processed_rows_per_s', 0):,.0f}" if views else "-",
            "-",
            "-",
            _n(now.since(start, "views_dlq")),
            f"batch {_n(views.get('batch_id'))}, {_n(views.get('batch_duration_ms'))} ms"
            if views
            else "starting",
        )
    )
    for process, label, dlq, extra in (
        (
            "slack_notifier",
            "slack notifier",
            "slack_dlq",
            f"{_n(_metric(now, 'slack_notifier', 'written'))} alerts",
        ),
        ("es_sink", "elasticsearch sink", "es_dlq", f"{_n(now.es_docs)} docs in ratings"),
        ("s3_sink", "s3 lake sink", "s3_dlq", f"{_n(now.lake_files)} files in the lake"),
    ):
        rows.append(
            (
                label,
                _rate(now, before, _metric(now, process, "consumed"), _metric(before, process, "consumed")),
                _rate(now, before, _metric(now, process, "written"), _metric(before, process, "written")),
                _n(_metric(now, process, "written")),
                _n(now.lag.get(process)),
                _n(now.since(start, dlq)),
                f"{now.metrics.get(process, {}).get('state', 'starting')}; {extra}",
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
