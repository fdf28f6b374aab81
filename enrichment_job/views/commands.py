"""python -m enrichment_job.views validate|create|drop|list: the views declared in SQL.

validate FILE...   check each file as a create would (a local Spark; no Kafka, creates nothing):
                   a valid view prints its key and columns, a refused one its reason
create FILE        check it, then add it to the catalog: the running views job starts keeping
                   it (a backfill from the enriched topic's earliest offset, then live)
drop NAME          remove it from the catalog: the views job stops keeping it, and deletes its
                   checkpoint, its changelog topic and its rows in the query service
list               the views in the catalog

Exit 0 when done, 1 when a view is refused or does not exist. create, drop and list reach Kafka
with the views job's settings (VIEWS_JOB_BOOTSTRAP_SERVERS, VIEWS_JOB_KAFKA_EXTRA,
VIEWS_JOB_CATALOG_TOPIC).
"""

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from enrichment_job.cli import CONFIG_EXIT, load_or_exit
from enrichment_job.views.catalog import BUILT_IN_NAMES, CatalogError, Entry, publish, read_all
from enrichment_job.views.definition import ViewRefused, check, read
from enrichment_job.views.settings import ViewsSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMMANDS = ("validate", "create", "drop", "list")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m enrichment_job.views",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="check views declared in SQL; creates nothing")
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE")
    create = sub.add_parser("create", help="check a view, then add it to the catalog")
    create.add_argument("file", type=Path, metavar="FILE")
    drop = sub.add_parser("drop", help="remove a view from the catalog")
    drop.add_argument("name")
    sub.add_parser("list", help="the views in the catalog")
    args = parser.parse_args(argv)
    if args.command == "validate":
        return _validate(args.files)
    settings = load_or_exit(ViewsSettings, [], "python -m enrichment_job.views", "")
    if not settings.catalog_topic:
        print("error: VIEWS_JOB_CATALOG_TOPIC is empty: there is no catalog of views", file=sys.stderr)
        return CONFIG_EXIT
    config, topic = settings.producer_config(), settings.catalog_topic
    try:
        if args.command == "list":
            for entry in sorted(read_all(config, topic).values(), key=lambda e: e.name):
                created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(entry.created_at_ms / 1000))
                print(f"{entry.name}\tcreated {created}")
            return 0
        return (
            _drop(args.name, config, topic) if args.command == "drop" else _create(args.file, config, topic)
        )
    except CatalogError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _drop(name: str, config: dict[str, str], topic: str) -> int:
    if name not in read_all(config, topic):
        print(f"error: view {name} does not exist in the catalog {topic}", file=sys.stderr)
        return 1
    publish(config, topic, name, None)
    print(f"dropped {name}: the views job stops keeping it and deletes its topic and checkpoint")
    return 0


def _create(path: Path, config: dict[str, str], topic: str) -> int:
    try:
        view = read(path)
    except ViewRefused as err:
        print(f"refused: {err}", file=sys.stderr)
        return 1
    if view.name in BUILT_IN_NAMES:
        print(f"refused: {view.name}: a built-in view has that name", file=sys.stderr)
        return 1
    if view.name in read_all(config, topic):
        print(f"refused: {view.name}: the view exists; drop it first", file=sys.stderr)
        return 1
    spark = _local_spark()
    try:
        compiled = check(spark, view)
    except ViewRefused as err:
        print(f"refused: {err}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    publish(
        config, topic, view.name, Entry(view.name, path.read_text(encoding="utf-8"), int(time.time() * 1000))
    )
    print(
        f"created {view.name}: key ({', '.join(compiled.key)}); the views job backfills it from the enriched"
        " topic, then keeps it live"
    )
    return 0


def _validate(files: list[Path]) -> int:
    views, refused = [], 0
    for path in files:
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
