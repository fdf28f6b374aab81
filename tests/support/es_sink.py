"""Helpers of the es_sink's integration tests: one test's names (topics, group, indices, aliases),
the service as a child process, documents read back, and records spread over a UTC midnight."""

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch

from support.kafka import produce
from support.services import ServiceProcess, as_kafka, enriched_record

StackEnv = dict[str, str]
MIDNIGHT_MS = int(datetime(2026, 11, 23, tzinfo=UTC).timestamp() * 1000)
HOUR_MS = 3_600_000


@dataclass
class EsSinkCase:
    """One test's names, and the means to run the service and read what it indexed."""

    stack_env: StackEnv
    es: Elasticsearch
    workdir: Path
    ratings_topic: str
    alerts_topic: str
    dlq_topic: str
    group: str
    prefix: str
    started: int = 0

    @property
    def ratings_alias(self) -> str:
        return f"{self.prefix}ratings"

    @property
    def alerts_alias(self) -> str:
        return f"{self.prefix}alerts"

    def env(self, url: str | None = None, group: str | None = None, **extra: str) -> dict[str, str]:
        return {
            "ES_SINK_BOOTSTRAP_SERVERS": self.stack_env["KAFKA_BOOTSTRAP_SERVERS"],
            "ES_SINK_GROUP_ID": group or self.group,
            "ES_SINK_INPUT_TOPICS": json.dumps([self.ratings_topic, self.alerts_topic]),
            "ES_SINK_ALERT_TOPICS": json.dumps([self.alerts_topic]),
            "ES_SINK_DLQ_TOPIC": self.dlq_topic,
            "ES_SINK_URL": url or self.stack_env["ELASTICSEARCH_URL"],
            "ES_SINK_RATINGS_INDEX_PREFIX": f"{self.ratings_alias}-",
            "ES_SINK_RATINGS_ALIAS": self.ratings_alias,
            "ES_SINK_ALERTS_INDEX_PREFIX": f"{self.alerts_alias}-",
            "ES_SINK_ALERTS_ALIAS": self.alerts_alias,
            "ES_SINK_BATCH_MAX_RECORDS": "200",
            "ES_SINK_BATCH_MAX_WAIT_MS": "200",
            "ES_SINK_RETRY_INITIAL_MS": "200",
            "ES_SINK_RETRY_MAX_MS": "1000",
            **extra,
        }

    def service(self, **env: str) -> ServiceProcess:
        """A new process with its own folder: its metrics file starts empty."""
        self.started += 1
        workdir = self.workdir / f"run-{self.started}"
        workdir.mkdir()
        return ServiceProcess("services.es_sink", "ES_SINK_", self.env(**env), workdir).start()

    def produce(self, topic: str, records: list[dict[str, Any]]) -> None:
        produce(self.stack_env, topic, [as_kafka(r) for r in records])

    def docs(self, alias: str) -> dict[str, dict[str, Any]]:
        """Every document readable through the alias, by _id (after a refresh)."""
        self.es.indices.refresh(index=alias)
        hits = self.es.search(index=alias, size=10_000, query={"match_all": {}})["hits"]["hits"]
        return {h["_id"]: {"_index": h["_index"], **h["_source"]} for h in hits}

    def count(self, alias: str) -> int:
        self.es.indices.refresh(index=alias)
        return int(self.es.count(index=alias)["count"])


def ratings_over_midnight(n: int, first_id: int = 1, hours: int = 4) -> list[dict[str, Any]]:
    """n records evenly from 2 hours before to `hours - 2` hours after midnight (UTC)."""
    start = MIDNIGHT_MS - 2 * HOUR_MS
    step = hours * HOUR_MS // n
    return [enriched_record(first_id + i, rating_time=start + i * step) for i in range(n)]


def alerts_among(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["stars"] < 3 and r["club_status"] == "platinum"]
