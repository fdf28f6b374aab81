"""python -m enrichment_job.views validate FILE...: check views declared in SQL, as a create
would, without creating anything (a local Spark, no Kafka).

Each file is read and compiled (`definition.check`); a valid one prints its key and columns, a
refused one its reason. Exit 0 when every file is valid, 1 when one is refused.
"""

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from enrichment_job.views.definition import ViewRefused, check, read

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMMANDS = ("validate",)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m enrichment_job.views", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="check views declared in SQL; creates nothing")
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    views, refused = [], 0
    for path in args.files:
        try:
            views.append(read(path))
        except ViewRefused as err:
            print(f"refused: {err}", file=sys.stderr)
            refused += 1
    if not views:
        return 1
    spark = _local_spark()
    try:
        for view in views:
            try:
                compiled = check(spark, view)
            except ViewRefused as err:
                print(f"refused: {err}", file=sys.stderr)
                refused += 1
                continue
            columns = ", ".join(f"{name} {kind}" for name, kind in compiled.rows.dtypes)
            print(f"{view.name}: valid; key ({', '.join(compiled.key)}); columns: {columns}")
    finally:
        spark.stop()
    return 1 if refused else 0


def _local_spark() -> "SparkSession":
    """A small local Spark that reads nothing and listens nowhere but the loopback."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 (Spark loads only past --help)

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("ratings-views-validate")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
