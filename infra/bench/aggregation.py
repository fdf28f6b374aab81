"""python -m infra.bench.aggregation: what a micro-batch of the `customer_ratings` query costs its
JVM, without Kafka, by how many tasks read a batch and how many state partitions keep it.

Files of enriched ratings (random customers over 100,000 ids), one file a batch, are read by
Spark's file source split into `--topic-partitions` tasks, as the Kafka source reads one task a
topic partition. The query is the job's `views` query (the views without an event time: its
parse, its aggregation, RocksDB state with changelog checkpointing, the changed rows as
changelog columns, collected as Arrow), in a session built as the job builds its own.
`--source-tasks N` coalesces the source into N tasks, as the views job does
(VIEWS_JOB_SOURCE_TASKS; 0: a task a topic partition). After `--warm-up` batches, the JVM's
CPU and the wall time a batch are averaged over the rest. One JSON line. Run it on a quiet
machine: it measures it.
"""

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from enrichment_job.runtime.session import build_session
from enrichment_job.views.aggregation import changelog_columns
from enrichment_job.views.app import queries_of, query_rows, use_rocksdb_state
from enrichment_job.views.declarations import declared
from enrichment_job.views.settings import KEYED_QUERY, ViewsSettings
from enrichment_job.views.transforms import parse_enriched
from infra.bench.job import job_jvm, thread_cpu_s
from infra.bench.store import ROWS

START_MS = 1_795_940_000_000


def write_batches(folder: Path, batches: int, records: int) -> None:
    rnd = random.Random(7)  # noqa: S311 (test data)
    for b in range(batches):
        lines = []
        for i in range(records):
            n, user = b * records + i, rnd.randint(1, ROWS)
            lines.append(
                json.dumps(
                    {
                        "rating_id": n,
                        "user_id": user,
                        "stars": rnd.randint(1, 5),
                        "rating_time": START_MS + n,
                        "channel": rnd.choice(["web", "iOS", "android"]),
                        "message": rnd.choice(["meh", "the delay was long and nobody told us why", "great"]),
                        "club_status": rnd.choice(["platinum", "gold", "silver", "bronze"]),
                        "full_name": "Ann Example",
                        "customer_matched": True,
                        "cdc_watermark_ms": START_MS + n + 100,
                    }
                )
            )
        (folder / f"{b:05d}.json").write_text("\n".join(lines) + "\n")


def measure(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    settings = ViewsSettings(
        state_dir=str(folder / "state"),
        shuffle_partitions=args.state_partitions,
        class_archive_dir="",
    )
    spark = build_session(settings, "bench-aggregation")
    spark.conf.unset("spark.sql.catalog.spark_catalog")  # no Delta here
    spark.sparkContext.setLogLevel("ERROR")
    use_rocksdb_state(spark)
    jvm = job_jvm(os.getpid())
    if jvm is None:
        raise SystemExit("the Spark JVM of this process was not found under /proc")
    size = (folder / "in" / "00000.json").stat().st_size
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(size // args.topic_partitions + 1))
    spark.conf.set("spark.sql.files.openCostInBytes", "0")
    raw: DataFrame = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", 1)
        .load(str(folder / "in"))
        .select(
            F.lit(b"k").alias("key"),
            F.col("value").cast("binary").alias("value"),
            F.lit("enriched").alias("topic"),
            F.lit(0).alias("partition"),
            F.lit(0).cast("long").alias("offset"),
            F.current_timestamp().alias("timestamp"),
        )
    )
    if args.source_tasks:
        raw = raw.coalesce(args.source_tasks)
    # The keyed query as the job starts it (with the dead letters only when no windowed
    # query finds them).
    declared_views = declared(settings)
    counted, _ = query_rows(parse_enriched(raw), declared_views, KEYED_QUERY)
    columns = changelog_columns(queries_of(declared_views)[KEYED_QUERY])
    marks: list[tuple[float, float, int]] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        rows = batch.select(*columns).toArrow().num_rows
        marks.append((time.monotonic(), thread_cpu_s(jvm)[""][1], rows))
        if len(marks) % 20 == 0:
            print(f"{len(marks)} of {args.batches} batches", file=sys.stderr, flush=True)

    query = (
        counted.writeStream.outputMode("update")
        .foreachBatch(sink)
        .option("checkpointLocation", str(folder / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    (wall_0, cpu_0, _), (wall_1, cpu_1, rows) = marks[args.warm_up], marks[-1]
    measured = len(marks) - 1 - args.warm_up
    return {
        "records_a_batch": args.records,
        "topic_partitions": args.topic_partitions,
        "source_tasks": args.source_tasks,
        "state_partitions": args.state_partitions,
        "batches_measured": measured,
        "jvm_cpu_s_a_batch": round((cpu_1 - cpu_0) / measured, 3),
        "wall_s_a_batch": round((wall_1 - wall_0) / measured, 3),
        "rows_changed_last_batch": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.bench.aggregation", description=__doc__)
    parser.add_argument("--records", type=int, default=5000, help="records a batch (default %(default)s)")
    parser.add_argument("--batches", type=int, default=120, help="batches in all (default %(default)s)")
    parser.add_argument("--warm-up", type=int, default=60, help="batches not measured (default %(default)s)")
    parser.add_argument(
        "--topic-partitions",
        type=int,
        default=4,
        help="tasks the source splits a batch into (default %(default)s)",
    )
    parser.add_argument(
        "--source-tasks",
        type=int,
        default=ViewsSettings().source_tasks,
        help="VIEWS_JOB_SOURCE_TASKS: coalesce the source into this many tasks (0: one a partition;"
        " default %(default)s, the job's)",
    )
    parser.add_argument(
        "--state-partitions",
        type=int,
        default=ViewsSettings().shuffle_partitions,
        help="VIEWS_JOB_SHUFFLE_PARTITIONS (default %(default)s, the job's)",
    )
    args = parser.parse_args(argv)
    if args.warm_up + 2 > args.batches:
        parser.error("--batches must exceed --warm-up by at least 2")
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "in").mkdir()
        write_batches(folder / "in", args.batches, args.records)
        print(json.dumps(measure(args, folder)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
