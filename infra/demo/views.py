"""What the demo shows and checks of the materialized views, through the query service's HTTP
API: freshness, the rows of the customers behind the latest alerts, the newest hour's segments,
and at the end every row of every view that the run's records touch against counts recomputed
from the enriched topic, with the views job's own rules (late hours, key bounds)."""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from enrichment_job.views.settings import ViewsSettings
from enrichment_job.views.transforms import HOUR_MS, REQUIRED
from infra.demo.pipeline import VIEWS_PORT
from infra.demo.reconcile import decode_json

BASE = f"http://127.0.0.1:{VIEWS_PORT}"


def get(path: str, timeout_s: float = 1.0) -> Any:
    """The service's JSON answer, or None when it is not up or answers an error."""
    try:
        with urllib.request.urlopen(BASE + path, timeout=timeout_s) as response:  # noqa: S310 (our URL)
            return json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def catalog() -> dict[str, dict[str, Any]]:
    answer = get("/views")
    return {v["name"]: v for v in answer.get("views", [])} if isinstance(answer, dict) else {}


def view_lines(alerts: list[dict[str, Any]]) -> list[str]:
    views = catalog()
    if not views:
        return ["  (the views query service is starting)"]
    lines = []
    now_ms = time.time() * 1000
    for name, view in sorted(views.items()):
        fresh = view.get("freshness") or {}
        newest = fresh.get("max_rating_time")
        behind = f"{(now_ms - newest) / 1000:,.1f} s behind the newest rating" if newest else "no rating yet"
        lines.append(f"  {name}: {view.get('rows', 0):,} rows, {behind}")
    for alert in list(reversed(alerts))[:3]:
        row = get(f"/views/customer_ratings/{int(alert.get('user_id', 0))}", 0.3)
        if isinstance(row, dict):
            lines.append(
                f"  customer {row['user_id']} ({row.get('full_name')}): {row['unhappy_ratings']} unhappy "
                f"of {row['ratings']} ratings, average {row['average_stars']:.1f}"
            )
    hour = time.strftime("%Y-%m-%dT%H", time.gmtime())
    segments = get(f"/views/segment_hourly?hour={urllib.parse.quote(hour)}&limit=100")
    rows = sorted((segments or {}).get("rows", []), key=lambda r: -int(r["ratings"]))[:4]
    for r in rows:
        lines.append(
            f"  {hour}h {r['club_status']:>9} {r['channel']:>8}: {r['ratings']:,} ratings, average "
            f"{r['average_stars']:.2f}, {r['unhappy_ratings']:,} unhappy, {r['customers']:,} customers"
        )
    return lines


@dataclass(frozen=True)
class Rules:
    """What the views job counts by: the settings the demo runs it with."""

    unhappy_below: int
    lateness_ms: int
    max_key_bytes: int

    @classmethod
    def of(cls, settings: ViewsSettings) -> "Rules":
        return cls(settings.unhappy_stars_below, settings.window_lateness_s * 1000, settings.max_key_bytes)


VIEW_ROWS = " rows of the run's records"  # a view's check in the reconciliation: "<view>" + this
# The view the demo creates at run time from its SQL file (`create_example`).
EXAMPLE = "platinum_customers"
EXAMPLE_FILE = Path(__file__).resolve().parents[2] / "views" / "examples" / f"{EXAMPLE}.sql"
BUILT_IN = ("customer_ratings", "segment_hourly")
# What each view's recount compares, per row.
COMPARED = {
    "customer_ratings": ("ratings", "unhappy_ratings", "stars_sum", "last_rating_id"),
    "segment_hourly": ("ratings", "unhappy_ratings", "stars_sum", "customers"),
    EXAMPLE: ("ratings", "last_rating_time"),
}
Key = tuple[Any, ...]


def segment_key(record: dict[str, Any], rules: Rules) -> Key | None:
    """A record's segment_hourly key (club status, channel, UTC hour), or None when the view
    refuses it: released after its hour's window closed, or a key over the byte bound."""
    status = (record.get("club_status") or "unknown") if record.get("customer_matched") else "unmatched"
    channel = record.get("channel")
    channel = "unknown" if channel is None else str(channel)
    start_ms = record["rating_time"] // HOUR_MS * HOUR_MS
    if record["cdc_watermark_ms"] >= start_ms + HOUR_MS + rules.lateness_ms:
        return None
    hour = datetime.fromtimestamp(start_ms / 1000, UTC)
    as_text = len(status.encode()) + len(channel.encode()) + len(hour.strftime("%Y-%m-%d %H:%M:%S"))
    return None if as_text > rules.max_key_bytes else (status, channel, hour.strftime("%Y-%m-%dT%H"))


class Recount:
    """Each view's rows, for the keys asked, counted from enriched records as the views job
    counts them."""

    def __init__(self, rules: Rules, wanted: dict[str, set[Key]]) -> None:
        self.rules, self.wanted = rules, wanted
        self.counts: dict[str, dict[Key, dict[str, int]]] = {v: {} for v in COMPARED}
        self.last: dict[Key, tuple[int, int]] = {}
        self.users: dict[Key, set[int]] = defaultdict(set)

    @classmethod
    def of_run(cls, rules: Rules, records: list[dict[str, Any]]) -> "Recount":
        """For the rows the run's records touch."""
        segments = {segment_key(r, rules) for r in records}
        return cls(
            rules,
            {
                "customer_ratings": {(r["user_id"],) for r in records},
                "segment_hourly": {k for k in segments if k is not None},
                EXAMPLE: {(r["user_id"],) for r in records if r.get("club_status") == "platinum"},
            },
        )

    def _row(self, view: str, key: Key) -> dict[str, int]:
        return self.counts[view].setdefault(key, dict.fromkeys(COMPARED[view], 0))

    def add(self, r: dict[str, Any]) -> None:
        unhappy = int(r["stars"] < self.rules.unhappy_below)
        key: Key | None = (r["user_id"],)
        if key in self.wanted["customer_ratings"]:
            row = self._row("customer_ratings", key)
            row["ratings"] += 1
            row["unhappy_ratings"] += unhappy
            row["stars_sum"] += r["stars"]
            newest = (r["rating_time"], r["rating_id"])
            if newest > self.last.get(key, (-1, -1)):
                self.last[key], row["last_rating_id"] = newest, r["rating_id"]
        if r.get("club_status") == "platinum" and (r["user_id"],) in self.wanted[EXAMPLE]:
            row = self._row(EXAMPLE, (r["user_id"],))
            row["ratings"] += 1
            row["last_rating_time"] = max(row["last_rating_time"], r["rating_time"])
        key = segment_key(r, self.rules)
        if key is not None and key in self.wanted["segment_hourly"]:
            row = self._row("segment_hourly", key)
            row["ratings"] += 1
            row["unhappy_ratings"] += unhappy
            row["stars_sum"] += r["stars"]
            self.users[key].add(r["user_id"])
            row["customers"] = len(self.users[key])

    def earliest_ms(self) -> int:
        """No record written before this can count in a wanted segment_hourly row: a rating's
        time is at most the job's future bound (5 min) after it was produced, and its enriched
        record is written later still."""
        hours = [
            datetime.strptime(k[2], "%Y-%m-%dT%H").replace(tzinfo=UTC) for k in self.wanted["segment_hourly"]
        ]
        return int(min(hours).timestamp() * 1000) - 600_000 if hours else 1 << 62


def recount(servers: str, topic: str, count: Recount) -> int:
    """Adds every record of the whole enriched topic (read_committed) to `count`; returns how
    many records were not UTF-8 (they are read as far as they can be, and reported)."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"demo-views-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    keys = {str(k[0]).encode() for k in count.wanted["customer_ratings"]}
    since_ms = count.earliest_ms()
    at_end: set[int] = set()
    not_utf8 = 0
    try:
        while len(at_end) < len(parts):
            for msg in consumer.consume(10_000, 1.0):
                value = msg.value()
                if msg.error() is not None:
                    at_end.add(int(msg.partition() or 0))
                    continue
                if value is None or (msg.key() not in keys and msg.timestamp()[1] < since_ms):
                    continue
                record, utf8 = decode_json(value)
                not_utf8 += not utf8
                if isinstance(record, dict) and all(record.get(f) is not None for f in REQUIRED):
                    count.add(record)
    finally:
        consumer.close()
    return not_utf8


def create_example(env: dict[str, str]) -> str:
    """Creates the example view from its SQL file while the views job runs, as a user would
    (`python -m enrichment_job.views create`); one that a run before created stays. Returns what
    the command said."""
    done = subprocess.run(
        [sys.executable, "-m", "enrichment_job.views", "create", str(EXAMPLE_FILE)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **env},
    )
    said = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode != 0 and not any("the view exists" in line for line in said):
        raise SystemExit(f"creating the view {EXAMPLE} failed:\n" + "\n".join(said[-20:]))
    return said[-1] if said else ""


def behind(servers: str, topic: str, view: dict[str, Any]) -> int:
    """Records of `topic` the view (an entry of GET /views) has not reflected yet: its marker's
    offsets against the topic's ends now."""
    done = (view.get("freshness") or {}).get("enriched_to") or {}
    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"views-behind-{uuid.uuid4().hex}"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        consumer.close()
    return sum(max(0, end - int(done.get(str(p), 0))) for p, end in ends.items())


def caught_up(servers: str, topic: str, required: tuple[str, ...] = BUILT_IN) -> bool:
    """The `required` views are served and reflect the enriched topic up to its end now. Other
    views the service lists are not waited for: a view another run declared on the same stack
    (its catalog outlives a run) may be run by no views job of this one."""
    views = catalog()
    return all(name in views and behind(servers, topic, views[name]) == 0 for name in required)


def rows_matching(view: str, expected: dict[Key, dict[str, int]]) -> tuple[int, list[str]]:
    """How many of the view's expected rows the service has exactly, and the first few that differ."""
    matching, wrong = 0, list[str]()
    for key, want in expected.items():
        path = "/".join(urllib.parse.quote(str(part), safe="") for part in key)
        row = get(f"/views/{view}/{path}", 2.0)
        got = {c: row.get(c) for c in COMPARED[view]} if isinstance(row, dict) else None
        if got == want:
            matching += 1
        elif len(wrong) < 3:
            wrong.append(f"{view} {'/'.join(map(str, key))}: view {got}, enriched topic {want}")
    return matching, wrong
