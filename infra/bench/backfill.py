"""make bench-backfill: a view declared in SQL, created over a long history while ratings flow.

Against the running local stack, on topics of its own: seeds --customers customers, produces a
backlog of --history ratings and lets the enrichment job (fresh state) enrich them all, then
starts the views job (the two built-in views) and the views query service and waits until the
built-ins reflect the whole history. Then ratings flow at --rate per second for --flow seconds
(the job's latency is measured on them, as in `make bench-job`); --create-after seconds in, the
view in --view is created as users do (the CLI), and it backfills over the whole enriched topic
while the flow goes on.

Figures: how long the CLI's create took, seconds from the create to the view's `live` in
GET /views (the goal: 60 s over 1,000,000 enriched records), how far behind the enriched
topic each built-in view fell during the backfill (records, sampled every 2 s, and the worst as
seconds of the flow's rate), and the job's p50/p99 over the flow. Printed, and written as JSON
(--out).
"""

import argparse
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from infra.bench.job import Latencies, fixed_rate, produce_backlog, rating, seed_customers, start_job
from infra.bench.results import exit_on_sigterm
from infra.bench.views import (
    PORT,
    create_sql_views,
    create_topics,
    each_views_lag,
    service_env,
    spawn,
    stop_all,
    topics_for,
    views_job_env,
    wait_healthy,
    wait_views_caught_up,
    wait_views_live,
    write_results,
)
from infra.stack.secrets import read_env_file
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.stack import stack_env_path

GOAL_LIVE_S = 60.0
BUILT_IN = ("customer_ratings", "segment_hourly")


def topic_end(servers: str, topic: str) -> int:
    """The sum of `topic`'s end offsets (records and transaction markers)."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"bench-ends-{uuid.uuid4().hex}"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts)
    finally:
        consumer.close()


def wait_enriched(servers: str, topic: str, count: int, timeout_s: float) -> float:
    """Seconds until `topic` holds at least `count` offsets and has stopped growing for 5 s."""
    started = time.monotonic()
    last, still_since = -1, time.monotonic()
    while time.monotonic() - started < timeout_s:
        end = topic_end(servers, topic)
        if end != last:
            last, still_since = end, time.monotonic()
        elif end >= count and time.monotonic() - still_since >= 5:
            return round(time.monotonic() - started - 5, 1)
        time.sleep(1)
    raise SystemExit(f"the job enriched {last} of {count} records in {timeout_s:.0f} s: see its log")


class LagSampler(threading.Thread):
    """Each view's records behind the enriched topic, every 2 s: the worst seen per view."""

    def __init__(self, servers: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.servers, self.topic = servers, topic
        self.worst: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(2.0):
            for name, lag in (each_views_lag(self.servers, self.topic, PORT) or {}).items():
                self.worst[name] = max(lag, self.worst.get(name, 0))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="make bench-backfill", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--history", type=int, default=1_000_000, help="enriched records before the create")
    parser.add_argument("--rate", type=float, default=5_000, help="ratings per second during the flow")
    parser.add_argument("--flow", type=float, default=150, help="seconds of ratings at --rate")
    parser.add_argument("--create-after", type=float, default=30, help="seconds into the flow")
    parser.add_argument(
        "--view",
        type=Path,
        default=REPO_ROOT / "views" / "examples" / "stars_by_status.sql",
        help="the view to create (a SQL file)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "backfill.json")
    args = parser.parse_args(argv)
    if not 0 <= args.create_after < args.flow:
        parser.error("--create-after must fall within --flow")
    return args


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - one benchmark, its phases in order
    exit_on_sigterm()
    args = parse(argv)
    env = read_env_file(stack_env_path(StackSettings()))
    servers = env["KAFKA_BOOTSTRAP_SERVERS"]
    suffix = uuid.uuid4().hex[:8]
    job_topics, view_topics = topics_for(suffix)
    created = create_topics(servers, job_topics, view_topics)
    work = args.out.parent / f"backfill-{suffix}"
    work.mkdir(parents=True)
    results: dict[str, Any] = {"history": args.history, "rate": args.rate, "view": args.view.stem}
    procs = {}
    try:
        print(f"seeding {args.customers} customers ...", flush=True)
        ids = seed_customers(env, args.customers)
        print(f"producing a backlog of {args.history} ratings ...", flush=True)
        producer = Producer({"bootstrap.servers": servers, "linger.ms": 20, "compression.type": "lz4"})
        now_ms = int(time.time() * 1000)
        rnd = random.Random(7)  # noqa: S311 - test data
        backlog = [rating(rnd, ids, now_ms * 1000 + i, i, now_ms) for i in range(args.history)]
        produce_backlog(producer, job_topics["ratings"], backlog)
        print(f"the enrichment job enriches them (logs in {work}) ...", flush=True)
        procs["job"] = start_job(env, job_topics, work / "job", 0, work / "job.log")
        results["history_enriched_after_s"] = wait_enriched(
            servers, job_topics["enriched"], args.history, 1800
        )
        views_env = views_job_env(env, job_topics, view_topics, work / "views")
        procs["views"] = spawn("enrichment_job.views", views_env, work / "views.log")
        procs["api"] = spawn("services.views", service_env(env, view_topics, work / "api"), work / "api.log")
        wait_healthy(PORT, procs["api"], 300)
        print("the built-in views count the history ...", flush=True)
        results["built_ins_counted_history_after_s"] = wait_views_caught_up(
            servers, job_topics["enriched"], PORT, 1800
        )
        latencies = Latencies(servers, job_topics["enriched"])
        latencies.start()
        while len(latencies.samples) < args.history:  # the history read past, the flow's alone count
            time.sleep(0.5)
        flow: dict[str, Any] = {}
        flowing = threading.Thread(
            target=lambda: flow.update(
                fixed_rate(
                    latencies,
                    producer,
                    job_topics["ratings"],
                    ids,
                    count=int(args.rate * args.flow),
                    rate=args.rate,
                )
            ),
            daemon=True,
        )
        print(
            f"ratings at {args.rate:.0f}/s for {args.flow:.0f} s; the view after {args.create_after:.0f} s",
            flush=True,
        )
        flowing.start()
        time.sleep(args.create_after)
        sampler = LagSampler(servers, job_topics["enriched"])
        sampler.start()
        results["history_at_create"] = topic_end(servers, job_topics["enriched"])
        created_at = time.monotonic()
        results["create_s"] = create_sql_views(views_env, [args.view], work / "views-cli.log")[args.view.stem]
        live = wait_views_live(PORT, [args.view.stem], 900 - (time.monotonic() - created_at))
        results["live_after_create_s"] = None if live is None else round(time.monotonic() - created_at, 1)
        results["live_while_ratings_flowed"] = live is not None and flowing.is_alive()
        results["goal_live_s"] = GOAL_LIVE_S
        print(f"{args.view.stem}: live {results['live_after_create_s']} s after its create", flush=True)
        flowing.join()
        sampler.stop.set()
        sampler.join()
        worst = {name: sampler.worst.get(name) for name in BUILT_IN}
        results["built_ins_worst_behind"] = worst
        results["built_ins_worst_behind_s"] = {
            name: None if lag is None else round(lag / args.rate, 1) for name, lag in worst.items()
        }
        results["job_during_flow"] = flow
        latencies.stop.set()
    finally:
        stop_all(procs, servers, created, view_topics["prefix"])
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
