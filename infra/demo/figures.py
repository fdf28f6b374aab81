"""What the live view and the summary show, read from the outside of each stage: Kafka end
offsets and consumer-group lag, each program's Prometheus endpoint (the load generator's metrics
file), Elasticsearch's document count, the lake's objects, and the latest alerts."""

import contextlib
import json
import time
import urllib.request
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from infra.stack.health import http_json

TOPICS = {
    "ratings": "ratings",
    "enriched": "ratings-with-customer-data",
    "alerts": "unhappy-platinum-customers",
    "enrichment_dlq": "enrichment-dlq",
    "slack_dlq": "slack-notifier-dlq",
    "es_dlq": "es-sink-dlq",
    "s3_dlq": "s3-sink-dlq",
    "views_dlq": "views-dlq",
}
GROUPS = {
    "slack_notifier": ("slack-notifier", ("alerts",)),
    "es_sink": ("es-sink", ("enriched", "alerts")),
    "s3_sink": ("s3-sink", ("enriched",)),
}


@dataclass
class Snapshot:
    at: float
    ends: dict[str, int] = field(default_factory=dict)
    lag: dict[str, int | None] = field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # from metrics files
    samples: dict[str, dict[str, float]] = field(default_factory=dict)  # scraped, per program
    es_docs: int | None = None
    lake_files: int | None = None

    def since(self, start: "Snapshot", role: str) -> int:
        return self.ends.get(role, 0) - start.ends.get(role, 0)

    def total(self, program: str, name: str) -> float:
        """A metric the program exports (summed over labels), 0 until it answers a scrape."""
        return sample(self.samples.get(program, {}), name) or 0.0


def scrape(port: int, timeout_s: float = 10) -> dict[str, float]:
    """GET /metrics on 127.0.0.1:`port`: `name{labels}` -> value, comments dropped."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
        lines = response.read().decode().splitlines()
    samples = [line.rsplit(" ", 1) for line in lines if line[:1] not in ("#", "")]
    return {name: float(value) for name, value in samples}


def sample(samples: dict[str, float], name: str) -> float | None:
    """The sum of a metric's samples over its labels (None when the program has not sent it)."""
    found = [v for k, v in samples.items() if k.split("{", 1)[0] == name]
    return sum(found) if found else None


def labelled(samples: dict[str, float], name: str, label: str) -> str | None:
    """The value of `label` on the sample of `name` that is 1 (a Prometheus state set)."""
    for key, value in samples.items():
        if key.split("{", 1)[0] == name and value == 1 and f'{label}="' in key:
            return key.split(f'{label}="', 1)[1].split('"', 1)[0]
    return None


def read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


class Observer:
    """Reads the figures; cheap enough to call every second (the lake listing every fifth)."""

    def __init__(
        self, stack: dict[str, str], metrics_files: dict[str, Path], endpoints: dict[str, int], s3: Any
    ) -> None:
        servers = stack["KAFKA_BOOTSTRAP_SERVERS"]
        self.stack, self.metrics_files, self.s3 = stack, metrics_files, s3
        self.endpoints = endpoints  # program -> the port of its Prometheus endpoint
        self.admin = AdminClient({"bootstrap.servers": servers})
        self.offsets = Consumer({"bootstrap.servers": servers, "group.id": f"demo-{uuid.uuid4().hex}"})
        self.partitions = {
            role: sorted(self.offsets.list_topics(topic, timeout=10).topics[topic].partitions)
            for role, topic in TOPICS.items()
        }
        self.alerts = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": f"demo-alerts-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.latest_alerts: deque[dict[str, Any]] = deque(maxlen=5)
        self._ticks = 0
        self._lake_files: int | None = None

    def follow_alerts(self) -> None:
        """Show alerts from now on (the ones this run fires)."""
        self.alerts.assign(self.ends("alerts"))

    def ends(self, role: str) -> list[TopicPartition]:
        """Where each partition of a topic ends now: later records come after."""
        topic = TOPICS[role]
        return [TopicPartition(topic, p, self.end_offset(topic, p)) for p in self.partitions[role]]

    def end_offset(self, topic: str, partition: int) -> int:
        return int(self.offsets.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)[1])

    def snapshot(self) -> Snapshot:
        snap = Snapshot(at=time.time())
        ends = {(tp.topic, tp.partition): tp.offset for role in TOPICS for tp in self.ends(role)}
        for role, topic in TOPICS.items():
            snap.ends[role] = sum(ends[(topic, p)] for p in self.partitions[role])
        for service, (group, roles) in GROUPS.items():
            snap.lag[service] = self._lag(group, roles, ends)
        snap.metrics = {name: read_json(path) for name, path in self.metrics_files.items()}
        for name, port in self.endpoints.items():
            with contextlib.suppress(OSError, ValueError):  # not up yet, or restarting
                snap.samples[name] = scrape(port, timeout_s=1)
        with contextlib.suppress(OSError, ValueError):
            snap.es_docs = int(http_json("GET", f"{self.stack['ELASTICSEARCH_URL']}/ratings/_count")["count"])
        if self._ticks % 5 == 0:
            self._lake_files = self._count_lake_files()
        self._ticks += 1
        snap.lake_files = self._lake_files
        self._poll_alerts()
        return snap

    def _lag(self, group: str, roles: tuple[str, ...], ends: dict[tuple[str, int], int]) -> int | None:
        """The group's records not yet committed, against the end offsets read for this tick."""
        wanted = [TopicPartition(TOPICS[r], p) for r in roles for p in self.partitions[r]]
        try:
            future = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])
            committed = future[group].result(5).topic_partitions
        except KafkaException:
            return None
        return sum(ends[(str(tp.topic), int(tp.partition))] - max(int(tp.offset), 0) for tp in committed)

    def _count_lake_files(self) -> int | None:
        count = 0
        try:
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.stack["S3_BUCKET"], Prefix="ratings-with-customer-data/"
            )
            for page in pages:
                count += len(page.get("Contents", []))
        except Exception:  # noqa: BLE001 - a figure on a screen; the S3 sink reports real failures
            return None
        return count

    def _poll_alerts(self) -> None:
        for msg in self.alerts.consume(100, 0):
            value = msg.value()
            if msg.error() is None and value:
                with contextlib.suppress(ValueError):
                    self.latest_alerts.append(json.loads(value))

    def close(self) -> None:
        self.alerts.close()
        self.offsets.close()
