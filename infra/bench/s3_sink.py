"""python -m infra.bench.s3_sink: how fast the S3 sink moves a backlog into the lake.

Against the running local stack (its addresses and keys from .state/stack.env): produces a
backlog of enriched ratings to a fresh topic, runs the sink's consumer loop on it in this process,
and reports the sustained rows/s into the lake (from the first batch written to the last), the
objects and bytes written. Prints progress, writes the figures to bench-results/s3_sink.json, and
removes its topics and objects afterwards. Goal: at least 50,000 rows/s on the 2-core machine.
"""

import argparse
import json
import os
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from infra.bench.results import write_result
from infra.stack.secrets import read_env_file
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.stack import stack_env_path
from services.core.main import build_loop
from services.s3_sink.config import S3SinkSettings
from services.s3_sink.service import SERVICE
from services.s3_sink.sink import s3_client

GOAL_ROWS_PER_S = 50_000
STATUSES = ("bronze", "silver", "gold", "platinum", None)


def enriched(rating_id: int, now_ms: int, rnd: random.Random) -> dict[str, Any]:
    """A realistic enriched rating: rating times over the last two hours, one in five unmatched."""
    status = rnd.choice(STATUSES)
    user_id = rnd.randrange(1, 100_000)
    customer = status is not None
    return {
        "rating_id": rating_id,
        "user_id": user_id,
        "stars": rnd.randint(1, 5),
        "route_id": rnd.randrange(1, 500),
        "rating_time": now_ms - rnd.randrange(0, 7_200_000),
        "channel": rnd.choice(("web", "iOS", "android")),
        "message": "the bus was late again and the driver was rude" if rating_id % 2 else "great trip",
        "first_name": "Rica" if customer else None,
        "last_name": "Blaisdell" if customer else None,
        "email": f"user{user_id}@example.com" if customer else None,
        "gender": "Female" if customer else None,
        "club_status": status,
        "region": rnd.choice(("EMEA", "APAC", "NA", "LATAM")) if customer else None,
        "comments": "" if customer else None,
        "create_ts": "2026-11-01T10:00:00Z" if customer else None,
        "update_ts": "2026-11-01T10:00:00Z" if customer else None,
        "full_name": "Rica Blaisdell" if customer else None,
        "customer_matched": customer,
        "customer_version": f"mysql-bin.000001:{user_id}:0" if customer else None,
        "customer_valid_from": now_ms - 86_400_000 if customer else None,
        "rating_kafka_ts": "2026-11-22T05:00:00.000Z",
        "rating_partition": rating_id % 4,
        "rating_offset": rating_id,
        "cdc_watermark_ms": now_ms,
        "enriched_ms": now_ms,
    }


def produce_backlog(bootstrap: str, topic: str, count: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    rnd = random.Random(7)  # noqa: S311 (reproducible load, not cryptography)
    now_ms, started = int(time.time() * 1000), time.monotonic()
    for i in range(count):
        record = enriched(i, now_ms, rnd)
        while True:
            try:
                producer.produce(
                    topic, key=str(record["user_id"]).encode(), value=json.dumps(record).encode()
                )
                break
            except BufferError:
                producer.poll(0.1)
        if (i + 1) % 100_000 == 0:
            print(f"  produced {i + 1:,}/{count:,}", flush=True)
    assert producer.flush(60) == 0, "backlog not confirmed by Kafka"
    return time.monotonic() - started


def drain(settings: S3SinkSettings, count: int, timeout_s: float) -> dict[str, float]:
    """Run the loop until `count` rows are written; (time, written) samples give the rates."""
    loop = build_loop(SERVICE, settings)
    thread = threading.Thread(target=loop.run, daemon=True)
    started = time.monotonic()
    thread.start()
    first: tuple[float, int] | None = None
    last_print = 0.0
    while loop.metrics.counters["written"] < count and time.monotonic() - started < timeout_s:
        time.sleep(0.05)
        written = loop.metrics.counters["written"]
        if written and first is None:
            first = (time.monotonic(), written)
        if time.monotonic() - last_print >= 2:
            print(f"  written {written:,}/{count:,} after {time.monotonic() - started:.1f} s", flush=True)
            last_print = time.monotonic()
    done = time.monotonic()
    loop.stop()
    thread.join(60)
    written = loop.metrics.counters["written"]
    assert first is not None and written >= count, f"only {written} of {count} written in {timeout_s} s"
    sustained = (written - first[1]) / max(done - first[0], 1e-9)
    return {
        "rows": written,
        "wall_s": round(done - started, 2),
        "first_batch_after_s": round(first[0] - started, 2),
        "rows_per_s_sustained": round(sustained),
        "rows_per_s_overall": round(written / (done - started)),
    }


def lake_size(settings: S3SinkSettings) -> tuple[int, int, list[str]]:
    client = s3_client(settings)
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=settings.bucket, Prefix=f"{settings.key_prefix}/"
    )
    objects = [(o["Key"], o["Size"]) for page in pages for o in page.get("Contents", [])]
    return len(objects), sum(size for _, size in objects), [key for key, _ in objects]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batch-max-records", type=int, default=50_000)
    parser.add_argument("--compression", default="zstd")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "s3_sink.json")
    args = parser.parse_args()

    env = read_env_file(stack_env_path(StackSettings()))
    suffix = uuid.uuid4().hex[:8]
    topic, dlq = f"bench-s3-sink-{suffix}", f"bench-s3-sink-dlq-{suffix}"
    settings = S3SinkSettings(
        bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"],
        group_id=f"bench-s3-sink-{suffix}",
        input_topics=(topic,),
        dlq_topic=dlq,
        endpoint_url=env["S3_ENDPOINT_URL"],
        region=env["S3_REGION"],
        access_key=env["S3_ACCESS_KEY"],
        secret_key=env["S3_SECRET_KEY"],
        bucket=env["S3_BUCKET"],
        prefix=f"bench-s3-sink-{suffix}",
        batch_max_records=args.batch_max_records,
        batch_max_wait_ms=5000,
        compression=args.compression,
        metrics_interval_s=5,
    )
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    for future in admin.create_topics([NewTopic(t, args.partitions, 1) for t in (topic, dlq)]).values():
        future.result(30)
    try:
        print(f"producing a backlog of {args.records:,} enriched ratings to {topic}", flush=True)
        produce_s = produce_backlog(settings.bootstrap_servers, topic, args.records)
        print(f"draining it into s3://{settings.bucket}/{settings.key_prefix}/", flush=True)
        figures = drain(settings, args.records, timeout_s=300)
        objects, size, _ = lake_size(settings)
        figures |= {"objects": objects, "mb_written": round(size / 1e6, 1), "produce_s": round(produce_s, 1)}
    finally:
        client = s3_client(settings)
        for key in lake_size(settings)[2]:
            client.delete_object(Bucket=settings.bucket, Key=key)
        for future in admin.delete_topics([topic, dlq]).values():
            future.result(30)
    result = {
        "name": "s3_sink",
        "figures": figures,
        "goal": {
            "rows_per_s_sustained": GOAL_ROWS_PER_S,
            "met": figures["rows_per_s_sustained"] >= GOAL_ROWS_PER_S,
        },
        "params": {**vars(args), "out": str(args.out), "machine_cores": os.cpu_count()},
    }
    write_result(result, args.out)


if __name__ == "__main__":
    main()
