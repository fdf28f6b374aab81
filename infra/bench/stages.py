"""The benchmarks `make bench` runs, each a command that writes its figures as JSON, and how to
read the figures the summary and the plot show from each file."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Stage:
    name: str
    command: tuple[str, ...]
    result: str  # file name under the results folder

    def figures(self, results: Path) -> dict[str, Any] | None:
        path = results / self.result
        return json.loads(path.read_text()) if path.exists() else None


def stages(results: Path) -> list[Stage]:
    return [
        Stage(
            "pipeline",
            (
                "infra.demo",
                "--duration",
                "60",
                "--rate",
                "20",
                "--plain",
                "--summary",
                str(results / "pipeline.json"),
            ),
            "pipeline.json",
        ),
        Stage(
            "job",
            (
                "infra.bench.job",
                "--rate",
                "5000",
                "--duration",
                "30",
                "--saturation",
                "100000",
                "--out",
                str(results / "job.json"),
            ),
            "job.json",
        ),
        # The job beside the Kafka Streams reference (infra/bench/kstreams), one at a time.
        Stage("versus", ("infra.bench.versus", "--out", str(results / "versus.json")), "versus.json"),
        Stage(
            "views",
            (
                "infra.bench.views",
                "--warmup",
                "360",
                "--duration",
                "60",
                "--out",
                str(results / "views.json"),
            ),
            "views.json",
        ),
        # A view declared in SQL created over 1,000,000 enriched records while ratings flow.
        Stage("backfill", ("infra.bench.backfill", "--out", str(results / "backfill.json")), "backfill.json"),
        # Large reads over the views' PostgreSQL protocol, beside PostgreSQL serving the same rows.
        Stage("pg_reads", ("infra.bench.pg_reads", "--out", str(results / "pg_reads.json")), "pg_reads.json"),
        # The job's memory on a backlog of large ratings (ENRICH_MAX_BATCH_BYTES).
        Stage(
            "backlog_memory",
            ("infra.bench.backlog_memory", "--out", str(results / "backlog_memory.json")),
            "backlog_memory.json",
        ),
        # The views job's memory on a backlog of large rows (VIEWS_JOB_MAX_BATCH_BYTES).
        Stage(
            "views_memory",
            ("infra.bench.views_memory", "--out", str(results / "views_memory.json")),
            "views_memory.json",
        ),
        Stage("es_sink", ("infra.bench.es_sink",), "es_sink.json"),
        Stage("s3_sink", ("infra.bench.s3_sink",), "s3_sink.json"),
        Stage("slack_notifier", ("infra.bench.slack_notifier",), "slack_notifier.json"),
    ]


def _get(data: dict[str, Any] | None, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def throughput(results: dict[str, dict[str, Any] | None]) -> list[tuple[str, float | None, float]]:
    """(what, events per second reached, goal)."""
    return [
        ("enrichment job\n(saturation)", _get(results["job"], "saturation", "events_per_s"), 30_000),
        ("Elasticsearch sink", _get(results["es_sink"], "figures", "docs_per_s"), 5_000),
        ("S3 lake sink", _get(results["s3_sink"], "figures", "rows_per_s_sustained"), 50_000),
    ]


def _ms_to_s(value: Any) -> float | None:
    return None if value is None else float(value) / 1000


def latency(results: dict[str, dict[str, Any] | None]) -> list[tuple[str, float | None, float | None, float]]:
    """(what, p50 s, p99 s, goal for p99 s)."""
    pipe = _get(results["pipeline"], "latency_s") or {}
    enrich = pipe.get("rating produced -> enriched by the job", {})
    alert = pipe.get("rating produced -> Slack post", {})
    job = _get(results["job"], "fixed_rate") or {}
    slack = _get(results["slack_notifier"], "figures") or {}
    fresh = _get(results.get("views"), "measured", "freshness") or {}
    return [
        (
            "job at 5,000/s\n(produced -> committed)",
            _ms_to_s(job.get("p50_ms")),
            _ms_to_s(job.get("p99_ms")),
            1.5,
        ),
        # Matched ratings: an unmatched one is held for the grace on purpose (infra/demo).
        ("job at 20/s\n(produced -> enriched, matched)", enrich.get("p50"), enrich.get("p99"), 1.5),
        ("alert end to end at 20/s\n(produced -> Slack post)", alert.get("p50"), alert.get("p99"), 2.5),
        ("notifier only\n(alert -> Slack post)", slack.get("latency_p50_s"), slack.get("latency_p99_s"), 2.5),
        (
            "views at 5,000/s\n(produced -> row readable)",
            _ms_to_s(fresh.get("p50_ms")),
            _ms_to_s(fresh.get("p99_ms")),
            3.0,
        ),
    ]
