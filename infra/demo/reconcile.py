"""The end-of-run check: every rating this run produced is enriched once, indexed once and in the
lake once; every alert it should raise is raised once and posted once; dead letters are named.

Counts are taken per stage by rating id (this run's ids are a contiguous range), so records of
earlier runs on the same topics, index and lake do not blur them.
"""

import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc
from confluent_kafka import Consumer, TopicPartition

from enrichment_job.kafka.claim_check import Claimed
from infra.stack.health import http_json
from services.s3_sink.config import S3SinkSettings
from services.s3_sink.lake_query import lake_dataset

ALERT_RULE = (3, "platinum")  # the job's defaults: stars < 3 and club_status = platinum


def decode_json(value: bytes) -> tuple[Any, bool]:
    """A record's JSON value (None when it is not JSON), and whether its bytes were UTF-8. Bytes
    that are not are read with replacement characters rather than stopping the reader: a
    standard parser fails on them, and the reconciliation reports them."""
    try:
        text, utf8 = value.decode(), True
    except UnicodeDecodeError:
        text, utf8 = value.decode(errors="replace"), False
    try:
        return json.loads(text), utf8
    except ValueError:
        return None, utf8


class TopicCounter:
    """Reads a topic (read_committed) from given offsets on, counting records per rating id."""

    def __init__(self, servers: str, start: list[TopicPartition], id_range: tuple[int, int] | None) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": f"demo-reconcile-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign(start)
        self.id_range = id_range
        self.ids: Counter[int] = Counter()
        self.records: list[dict[str, Any]] = []
        self.headers: list[dict[str, bytes]] = []
        self.valued: list[bool] = []  # beside `headers`: whether the record has a value
        self.not_utf8 = 0  # records whose value is not UTF-8

    def read(self, budget_s: float | None = None) -> None:
        """Reads until the topic is quiet for 1 s, or for at most `budget_s` (a caller that
        also supervises processes must not be held while the load goes on)."""
        until = None if budget_s is None else time.monotonic() + budget_s
        wait_s = 1.0 if budget_s is None else min(1.0, budget_s)
        while batch := self.consumer.consume(10_000, wait_s):
            for msg in batch:
                if msg.error() is not None:
                    continue
                if self.id_range is None:
                    headers = msg.headers() or []
                    pairs = headers.items() if isinstance(headers, dict) else headers
                    self.headers.append(
                        {k: v.encode() if isinstance(v, str) else (v or b"") for k, v in pairs}
                    )
                    self.valued.append(msg.value() is not None)
                    continue
                value, utf8 = decode_json(msg.value() or b"{}")
                self.not_utf8 += not utf8
                if not isinstance(value, dict):
                    continue
                if self.id_range[0] <= value.get("rating_id", -1) <= self.id_range[1]:
                    self.ids[value["rating_id"]] += 1
                    self.records.append(value)
            if until is not None and time.monotonic() >= until:
                return

    def close(self) -> None:
        self.consumer.close()


@dataclass
class Check:
    """A figure of one stage; with `want` it must equal that, without it is shown for reference."""

    name: str
    got: int | None
    want: int | None = None

    @property
    def ok(self) -> bool:
        return self.want is None or self.got == self.want


def percentiles(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)

    def at(q: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else None

    return {"p50": at(0.5), "p99": at(0.99), "max": round(ordered[-1], 3) if ordered else None}


@dataclass
class Reconciliation:
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    latency_s: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "reconciled": self.ok,
            "checks": [
                {"name": c.name.strip(), "got": c.got, "want": c.want, "ok": c.ok} for c in self.checks
            ],
            "latency_s": self.latency_s,
            "notes": self.notes,
        }

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @staticmethod
    def _mark(check: Check) -> str:
        if check.want is None:
            return "   "
        return "ok " if check.ok else "BAD"

    def text(self) -> str:
        width = max(len(c.name) for c in self.checks)
        lines = [
            f"  {self._mark(c)} {c.name.ljust(width)}  {'-' if c.got is None else f'{c.got:,}'}"
            + ("" if c.ok else f"  (expected {c.want:,})")
            for c in self.checks
        ]
        latency = [
            f"  latency {stage}: p50 {f['p50']} s, p99 {f['p99']} s, max {f['max']} s"
            for stage, f in self.latency_s.items()
        ]
        return "\n".join([*lines, *latency, *[f"  {n}" for n in self.notes]])


def es_count(url: str, index: str, id_range: tuple[int, int]) -> int | None:
    query = {"query": {"range": {"rating_id": {"gte": id_range[0], "lte": id_range[1]}}}}
    try:
        return int(http_json("POST", f"{url}/{index}/_count", query)["count"])
    except (OSError, ValueError, KeyError):
        return None


def lake_ids(settings: S3SinkSettings, id_range: tuple[int, int]) -> Counter[int] | None:
    """Rating ids in the lake within the range, with how often each occurs."""
    try:
        dataset = lake_dataset(settings)
        expr = (pc.field("rating_id") >= id_range[0]) & (pc.field("rating_id") <= id_range[1])
        table = dataset.to_table(columns=["rating_id"], filter=expr)
    except (OSError, ValueError):
        return None
    return Counter(table.column("rating_id").to_pylist())


# Checks that must come out 0 and that the fault matrix shows in no column of its own.
NOT_UTF8 = "enriched records and alerts not UTF-8"
WITHOUT_BYTES = "of them without their bytes"


def _this_run(h: dict[str, bytes], ratings_start: dict[int, int]) -> bool:
    """Whether a dead letter is of a rating this run produced (by its partition and offset)."""
    if h.get("dlq.topic") != b"ratings":
        return False
    partition, offset = int(h.get("dlq.partition", b"-1")), int(h.get("dlq.offset", b"-1"))
    return offset >= ratings_start.get(partition, 1 << 62)


def dlq_since(counter: TopicCounter, ratings_start: dict[int, int]) -> int:
    """Dead letters of ratings this run produced."""
    return sum(_this_run(h, ratings_start) for h in counter.headers)


def _claimed(h: dict[str, bytes]) -> bool:
    """Whether a dead letter's claim-check file is there with the bytes its headers give (a
    file:// location; one in an object store counts as there)."""
    claimed = Claimed.of(h)
    if claimed is None:
        return False
    path = claimed.local_path()
    if path is None:
        return True
    return path.is_file() and path.stat().st_size == claimed.size


def dlq_without_bytes(counter: TopicCounter, ratings_start: dict[int, int]) -> int:
    """Dead letters of ratings this run produced whose bytes are nowhere: no value, and no
    claim-check file (a rating with an empty value had none)."""
    return sum(
        _this_run(h, ratings_start)
        and not valued
        and h.get("dlq.reason") != b"empty value"
        and not _claimed(h)
        for h, valued in zip(counter.headers, counter.valued, strict=True)
    )
