"""make bench-table: the in-memory customer table by size: its start, its memory, a batch's step.

For each --sizes size, a versioned customer table is written to Delta, then:
- load_s: the job's start reads it back into memory (`CustomerTable`);
- bytes_per_version: what the in-memory table takes per version (Arrow buffers), and the
  largest table a 2g, 8g and 32g process could hold at half its memory;
- step_s: one ratings step of --ratings ratings (parse, as-of join, release, enriched records
  and alerts as JSON), the median of --repeat steps after one untimed step.
No Kafka: the ratings are made in memory, so the figures are the table's and the step's own.
Writes them as JSON (--out).
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
from deltalake import write_deltalake
from pyspark.sql.pandas.types import to_arrow_schema

from enrichment_job.customers.table import CustomerTable, DeltaLog
from enrichment_job.customers.versions import VersionStore
from enrichment_job.records.schemas import VERSION_FIELDS
from enrichment_job.runtime.session import build_session
from enrichment_job.settings import JobSettings
from enrichment_job.tasks.enrich import Ratings
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


def ratings_batch(count: int, customers: int, first: int, now_ms: int) -> pa.Table:
    """`count` records as the ratings topic gives them (Kafka columns)."""
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
    return pa.Table.from_pydict(
        {
            "key": [str(u).encode() for u in users],
            "value": values,
            "topic": ["ratings"] * count,
            "partition": pa.array([n % 4 for n in range(count)], pa.int32()),
            "offset": [first + n for n in range(count)],
            "timestamp": pa.array([stamp] * count, pa.timestamp("ms", tz="UTC")),
        }
    )


def timed_steps(ratings: Ratings, batches: list[pa.Table], store: VersionStore, now_ms: int) -> list[float]:
    """Seconds per step."""
    took = []
    for raw in batches:
        started = time.monotonic()
        result = ratings.step(raw, store, now_ms)
        took.append(time.monotonic() - started)
        if len(result.enriched) != raw.num_rows:  # every rating is released and comes out once
            raise SystemExit(f"{len(result.enriched)} enriched records, expected {raw.num_rows}")
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
            write_deltalake(path, versions_table(customers, size, now_ms))
            started = time.monotonic()
            table = CustomerTable(DeltaLog(path, "bench"))
            load_s = time.monotonic() - started
            store = table.versions()
            per_version = store.table().nbytes / len(store)
            batches = [
                ratings_batch(args.ratings, customers, n * args.ratings, now_ms)
                for n in range(args.repeat + 1)
            ]
            took = timed_steps(Ratings(settings), batches, store, now_ms)[1:]  # first: warm-up
            figures: dict[str, Any] = {
                "versions": size,
                "customers": customers,
                "ratings": args.ratings,
                "load_s": round(load_s, 2),
                "bytes_per_version": round(per_version),
                # Half of the process's memory for the table: the other half for a fold's copy
                # and the batches.
                "max_versions": {f"{g}g": int(g * 2**30 / 2 / per_version) for g in (2, 8, 32)},
                "step_s": round(statistics.median(took), 3),
            }
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
