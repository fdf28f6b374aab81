"""The views' queries: which query keeps which view, and their state store in the jobs' Spark
session (RocksDB snapshots reach the checkpoint)."""

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession

from enrichment_job.views.app import column_types, dead_letter_query, queries_of
from enrichment_job.views.declarations import customer_ratings, segment_hourly
from enrichment_job.views.settings import ViewsSettings

# A stateful count over Spark's rate source, in a session built like the jobs' and with the
# views' state store; snapshots are asked for after every batch and maintained every second.
_QUERY = """
import sys, time
from pathlib import Path
from pyspark.sql import functions as F
from enrichment_job.runtime.session import build_session
from enrichment_job.settings import JobSettings
from enrichment_job.views.app import use_rocksdb_state

checkpoint = Path(sys.argv[1])
spark = build_session(JobSettings(master="local[1]", shuffle_partitions=1))
spark.conf.unset("spark.sql.catalog.spark_catalog")  # no Delta jars in unit tests
use_rocksdb_state(spark)
spark.conf.set("spark.sql.streaming.stateStore.minDeltasForSnapshot", "1")
spark.conf.set("spark.sql.streaming.stateStore.maintenanceInterval", "1s")
counts = (
    spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    .groupBy((F.col("value") % 7).alias("key")).count()
)
query = (
    counts.writeStream.outputMode("update").format("noop")
    .option("checkpointLocation", str(checkpoint))
    .trigger(processingTime="200 milliseconds").start()
)
deadline = time.monotonic() + 90
while not list(checkpoint.glob("state/0/0/*.zip")) and time.monotonic() < deadline:
    time.sleep(0.5)
query.stop()
spark.stop()
"""


def test_the_rocksdb_state_store_uploads_its_snapshots_and_the_driver_writes_no_checksum_files(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "checkpoint"
    done = subprocess.run(
        [sys.executable, "-c", _QUERY, str(checkpoint)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    snapshots = sorted(p.name for p in checkpoint.glob("state/0/0/*.zip"))
    assert snapshots, f"no RocksDB snapshot uploaded; the job's log ends:\n{done.stderr[-3000:]}"
    assert "ClassCastException" not in done.stderr
    # the query thread's checkpoint files, without .crc beside them; the state store's own
    # files (written by tasks) keep theirs
    assert (checkpoint / "offsets" / "0").is_file()
    assert not list((checkpoint / "offsets").glob(".*.crc"))


def test_views_without_event_time_share_a_query_and_each_windowed_view_has_its_own(
    spark: SparkSession,  # the views' columns need a session
) -> None:
    settings = ViewsSettings()
    by_customer, by_hour = customer_ratings(settings), segment_hourly(settings)
    by_customer_too = replace(by_customer, name="customer_ratings_too")
    by_hour_too = replace(by_hour, name="segment_hourly_too")
    queries = queries_of((by_customer, by_hour, by_customer_too, by_hour_too))
    assert queries == {
        "views": (by_customer, by_customer_too),
        "view-segment_hourly": (by_hour,),
        "view-segment_hourly_too": (by_hour_too,),
    }
    assert queries_of((by_hour,)) == {"view-segment_hourly": (by_hour,)}
    # the dead letters are found by the last: a windowed view's query, else the keyed views'
    assert dead_letter_query(queries) == "view-segment_hourly_too"
    assert dead_letter_query(queries_of((by_customer,))) == "views"


def test_a_view_s_columns_are_typed_for_the_query_service_timestamps_and_dates_among_them(
    spark: SparkSession,
) -> None:
    rows = spark.sql(
        "SELECT 1 AS n, CAST(2 AS BIGINT) AS big, 2.5D AS x, true AS b, 'a' AS s,"
        " timestamp_millis(0) AS t, to_timestamp_ntz('2026-12-07 05:00:00') AS t_ntz,"
        " to_date('2026-12-07') AS d, array(1) AS other"
    )
    assert column_types(rows) == [
        {"name": "n", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "x", "type": "double"},
        {"name": "b", "type": "boolean"},
        {"name": "s", "type": "string"},
        {"name": "t", "type": "timestamp"},
        {"name": "t_ntz", "type": "string"},  # no zone: its text as written
        {"name": "d", "type": "date"},
        {"name": "other", "type": "string"},  # served as its JSON text
    ]
