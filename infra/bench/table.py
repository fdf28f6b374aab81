"""make bench-table: up to which size re-reading the customer table per batch stays cheap.

One ratings step (parse, release, as-of join, enriched records back to the driver as Arrow) of
--ratings ratings against a versioned customer table of each --sizes size, two ways:
- re-read: the table read from Delta for the batch, as a naive foreachBatch would;
- in memory: the table as the job keeps it (read once, hash-partitioned and sorted by id).
No Kafka: the ratings are made in memory, so the figures are the step's own. Prints the median
of --repeat steps per size and way (after one untimed step) and writes them as JSON (--out).
"""

import argparse
import datetime as dt
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from enrichment_job.app import build_session
from enrichment_job.enrich import Ratings
from enrichment_job.schemas import VERSION_FIELDS
from enrichment_job.settings import JobSettings
from enrichment_job.table import CustomerTable
from infra.stack.secrets import read_env_file
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.stack import stack_env_path

STATUSES = ("bronze", "silver", "gold", "platinum")


def versions_table(customers: int, versions: int, now_ms: int) -> pa.Table:
    """`versions` rows over `customers` ids: each id's first version, then changes at random."""
    rnd = random.Random(7)
    ids = [i % customers for i in range(versions)]
    return pa.Table.from_pydict(
        {
            "id": ids,
            "first_name": [f"First{i}" for i in ids],
            "last_name": [f"Last{i}" for i in ids],
            "email": [f"c{i}@example.com" for i in ids],
            "gender": ["Female"] * versions,
            "club_status": [rnd.choice(STATUSES) for _ in ids],
            "region": ["EMEA"] * versions,
            "comments": [None] * versions,
            "create_ts": ["2026-01-01T00:00:00Z"] * versions,
            "update_ts": ["2026-01-01T00:00:00Z"] * versions,
            # Later versions of an id start later; all before the ratings.
            "valid_from": [now_ms - 10_000_000 + n for n in range(versions)],
            "deleted": [False] * versions,
            "op": ["r" if n < customers else "u" for n in range(versions)],
            "source_file": ["mariadb-bin.000001"] * versions,
            "source_pos": list(range(versions)),
            "source_row": [0] * versions,
            "cdc_partition": [0] * versions,
            "cdc_offset": list(range(versions)),
        },
        schema=to_arrow_schema(VERSION_FIELDS),
    )


def ratings_batch(spark: SparkSession, count: int, customers: int, first: int, now_ms: int) -> DataFrame:
    """`count` rows as the Kafka source gives them, materialized so only the step is timed."""
    rnd = random.Random(first)
    users = [rnd.randrange(customers) for _ in range(count)]
    values = [
        json.dumps(
            {
                "rating_id": first + n,
                "user_id": u,
                "stars": rnd.randint(1, 5),
                "route_id": 3,
                "rating_time": now_ms - 500,
                "channel": "web",
                "message": "the train was on time",
            }
        ).encode()
        for n, u in enumerate(users)
    ]
    stamp = dt.datetime.now(dt.UTC)
    rows = pa.Table.from_pydict(
        {
            "key": [str(u).encode() for u in users],
            "value": values,
            "topic": ["ratings"] * count,
            "partition": [n % 4 for n in range(count)],
            "offset": [first + n for n in range(count)],
            "timestamp": [stamp] * count,
        }
    )
    return spark.createDataFrame(rows).localCheckpoint()


def timed_steps(
    ratings: Ratings, batches: list[DataFrame], versions: Any, now_ms: int, expected: int
) -> list[float]:
    """Seconds per step; `versions` is called per step (a re-read builds a new plan each time)."""
    took = []
    for raw in batches:
        started = time.monotonic()
        result = ratings.step(raw, (versions(), None), now_ms)
        took.append(time.monotonic() - started)
        if len(result.enriched) != expected:  # every rating is released and comes out once
            raise SystemExit(f"{len(result.enriched)} enriched records, expected {expected}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="make bench-table", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(v) for v in s.split(",")],
        default=[10_000, 100_000, 1_000_000, 3_000_000],
        help="versions in the table, comma-separated",
    )
    parser.add_argument("--customers", type=int, default=1_000_000, help="distinct ids (at most the size)")
    parser.add_argument("--ratings", type=int, default=5_000, help="ratings per step (1 s at 5,000/s)")
    parser.add_argument("--repeat", type=int, default=3, help="timed steps per size and way (median)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "table.json")
    args = parser.parse_args()

    env = read_env_file(stack_env_path(StackSettings()))  # the staged jars, as the job gets them
    settings = JobSettings(spark_jars=env["SPARK_JARS"], ui_enabled=False, grace_ms=0)  # as bench-job
    spark = build_session(settings)
    spark.sparkContext.setLogLevel("ERROR")
    now_ms = int(time.time() * 1000)
    work = Path(tempfile.mkdtemp(prefix="bench-table-"))
    results: list[dict[str, Any]] = []
    try:
        for size in args.sizes:
            customers = min(args.customers, size)
            path = str(work / f"versions-{size}")
            spark.createDataFrame(versions_table(customers, size, now_ms)).write.format("delta").save(path)
            table = CustomerTable(spark, path, "bench", partitions=settings.shuffle_partitions)
            batches = [
                ratings_batch(spark, args.ratings, customers, n * args.ratings, now_ms)
                for n in range(args.repeat + 1)
            ]
            figures: dict[str, Any] = {"versions": size, "customers": customers, "ratings": args.ratings}
            for way, versions in (
                ("reread_s", lambda p=path: spark.read.format("delta").load(p)),
                ("in_memory_s", lambda t=table: t.versions()[0]),
            ):
                ratings = Ratings(spark, settings)
                took = timed_steps(ratings, batches, versions, now_ms, args.ratings)[1:]  # first: warm-up
                figures[way] = round(statistics.median(took), 2)
            table.close()
            results.append(figures)
            print(json.dumps(figures), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
