"""The es_sink's sustained indexing rate on this machine: documents per second.

Against the running local stack: pre-produces --records enriched ratings (spread over two UTC
days) to a fresh topic, runs the sink in-process with its default batch settings and fresh
indices, and measures from the first confirmed batch to the last. Prints progress and the
figures, writes them as JSON (--out). Removes its topics, indices and templates afterwards.

    .venv/bin/python -m infra.bench.es_sink [--records 150000]
"""

import argparse
import json
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from elasticsearch import Elasticsearch

from infra.bench.results import write_result
from infra.stack.secrets import read_env_file
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.stack import stack_env_path
from services.core.main import build_loop
from services.es_sink.config import EsSinkSettings
from services.es_sink.service import SERVICE

GOAL_DOCS_PER_S = 5_000
DAY_START_MS = 1_795_305_600_000  # 2026-11-23T00:00:00Z


def record(i: int) -> bytes:
    """An enriched rating like the job's; rating_time over two UTC days (two daily indices)."""
    return json.dumps(
        {
            "rating_id": i,
            "user_id": i % 1000 + 1,
            "stars": 1 + i * 7 % 5,
            "route_id": i % 50,
            "rating_time": DAY_START_MS - 86_400_000 + i * 1_000,
            "channel": ("web", "iOS", "android")[i % 3],
            "message": f"benchmark review number {i}: the ride was {('fine', 'late', 'great')[i % 3]}",
            "first_name": "Rica",
            "last_name": "Blaisdell",
            "email": f"user{i % 1000}@example.com",
            "gender": "Female",
            "club_status": ("bronze", "silver", "gold", "platinum")[i % 4],
            "region": ("EMEA", "APAC", "NA", "LATAM")[i % 4],
            "comments": "",
            "create_ts": "2026-11-01T10:00:00Z",
            "update_ts": "2026-11-01T10:00:00Z",
            "full_name": "Rica Blaisdell",
            "customer_matched": True,
            "customer_version": f"mysql-bin.000001:{i}:0",
            "customer_valid_from": 1_790_000_000_000,
            "rating_kafka_ts": "2026-11-22T05:00:00.000Z",
            "rating_partition": i % 2,
            "rating_offset": i,
            "cdc_watermark_ms": DAY_START_MS,
            "enriched_ms": DAY_START_MS,
        }
    ).encode()


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "lz4"})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=str(i % 1000).encode(), value=record(i))
                break
            except BufferError:
                producer.poll(0.1)
        if i % 50_000 == 0:
            print(f"  produced {i:,} / {count:,}", flush=True)
    producer.flush(60)


def cleanup(es: Elasticsearch, admin: AdminClient, settings: EsSinkSettings, prefix: str) -> None:
    names = list(es.indices.get(index=f"{prefix}*", expand_wildcards="all"))
    if names:
        es.indices.delete(index=",".join(names))  # by name: action.destructive_requires_name
    for template in (settings.ratings_alias, settings.alerts_alias):
        if es.indices.exists_index_template(name=template):
            es.indices.delete_index_template(name=template)
    for future in admin.delete_topics([*settings.input_topics, settings.dlq_topic]).values():
        future.result(30)


def time_bulk_requests(sink: Any) -> list[float]:
    """Wrap the sink's client so the seconds spent waiting for bulk answers add up in [0]."""
    spent = [0.0]
    bulk = sink.client.bulk

    def timed(**kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return bulk(**kwargs)
        finally:
            spent[0] += time.monotonic() - start

    sink.client.bulk = timed
    return spent


def measure(settings: EsSinkSettings, count: int) -> dict[str, float]:
    """Run the sink until every record is written; time first and last confirmed batch."""
    loop = build_loop(SERVICE, settings)
    in_bulk = time_bulk_requests(loop.sink)
    thread = threading.Thread(target=loop.run, daemon=True)
    started = time.monotonic()
    thread.start()
    first: float | None = None
    first_written = 0
    last_print = started
    while (written := loop.metrics.counters["written"]) < count:
        now = time.monotonic()
        if first is None and written:
            first, first_written = now, written
        if now - last_print >= 2:
            print(f"  indexed {written:,} / {count:,}", flush=True)
            last_print = now
        if not thread.is_alive():
            raise SystemExit("the sink stopped early; see the log")
        time.sleep(0.05)
    last = time.monotonic()
    loop.stop()
    thread.join(60)
    assert first is not None
    return {
        "docs": count,
        "docs_per_s": round((count - first_written) / max(last - first, 1e-9)),
        "seconds_first_to_last_batch": round(last - first, 2),
        "seconds_total_incl_startup": round(last - started, 2),
        "share_of_time_in_bulk_requests": round(in_bulk[0] / max(last - first, 1e-9), 2),
        "retries": loop.metrics.counters["retries"],
        "dead_letters": loop.metrics.counters["dead_letters"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=150_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "es_sink.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    env = read_env_file(stack_env_path(StackSettings()))
    suffix = uuid.uuid4().hex[:8]
    prefix = f"bench-es-{suffix}-"
    settings = EsSinkSettings(
        bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"],
        url=env["ELASTICSEARCH_URL"],
        group_id=f"bench-es-sink-{suffix}",
        input_topics=(f"bench-es-ratings-{suffix}",),
        alert_topics=(),
        dlq_topic=f"bench-es-dlq-{suffix}",
        ratings_index_prefix=f"{prefix}ratings-",
        ratings_alias=f"{prefix}ratings",
        alerts_index_prefix=f"{prefix}alerts-",
        alerts_alias=f"{prefix}alerts",
        metrics_interval_s=3600,
    )
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    topics = [NewTopic(t, num_partitions=args.partitions) for t in settings.input_topics]
    for future in admin.create_topics([*topics, NewTopic(settings.dlq_topic, num_partitions=1)]).values():
        future.result(30)
    es = Elasticsearch(settings.url, request_timeout=60)
    try:
        print(f"producing {args.records:,} enriched records to {settings.input_topics[0]}", flush=True)
        produce(settings.bootstrap_servers, settings.input_topics[0], args.records)
        print(
            f"indexing with batches of {settings.batch_max_records} / {settings.batch_max_wait_ms} ms",
            flush=True,
        )
        figures = measure(settings, args.records)
        es.indices.refresh(index=settings.ratings_alias)
        indexed = int(es.count(index=settings.ratings_alias)["count"])
        figures["docs_in_elasticsearch"] = indexed
    finally:
        cleanup(es, admin, settings, prefix)
        es.close()
    result: dict[str, Any] = {
        "name": "es_sink",
        "figures": figures,
        "goal": {"docs_per_s": GOAL_DOCS_PER_S, "met": figures["docs_per_s"] >= GOAL_DOCS_PER_S},
        "params": {
            "records": args.records,
            "partitions": args.partitions,
            "batch_max_records": settings.batch_max_records,
            "batch_max_wait_ms": settings.batch_max_wait_ms,
        },
    }
    write_result(result, args.out)


if __name__ == "__main__":
    main()
