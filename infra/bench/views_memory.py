"""make bench-views-memory: the views job's memory and time on a backlog of large rows.

A view's row weighs what its group keeps, not what a batch read: `customer_ratings` keeps each
customer's last message, so a batch of ratings from many customers with long messages changes
rows of up to a megabyte each. Against the running local stack, on topics of its own, for each
phase: --ratings enriched records, each of its own customer, with messages of --message-bytes
(`small`: 100 bytes first, then `large`), are written to a fresh enriched topic; a fresh views
job with its defaults (or VIEWS_JOB_MAX_BATCH_BYTES of each --max-batch-bytes given) starts on
it. The benchmark samples the resident memory of the job's process tree (its Python, the
driver JVM and Spark's Python workers) every 0.2 s, and reads `customer_ratings`' changelog
topic, until it holds a row for every customer or the job exits.

Figures, per phase: the rows out of the ratings, seconds from the job's start to the last row,
the tree's largest RSS, the job's exit code when it exited, and how many of its batches it
collected in slices of at most the bound, in how many collects, the largest in bytes (its log's
`VIEWS_JOB_MAX_BATCH_BYTES` lines). Printed, and written as JSON (--out).
"""

import json
import re
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from infra.bench.backlog_memory import parse_phases, run_phases
from infra.bench.job import committed_reader
from infra.bench.results import exit_on_sigterm
from infra.bench.views import create_topics, spawn, stop_all, topics_for, views_job_env
from infra.stack.secrets import read_env_file
from infra.stack.settings import StackSettings
from infra.stack.stack import stack_env_path, tree_rss_kib

FIRST_USER = 940_000
START_MS = 1_796_000_000_000
# The job's line for a batch whose rows it took in more than one collect (`Slices.describe`).
SLICED_BATCH = re.compile(r"batch \d+: \d+ rows of \d+ bytes taken in (\d+) collects of at most (\d+) bytes")


def enriched(i: int, message_bytes: int) -> tuple[bytes, bytes]:
    """Enriched record i: customer FIRST_USER + i, a message of `message_bytes` (the i % 26th letter)."""
    user = FIRST_USER + i
    record = {
        "rating_id": i,
        "user_id": user,
        "stars": 1 + i % 5,
        "route_id": 1,
        "rating_time": START_MS + i,
        "channel": "web",
        "message": chr(97 + i % 26) * message_bytes,
        "club_status": "platinum",
        "full_name": "Ann Example",
        "customer_matched": True,
        "cdc_watermark_ms": START_MS + i + 100,
    }
    return str(user).encode(), json.dumps(record).encode()


def produce(servers: str, topic: str, count: int, message_bytes: int) -> float:
    """`count` enriched records to `topic`; MB produced."""
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 50, "enable.idempotence": True})
    total = 0
    for i in range(count):
        key, value = enriched(i, message_bytes)
        total += len(value)
        producer.produce(topic, key=key, value=value)
        if i % 100 == 99:
            producer.flush(60)
    if producer.flush(60):
        raise SystemExit(f"the backlog did not reach {topic}")
    return total / 1e6


class Rows:
    """The keys with a row in a changelog topic (read_committed), read as they come."""

    def __init__(self, servers: str, topic: str) -> None:
        self.consumer = committed_reader(servers, topic)
        self.keys: set[bytes] = set()

    def read(self, seconds: float) -> int:
        """Reads for up to `seconds`; the keys with a row so far."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            for message in self.consumer.consume(500, min(left, 0.2)):
                key = message.key() if message.error() is None else None
                if isinstance(key, bytes):
                    (self.keys.discard if message.value() is None else self.keys.add)(key)
        return len(self.keys)

    def close(self) -> None:
        self.consumer.close()


def phase(env: dict[str, str], count: int, message_bytes: int, bound: int, work: Path) -> dict[str, Any]:
    """One fresh views job over a fresh enriched topic of `count` records."""
    servers = env["KAFKA_BOOTSTRAP_SERVERS"]
    suffix = uuid.uuid4().hex[:8]
    job_topics, view_topics = topics_for(suffix)
    created = create_topics(servers, job_topics, view_topics)
    log = work / f"views-{suffix}.log"
    procs = {}
    rows = Rows(servers, view_topics["customer_ratings"])
    try:
        produced = produce(servers, job_topics["enriched"], count, message_bytes)
        print(f"  {produced:.0f} MB produced; starting the views job (log {log}) ...", flush=True)
        views_env = views_job_env(env, job_topics, view_topics, work / f"state-{suffix}")
        if bound:
            views_env["VIEWS_JOB_MAX_BATCH_BYTES"] = str(bound)
        started = time.monotonic()
        procs["views"] = proc = spawn("enrichment_job.views", views_env, log)
        peak_kib, seen, done_s, shown = 0, 0, None, 0.0
        while time.monotonic() - started < 900 and proc.poll() is None:
            peak_kib = max(peak_kib, tree_rss_kib(proc.pid))
            seen = rows.read(0.2)
            if seen >= count:
                done_s = time.monotonic() - started
                break
            if time.monotonic() - shown >= 10:
                shown = time.monotonic()
                print(
                    f"  {time.monotonic() - started:.0f} s: {seen} of {count} rows,"
                    f" {peak_kib / 1024:.0f} MB at most so far",
                    flush=True,
                )
        exited = proc.poll()
    finally:
        rows.close()
        stop_all(procs, servers, created, view_topics["prefix"])
        shutil.rmtree(work / f"state-{suffix}", ignore_errors=True)  # its log stays
    text = log.read_text(errors="replace") if log.exists() else ""
    sliced = [(int(m.group(1)), int(m.group(2))) for m in SLICED_BATCH.finditer(text)]
    return {
        "ratings": count,
        "message_bytes": message_bytes,
        "backlog_mb": round(produced, 1),
        "max_batch_bytes": bound or "default",
        "rows": seen,
        "all_rows_after_s": round(done_s, 1) if done_s is not None else None,
        "peak_tree_rss_mb": round(peak_kib / 1024),
        "exited_with": exited,
        "batches_in_slices": len(sliced),
        "collects": sum(n for n, _ in sliced),
        "largest_collect_bytes": max((b for _, b in sliced), default=None),
    }


def main(argv: list[str] | None = None) -> int:
    exit_on_sigterm()
    args = parse_phases(
        argv,
        prog="make bench-views-memory",
        doc=__doc__,
        ratings=1_400,
        message_bytes=850_000,
        setting="VIEWS_JOB_MAX_BATCH_BYTES",
        result="views_memory.json",
    )
    env = read_env_file(stack_env_path(StackSettings()))
    work = args.out.parent / f"views-memory-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    run_phases(args, lambda n, size, bound: phase(env, n, size, bound, work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
