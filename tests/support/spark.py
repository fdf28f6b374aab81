"""A Spark session as a user of the stack runs one: local, with the staged jars (the Kafka
connector, Delta, hadoop-aws) and Delta's SQL extension."""

import os
from pathlib import Path
from typing import Any

# How long a Spark job's clean stop may take before a test kills it: a checkout's first clean
# stop records the driver's class archive as the JVM exits, which the job allows 120 s
# (enrichment_job.runtime.jvm.ClassArchive.finish); each checkout's virtualenv has its own class path.
JOB_STOP_S = 180


def delta_session(stack_env: dict[str, str], app_name: str) -> Any:
    from pyspark.sql import SparkSession  # noqa: PLC0415 - slow import, only where a test needs it

    jars = stack_env["SPARK_JARS"].split(",")
    assert jars and all(Path(jar).is_file() for jar in jars), "staged Spark jars missing: run `make up`"
    os.environ["JAVA_HOME"] = stack_env["JAVA_HOME"]
    return (
        SparkSession.builder.master("local[1]")
        .appName(app_name)
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .getOrCreate()
    )
