"""The Spark session of both jobs: its configuration, the driver JVM's options and class archive."""

import atexit

# Loaded before the session's thread forks spark-submit: this module registers fork hooks when
# first imported (a lock taken before a fork, released after it). Imported by the main thread
# while that thread forked, its hook ran after the fork without having run before it, and
# Python printed "RuntimeError: release unlocked lock" with a traceback into the job's log.
import concurrent.futures.thread  # noqa: F401
import contextlib
import importlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

from enrichment_job.runtime.jvm import ClassArchive, class_archive
from enrichment_job.runtime.settings import SparkJobSettings
from enrichment_job.runtime.spark_internals import local_checkpoint_files, skip_driver_checksums
from foundation.arrow_memory import POOL_VARIABLE, choose_pool
from foundation.logs import log_format

__all__ = [
    "APP_NAME",
    "C1_ONLY",
    "DIST_CLASSPATH",
    "SessionStart",
    "begin_session",
    "build_session",
    "driver_archive",
    "driver_jvm_options",
    "jars_on_class_path",
    "on_cluster",
    "product_archive",
    "query_conf",
]

log = logging.getLogger("enrichment_job")

APP_NAME = "ratings-enrichment"  # the enrichment job's Spark application, and its class archive's
DIST_CLASSPATH = "SPARK_DIST_CLASSPATH"
SCHEDULER_POOLS = Path(__file__).with_name("scheduler_pools.xml")
LOG4J_CONFIG = "log4j2.configurationFile"
# A driver that runs no task over records (on a cluster; the enrichment job's join on the
# driver) plans batches and schedules tasks, code that is never hot enough to repay C2, the
# optimising compiler. On a cluster, C2 took half of the driver JVM's CPU in a job's first
# minutes, and with C1 alone the driver's CPU per rating was about half. In local mode with the
# join on the driver, C2 compiled the class archive's profiled methods during the start (2.2 of
# the JVM's 4.6 CPU seconds before the first output), on the cores the CDC read-ahead needs.
C1_ONLY = "-XX:TieredStopAtLevel=1"
# The product's packages that the executors' Python workers import (the join in tasks).
PRODUCT_PACKAGES = ("enrichment_job", "foundation")


def on_cluster(master: str) -> bool:
    """Whether a Spark master is a cluster's (spark://, yarn, k8s://...): the driver runs no
    task there. Empty (spark-submit's to choose) and local[...] are not."""
    return bool(master) and not master.startswith("local")


def driver_archive(settings: SparkJobSettings, app_name: str) -> ClassArchive | None:
    """The class archive the driver JVM maps, or writes at a clean stop; None when off."""
    # Only a JVM the job starts itself takes the options (not one spark-submit started).
    if not settings.class_archive_dir or not _jvm_started_here():
        return None
    conf_dir = spark_conf_dir()
    if conf_dir is not None:
        log.info(
            "driver class archive: off (Spark's launcher puts SPARK_CONF_DIR, %s, on the driver's "
            "class path, and the JVM archives no class path with a folder that holds files)",
            conf_dir,
        )
        return None
    directory = Path(settings.class_archive_dir).expanduser()
    archive = class_archive(
        directory,
        app_name,
        settings.spark_jars,
        driver_jvm_options(settings),
        on_class_path=jars_on_class_path(settings),
    )
    log.info("driver class archive: %s", archive.path if archive.writing is None else "written at the stop")
    return archive


def build_session(
    settings: SparkJobSettings, app_name: str = APP_NAME, archive: ClassArchive | None = None
) -> SparkSession:
    java_options = _java_options(driver_jvm_options(settings))
    if archive is not None:
        java_options = f"{java_options} {archive.java_options}".strip()
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        # Micro-batches are small and planned anew each time: adaptive re-planning per stage
        # costs more than it saves here.
        .config("spark.sql.adaptive.enabled", "false")
        # Every batch runs the same plans: their generated classes are kept, not compiled again
        # (a batch uses a few dozen; with the default 100 they evicted each other).
        .config("spark.sql.codegen.cache.maxEntries", "1000")
        # No join broadcasts a side it did not ask to broadcast, whatever its size.
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        # A Kafka task leaves the records of its last poll in a pool, for a task that goes on
        # from its end offset; the default keeps them 5 minutes. A query that splits a
        # partition's range between tasks (the views' background queries) makes a new entry
        # each task: under a steady flow the views' second process held hundreds of MB of such
        # records, live data that every full collection of its heap went through again.
        # The next batch's first task goes on within a trigger interval (5 s at most by default);
        # a later one polls Kafka again.
        .config("spark.kafka.consumer.fetchedData.cache.timeout", "10s")
        .config("spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval", "5s")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        # Background Spark jobs (the views' windowed queries, and the views'
        # queries when they run in this application) take a task slot only when no micro-batch
        # task waits for one. Under FIFO a background job, once submitted, took every free slot
        # before the next batch's tasks.
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.scheduler.allocation.file", str(SCHEDULER_POOLS))
        .config("spark.driver.memory", settings.driver_memory)
        # In local mode the driver JVM runs the tasks too. G1's concurrent marking cost about
        # 10 % of a core at 5,000 ratings/s here; the parallel collector's young collections of
        # short-lived batch data cost a quarter of that, with pauses well under a batch.
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.ui.enabled", str(settings.ui_enabled).lower())
        # The UI shows the job's settings and data; its kill links would stop a query by a click.
        .config("spark.ui.killEnabled", "false")
    )
    # The state folder: how Hadoop reaches it (s3a://), and how checkpoints are written to it.
    for key, value in {**local_checkpoint_files(settings.state), **settings.state.spark_conf()}.items():
        builder = builder.config(key, value)
    if settings.master:
        builder = builder.master(settings.master)
    if settings.master.startswith("local"):
        # Spark binds its UI and the driver to SPARK_LOCAL_IP, to every interface without it.
        # On one machine nothing needs more than the loopback; set SPARK_LOCAL_IP to open it.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if jars_on_class_path(settings):
        _class_path_after_spark(settings.spark_jars.split(","))
    elif settings.spark_jars:
        builder = builder.config("spark.jars", settings.spark_jars)
    if pool := os.environ.get(POOL_VARIABLE):
        # The executors' Python workers (the join in tasks) allocate as the driver does.
        builder = builder.config(f"spark.executorEnv.{POOL_VARIABLE}", pool)
    # Tasks that run Python (the join in tasks) start the executors' Python workers with
    # PYSPARK_PYTHON: the setting's, else the driver's own interpreter (its packages: pyarrow,
    # the product), not whatever `python3` is first on the executors' PATH.
    if settings.executor_python:
        os.environ["PYSPARK_PYTHON"] = settings.executor_python
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    skip_driver_checksums(spark)
    if on_cluster(settings.master):
        _ship_product(spark)
    return spark


def product_archive(target: Path) -> Path:
    """The product's packages, as this driver imports them, zipped at `target` (their source
    files and the files beside them, no byte code)."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in PRODUCT_PACKAGES:
            root = Path(str(importlib.import_module(name).__file__)).parent
            for path in sorted(root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.relative_to(root).parts:
                    archive.write(path, (Path(name) / path.relative_to(root)).as_posix())
    return target


def _ship_product(spark: SparkSession) -> None:
    """The job's own code to its executors (Spark's --py-files): a Python worker puts it ahead
    of its interpreter's packages, so the executors run the code this driver runs, whatever copy
    of the product their Python has, or none."""
    folder = Path(tempfile.mkdtemp(prefix="ratings-job-"))
    atexit.register(shutil.rmtree, folder, True)  # the driver serves the file while it runs
    archive = product_archive(folder / "ratings_product.zip")
    spark.sparkContext.addPyFile(str(archive))
    log.info("the job's code goes to the executors with it (%d bytes)", archive.stat().st_size)


class SessionStart:
    """`build_session` in a thread of its own, begun at once: the driver JVM's start is CPU on
    the JVM's own threads, while what the driver does meanwhile (the transactional producer's
    start, the marker read, the state folder's claim) is mostly round trips to Kafka."""

    def __init__(self, settings: SparkJobSettings, app_name: str, archive: ClassArchive | None) -> None:
        self.archive = archive
        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._build, args=(settings, app_name, archive), name="spark-start", daemon=True
        )
        self._thread.start()

    def _build(self, settings: SparkJobSettings, app_name: str, archive: ClassArchive | None) -> None:
        try:
            self._session = build_session(settings, app_name, archive)
        except BaseException as err:  # noqa: BLE001 - raised again in the caller's thread
            self._error = err

    def session(self) -> SparkSession:
        """The session, once started; what its start raised, raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._session is not None
        return self._session

    def abandon(self) -> None:
        """After the driver's own start failed: the session, once up, stopped (no JVM left)."""
        with contextlib.suppress(Exception):
            self.session().stop()


@contextlib.contextmanager
def query_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """SQL settings for the streaming queries started inside: a query copies its session's
    settings as it starts, and keeps them; the session's own are put back after."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, was in before.items():
            if was is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, was)


def begin_session(settings: SparkJobSettings, app_name: str) -> SessionStart:
    """Arrow's allocator chosen (the session hands it to the executors' Python workers), the
    class archive found, and the session's start begun in the background."""
    log.info("Arrow's memory pool: %s", choose_pool())
    return SessionStart(settings, app_name, driver_archive(settings, app_name))


def jars_on_class_path(settings: SparkJobSettings) -> bool:
    """Whether the jars go on the driver JVM's own class path rather than to `spark.jars`: in
    local mode, with a JVM this process starts. There the driver's JVM runs the tasks, and
    `spark.jars` made its executor copy every jar into a temporary folder and fork a `chmod` for
    each (some 50 jars: 0.8 s of every start here). On the class path they are read in place,
    and the class archive holds their classes too. On a cluster the executors need them:
    `spark.jars` ships them."""
    return bool(settings.spark_jars) and settings.master.startswith("local") and _jvm_started_here()


def spark_conf_dir() -> Path | None:
    """The folder of Spark's configuration files that Spark's launcher puts on the class path of
    the driver JVM it starts (SPARK_CONF_DIR, or SPARK_HOME's conf), when it holds files."""
    given = os.environ.get("SPARK_CONF_DIR") or (
        str(Path(os.environ["SPARK_HOME"], "conf")) if os.environ.get("SPARK_HOME") else ""
    )
    folder = Path(given) if given else None
    if folder is None or not folder.is_dir() or not any(folder.iterdir()):
        return None
    return folder


def _jvm_started_here() -> bool:
    """Whether this process starts the driver JVM, and so chooses its options and class path:
    under spark-submit the JVM is up already, and PySpark reaches it through its gateway port."""
    return "PYSPARK_GATEWAY_PORT" not in os.environ


def _class_path_after_spark(jars: list[str]) -> None:
    """`jars` on the class path of the JVM spark-submit starts, after Spark's own jars
    (SPARK_DIST_CLASSPATH, which Spark's launcher puts last): Spark's classes keep precedence
    over a jar's copy of them, as they had over `spark.jars`."""
    given = [p for p in os.environ.get(DIST_CLASSPATH, "").split(":") if p]
    os.environ[DIST_CLASSPATH] = ":".join([*given, *(j for j in jars if j and j not in given)])


def driver_jvm_options(settings: SparkJobSettings) -> str:
    """The driver JVM's options as set, and C1 alone (`C1_ONLY`) when the JVM runs no task over
    records and the options choose no JIT of their own: on a cluster, or in local mode when the
    settings say the driver's tasks handle no records (`driver_handles_records`); a local
    driver that runs the tasks keeps both compilers."""
    options = settings.driver_java_options
    runs_no_tasks = on_cluster(settings.master) or (
        settings.master.startswith("local") and not settings.driver_handles_records
    )
    if not runs_no_tasks or "Tiered" in options:
        return options
    return f"{options} {C1_ONLY}".strip()


def _java_options(options: str) -> str:
    """The driver's JVM options; with LOG_FORMAT=json its log4j writes Spark's own JSON lines
    (its structured logging layout), like the job's Python side. The layout is chosen as the
    JVM starts, so it takes effect where the job starts the JVM (python -m); under
    spark-submit, log4j's configuration is the cluster's."""
    if log_format() != "json":
        return options
    return f"{options} -D{LOG4J_CONFIG}=org/apache/spark/log4j2-json-layout.properties".strip()
