"""What the demo shows and checks of the materialized views, through the query service's HTTP
API: freshness, the rows of the customers behind the latest alerts, the newest hour's segments,
and at the end every customer_ratings row of the run's customers against counts recomputed from
the enriched topic."""

import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from infra.demo.pipeline import VIEWS_PORT

BASE = f"http://127.0.0.1:{VIEWS_PORT}"
UNHAPPY_BELOW = 3  # the views job's default, the alert's threshold
COMPARED = ("ratings", "unhappy_ratings", "stars_sum", "last_rating_id")


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


def expected_customer_rows(servers: str, topic: str, users: set[int]) -> dict[int, dict[str, int]]:
    """The customer_ratings figures of `users`, recomputed from the whole enriched topic
    (read_committed): what the view counts."""
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
    keys = {str(u).encode() for u in users}
    found: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COMPARED, 0))
    last: dict[int, tuple[int, int]] = {}
    at_end: set[int] = set()
    try:
        while len(at_end) < len(parts):
            for msg in consumer.consume(10_000, 1.0):
                value = msg.value()
                if msg.error() is not None:
                    at_end.add(int(msg.partition() or 0))
                    continue
                if msg.key() not in keys or value is None:
                    continue
                r = json.loads(value)
                row = found[r["user_id"]]
                row["ratings"] += 1
                row["unhappy_ratings"] += r["stars"] < UNHAPPY_BELOW
                row["stars_sum"] += r["stars"]
                newest = (r["rating_time"], r["rating_id"])
                if newest > last.get(r["user_id"], (-1, -1)):
                    last[r["user_id"]], row["last_rating_id"] = newest, r["rating_id"]
    finally:
        consumer.close()
    return dict(found)


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


def caught_up(servers: str, topic: str) -> bool:
    """customer_ratings reflects the enriched topic up to its end now."""
    return behind(servers, topic, catalog().get("customer_ratings") or {}) == 0


def rows_matching(expected: dict[int, dict[str, int]]) -> tuple[int, list[str]]:
    """How many of the expected rows the service has exactly, and the first few that differ."""
    matching, wrong = 0, list[str]()
    for user, want in expected.items():
        row = get(f"/views/customer_ratings/{user}", 2.0)
        got = {c: row.get(c) for c in COMPARED} if isinstance(row, dict) else None
        if got == want:
            matching += 1
        elif len(wrong) < 3:
            wrong.append(f"customer {user}: view {got}, enriched topic {want}")
    return matching, wrong
