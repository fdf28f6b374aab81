"""python -m infra.bench.backlog_memory: the enrichment job's memory on a backlog of large ratings.

Against the running local stack (its addresses from .state/stack.env): for each phase, a fresh
set of topics gets a backlog of ratings before a fresh job (the join on the driver, local mode)
starts on them; the benchmark samples the resident memory of the job's Python process (where
the join holds its batches: the JVM's heap is ENRICH_DRIVER_MEMORY's) every 0.2 s until the
job's metrics count every rating enriched. Phases: `small` (ratings of a few hundred bytes: the
job's start, its customer table and the CDC read-ahead), then `large` (ratings with
`--message-bytes` messages), once for each `--max-batch-bytes` given (ENRICH_MAX_BATCH_BYTES;
0: the job's default). Prints progress, writes the figures to bench-results/backlog_memory.json
and removes its topics afterwards.
"""

import argparse
import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from infra.bench.job import JOB_TOPIC_ROLES, start_job
from infra.bench.results import write_result
from infra.stack.secrets import read_env_file
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.stack import rss_kib, stack_env_path

FIRST_USER = 930_000  # ids no customer has: every rating comes out unmatched, at once (grace 0)
USERS = 50


def backlog(servers: str, topic: str, count: int, message_bytes: int, users: int = USERS) -> float:
    """`count` ratings (ids 0, 1, ...) of `message_bytes` messages (rating i's: a letter, the
    i % 26th, repeated) to `topic`, of `users` customers no one has, each customer's on partition
    `user_id % 2`; MB produced."""
    # idempotent: a retried request is neither written twice nor put after a later one
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 50, "enable.idempotence": True})
    now, total = int(time.time() * 1000), 0
    for i in range(count):
        user = FIRST_USER + i % users
        rating = {
            "rating_id": i,
            "user_id": user,
            "stars": 4,
            "route_id": 1,
            "rating_time": now,
            "channel": "web",
            "message": chr(97 + i % 26) * message_bytes,
        }
        value = json.dumps(rating).encode()
        total += len(value)
        producer.produce(topic, key=str(user).encode(), value=value, partition=user % 2)
        if i % 200 == 199:
            producer.flush(60)
    if producer.flush(60):
        raise SystemExit(f"the backlog did not reach {topic}")
    return total / 1e6


def rss_mb(pid: int) -> float | None:
    """The process's resident memory (its own, not its children's), None once it is gone."""
    kib = rss_kib(pid)
    return None if kib is None else kib / 1024


def phase(
    env: dict[str, str], count: int, message_bytes: int, max_batch_bytes: int, out: Path
) -> dict[str, Any]:
    """One job over a fresh backlog: the Python process's largest RSS and the time to enrich it all."""
    servers = env["KAFKA_BOOTSTRAP_SERVERS"]
    suffix = uuid.uuid4().hex[:8]
    topics = {role: f"bench-{role}-{suffix}" for role in JOB_TOPIC_ROLES}
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in topics.values()]).values():
        future.result(30)
    state = out.parent / f"backlog-memory-{suffix}"
    state.parent.mkdir(parents=True, exist_ok=True)
    extra = {"ENRICH_JOIN_IN": "driver"}
    if max_batch_bytes:
        extra["ENRICH_MAX_BATCH_BYTES"] = str(max_batch_bytes)
    try:
        produced = backlog(servers, topics["ratings"], count, message_bytes)
        print(
            f"  {produced:.0f} MB produced; starting the job (log {state.with_suffix('.log')}) ...",
            flush=True,
        )
        started = time.monotonic()
        proc = start_job(env, topics, state, 0, state.with_suffix(".log"), extra=extra)
        peak, done_s = 0.0, None
        try:
            while time.monotonic() - started < 900 and proc.poll() is None:
                peak = max(peak, rss_mb(proc.pid) or 0.0)
                metrics = state / "metrics.json"
                if metrics.exists() and json.loads(metrics.read_text())["totals"]["enriched"] >= count:
                    done_s = time.monotonic() - started
                    break
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
            proc.wait(120)
    finally:
        admin.delete_topics(list(topics.values()))
        shutil.rmtree(state, ignore_errors=True)  # its log stays beside it
    return {
        "ratings": count,
        "message_bytes": message_bytes,
        "backlog_mb": round(produced, 1),
        "max_batch_bytes": max_batch_bytes or "default",
        "peak_python_rss_mb": round(peak),
        "enriched_all_after_s": round(done_s, 1) if done_s is not None else None,
    }


def parse_phases(
    argv: list[str] | None,
    *,
    prog: str,
    doc: str | None,
    ratings: int,
    message_bytes: int,
    setting: str,
    result: str,
) -> argparse.Namespace:
    """The options of a backlog-memory benchmark: its backlog's size, its large messages, the
    bounds (`setting`) of its large phases, and its JSON file (`result` under bench-results)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ratings", type=int, default=ratings, help="records in each backlog")
    parser.add_argument("--message-bytes", type=int, default=message_bytes, help="a large record's message")
    parser.add_argument(
        "--max-batch-bytes",
        type=int,
        nargs="*",
        default=[0],
        help=f"{setting} of each large phase (0: the default)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / result)
    parser.set_defaults(setting=setting)  # for run_phases' lines
    return parser.parse_args(argv)


def run_phases(args: argparse.Namespace, phase: Callable[[int, int, int], dict[str, Any]]) -> None:
    """A `small` phase (100-byte messages), then a `large` one per bound (`args.setting`'s):
    `phase(records, message bytes, bound)` each; their figures printed and written to --out."""
    runs = [("small", 100, 0)] + [("large", args.message_bytes, bound) for bound in args.max_batch_bytes]
    results: dict[str, Any] = {"machine_cores": os.cpu_count(), "phases": []}
    for name, message_bytes, bound in runs:
        bounded = f"{args.setting} {bound or 'default'}"
        print(f"{name}: {args.ratings} records of {message_bytes}-byte messages, {bounded}")
        figures = {"phase": name, **phase(args.ratings, message_bytes, bound)}
        print(f"  {json.dumps(figures)}", flush=True)
        results["phases"].append(figures)
    write_result(results, args.out)


def main(argv: list[str] | None = None) -> int:
    args = parse_phases(
        argv,
        prog="python -m infra.bench.backlog_memory",
        doc=__doc__,
        ratings=2_000,
        message_bytes=450_000,
        setting="ENRICH_MAX_BATCH_BYTES",
        result="backlog_memory.json",
    )
    env = read_env_file(stack_env_path(StackSettings()))
    run_phases(args, lambda n, size, bound: phase(env, n, size, bound, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
