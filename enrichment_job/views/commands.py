"""python -m enrichment_job.views validate|create|replace|drop|list|show|follow: the views
declared in SQL.

validate FILE...   check each file as a create would (a local Spark; no Kafka, creates nothing):
                   a valid view prints its key and columns, a refused one its reason
create FILE        add it to the catalog, and wait (--wait, 30 s) for the running views job's
                   verdict: it checks the view with its own Spark and starts keeping it (a
                   backfill from the enriched topic's earliest offset, then live) or refuses
                   it. A refused view leaves the catalog again, with nothing created. With no
                   verdict in time (no views job running), the CLI checks it with a local
                   Spark instead, and the views job starts it when it runs
replace FILE       make it the view's new version, checked as a create is (by the running views
                   job, else a local Spark): it backfills into a topic of its own while the
                   current version serves, and takes over once it has caught up (the old
                   version's query, checkpoint and topic then go). A refused version gives way
                   to the current one again, which served all along; refused while an earlier
                   replacement of the view is still backfilling
drop NAME          remove it from the catalog: the views job stops keeping it, and deletes its
                   checkpoint, its changelog topic and its rows in the query service
list               the views in the catalog, with their state
show NAME          a view's SQL, state, topic and freshness, as the views job last said them
follow NAME        the view's changes as they come, a JSON line each ({"key": .., "row": ..};
                   row null: removed), from its changelog topic's start; Ctrl-C stops

Exit 0 when done, 1 when a view is refused or does not exist. Every command but validate
reaches Kafka with the views job's settings (VIEWS_JOB_BOOTSTRAP_SERVERS, VIEWS_JOB_KAFKA_EXTRA,
VIEWS_JOB_CATALOG_TOPIC, VIEWS_JOB_COMMITS_TOPIC).
"""

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException

from enrichment_job.kafka.transactions import last_markers
from enrichment_job.runtime.cli import CONFIG_EXIT, load_or_exit
from enrichment_job.views.catalog import BUILT_IN_NAMES, CatalogError, Entry, marker_key, publish, read_all
from enrichment_job.views.definition import ViewFile, ViewRefused, check, read
from enrichment_job.views.settings import ViewsSettings
from foundation.view_marker import ViewMarker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMMANDS = ("validate", "create", "replace", "drop", "list", "show", "follow")


def main(argv: list[str]) -> int:  # noqa: PLR0911 (a return per command)
    parser = argparse.ArgumentParser(
        prog="python -m enrichment_job.views",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="check views declared in SQL; creates nothing")
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE")
    for command, text in (
        ("create", "add a view to the catalog; the views job checks and starts it"),
        ("replace", "a new version of a view; the views job checks it, and it takes over once caught up"),
    ):
        adding = sub.add_parser(command, help=text)
        adding.add_argument("file", type=Path, metavar="FILE")
        adding.add_argument(
            "--wait",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="how long to wait for the views job's verdict before checking the view here (default 30)",
        )
    for command, text in (
        ("drop", "remove a view from the catalog"),
        ("show", "a view's SQL, state and freshness"),
        ("follow", "a view's changes as they come"),
    ):
        sub.add_parser(command, help=text).add_argument("name")
    sub.add_parser("list", help="the views in the catalog, with their state")
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
            listed_all = sorted(read_all(config, topic).values(), key=lambda e: e.name)
            said_of = _said_of(settings, listed_all)
            for listed in listed_all:
                said = said_of[listed.name]
                state = (said and said.state) or ("replacing" if listed.previous else "not started")
                print(f"{listed.name}\t{state}\tcreated {_time(listed.created_at_ms)}")
            return 0
        if args.command in ("create", "replace"):
            return _create(args.file, settings, replacing=args.command == "replace", wait_s=args.wait)
        entry = read_all(config, topic).get(args.name)
        if entry is None:
            print(f"error: view {args.name} does not exist in the catalog {topic}", file=sys.stderr)
            return 1
        if args.command == "drop":
            publish(config, topic, args.name, None)
            print(f"dropped {args.name}: the views job stops keeping it and deletes its topic and checkpoint")
            return 0
        if args.command == "show":
            _show(entry, _said(settings, entry))
            return 0
        return _follow(settings, entry)
    except (CatalogError, KafkaException, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _time(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _said(settings: ViewsSettings, entry: Entry) -> ViewMarker | None:
    """What the views job last said of this version of the view: its last batch's marker (the
    view's, when it is this version's), or that it was refused or failed (its own marker) when
    that came later."""
    return _said_of(settings, [entry])[entry.name]


def _said_of(settings: ViewsSettings, entries: list[Entry]) -> dict[str, ViewMarker | None]:
    """`_said` of each entry, by view name, from one read of the commits topic."""
    keys = {
        e.name: (marker_key(settings, e.name, e.created_at_ms), marker_key(settings, e.name)) for e in entries
    }
    markers = last_markers(
        settings.producer_config(), settings.commits_topic, [k for pair in keys.values() for k in pair]
    )
    said_of: dict[str, ViewMarker | None] = {}
    for entry in entries:
        problem_key, batch_key = keys[entry.name]
        problem, said = (
            ViewMarker.decode(found) if found is not None else None
            for found in (markers[problem_key], markers[batch_key])
        )
        if said is not None and said.created_at_ms != entry.created_at_ms:
            said = None
        if problem is not None and (said is None or (said.written_at_ms or 0) < (problem.written_at_ms or 0)):
            said = problem
        said_of[entry.name] = said
    return said_of


def _show(entry: Entry, said: ViewMarker | None) -> None:
    print(f"view {entry.name}, created {_time(entry.created_at_ms)}")
    if said is None:
        serves = " (its previous version serves)" if entry.previous else ""
        print(f"state: not started by the views job yet{serves}")
    else:
        print(f"state: {said.state}" + (f": {said.error}" if said.error else ""))
        print(f"topic: {said.topic}; key: {', '.join(said.key or [])}")
        if said.batch_id is not None:
            read_to, newest = said.enriched_to, said.max_rating_time
            print(f"batch {said.batch_id}, enriched topic read to {read_to}, newest rating {newest}")
    print()
    print(entry.sql.rstrip())


def _follow(settings: ViewsSettings, entry: Entry) -> int:
    """The view's changelog topic from its start, committed records, as JSON lines."""
    said = _said(settings, entry)
    topic = (said and said.topic) or entry.changelog(settings.topic_prefix)
    consumer = Consumer(
        {
            **settings.producer_config(),
            "group.id": f"views-follow-{entry.name}",  # offsets are never committed
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    print(f"following {entry.name} ({topic}); Ctrl-C stops", file=sys.stderr)
    try:
        while True:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            key, value = msg.key(), msg.value()
            row = "null" if value is None else value.decode(errors="replace")
            print(f'{{"key":{(key or b"null").decode(errors="replace")},"row":{row}}}', flush=True)
    except KeyboardInterrupt:
        return 0
    finally:
        consumer.close()


def _create(  # noqa: PLR0911 (a refusal each)
    path: Path, settings: ViewsSettings, *, replacing: bool, wait_s: float
) -> int:
    """Create a view or replace one: the views job checks the new version (`wait_s` for its
    verdict); a refused replacement never touches the version that serves."""
    config, topic = settings.producer_config(), settings.catalog_topic
    try:
        view = read(path)
    except ViewRefused as err:
        print(f"refused: {err}", file=sys.stderr)
        return 1
    if view.name in BUILT_IN_NAMES:
        print(f"refused: {view.name}: a built-in view has that name", file=sys.stderr)
        return 1
    sql = path.read_text(encoding="utf-8")
    current = read_all(config, topic).get(view.name)
    if not replacing:
        if current is not None:
            print(f"refused: {view.name}: the view exists; replace it, or drop it first", file=sys.stderr)
            return 1
        return _create_through_the_job(settings, view, sql, wait_s)
    if current is None:
        print(f"refused: {view.name}: no such view to replace; create it", file=sys.stderr)
        return 1
    previous = _serving(settings, current)
    if previous is None:
        print(
            f"refused: {view.name}: its version of {_time(current.created_at_ms)} is still backfilling to"
            " replace the one before it (or the views job has not started it); replace it once it is"
            " live (show says), or drop the view",
            file=sys.stderr,
        )
        return 1
    return _create_through_the_job(settings, view, sql, wait_s, replaces=previous)


def _check_here(view: ViewFile) -> tuple[str, ...]:
    """The checks of a create, in a local Spark: the view's key, or ViewRefused."""
    spark = _local_spark()
    try:
        return tuple(check(spark, view).key)
    finally:
        spark.stop()


def _create_through_the_job(
    settings: ViewsSettings, view: ViewFile, sql: str, wait_s: float, *, replaces: Entry | None = None
) -> int:
    """A create (or a replacement of the version `replaces`) that the running views job checks:
    the entry goes to the catalog at once, so the backfill starts as soon as the job has planned
    it, with no second Spark started beside it. The job's verdict comes on the commits topic: a
    refused (or failed) marker of this version, or the version's first batch marker (its key).
    A refused version leaves the catalog again: a create's entry is deleted, a replacement's gives
    way to the version it was to replace, which served all along. The job creates no topic or
    checkpoint before its checks pass."""
    config, topic, name = settings.producer_config(), settings.catalog_topic, view.name
    now = int(time.time() * 1000)
    if replaces is None:
        entry = Entry(name, sql, now)
    else:  # the new version backfills into a topic of its own
        entry = Entry(name, sql, now, f"{settings.topic(name)}.{now}", replaces)
    publish(config, topic, name, entry)
    verdict = _verdict(settings, entry, wait_s)
    if verdict is None:  # no views job took it up in time: the same checks here
        try:
            key = _check_here(view)
        except ViewRefused as err:
            why = f"refused: {err} (checked here: no views job answered within {wait_s:.0f} s)"
            return _withdrawn(config, topic, entry, why)
        when = f"no views job answered within {wait_s:.0f} s: it"
        print(f"{_doing(entry)}: key ({', '.join(key)}); {when} {_then(entry)} when it runs")
        return 0
    if verdict.state in ("refused", "failed"):
        return _withdrawn(config, topic, entry, f"{verdict.state}: {verdict.error}")
    print(f"{_doing(entry)}: key ({', '.join(verdict.key or ())}); the views job {_then(entry)}")
    return 0


def _doing(entry: Entry) -> str:
    return f"replacing {entry.name}" if entry.previous is not None else f"created {entry.name}"


def _then(entry: Entry) -> str:
    """What the views job does with an accepted version."""
    if entry.previous is not None:
        return (
            f"backfills the new version into {entry.topic} while the current one serves, then it takes over"
        )
    return "backfills the view from the enriched topic, then keeps it live"


def _withdrawn(config: dict[str, str], topic: str, entry: Entry, why: str) -> int:
    """A version that did not pass its checks, out of the catalog again (a replacement's entry
    back to the version it was to replace): exit 1."""
    publish(config, topic, entry.name, entry.previous)
    print(why, file=sys.stderr)
    return 1


VERDICT_POLL_S = 0.5


def _verdict(settings: ViewsSettings, entry: Entry, wait_s: float) -> ViewMarker | None:
    """What the views job said of `entry`'s version within `wait_s`: refused or failed, or a
    batch marker with its key; None when it said nothing."""
    deadline = time.monotonic() + wait_s
    while True:
        said = _said(settings, entry)
        if said is not None and said.created_at_ms == entry.created_at_ms:
            if said.state in ("refused", "failed") or said.key is not None:
                return said
        if time.monotonic() >= deadline:
            return None
        time.sleep(VERDICT_POLL_S)


def _serving(settings: ViewsSettings, current: Entry) -> Entry | None:
    """The version a replacement of `current`'s view replaces: `current`, unless it is itself a
    replacement that has not taken over (None then: still backfilling, or not started by the
    views job yet; its previous version when it was refused or failed)."""
    if current.previous is None:
        return current
    said = _said(settings, current)
    state = said.state if said is not None else None
    if state in ("refused", "failed"):
        return current.previous
    return current if state == "live" else None


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
            columns = ", ".join(f"{name} {kind}" for name, kind in compiled.columns)
            having = "; a row leaves the view while it does not match HAVING" if compiled.having else ""
            print(f"{view.name}: valid; key ({', '.join(compiled.key)}); columns: {columns}{having}")
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
