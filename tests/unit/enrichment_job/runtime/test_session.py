"""The Spark session the jobs build: its UI on the loopback with its kill links off, the driver
JVM's JSON logs, its JIT and class archive on a cluster."""

import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from enrichment_job.runtime import session as session_module
from enrichment_job.runtime.session import (
    C1_ONLY,
    DIST_CLASSPATH,
    SessionStart,
    driver_archive,
    driver_jvm_options,
    jars_on_class_path,
    product_archive,
    query_conf,
)
from enrichment_job.settings import JobSettings
from enrichment_job.views.settings import ViewsSettings

_SESSION = """
import json, sys
from enrichment_job.runtime.session import build_session
from enrichment_job.settings import JobSettings
spark = build_session(JobSettings(master="local[1]", ui_enabled=True))
print(json.dumps({"url": spark.sparkContext.uiWebUrl, "kill": spark.conf.get("spark.ui.killEnabled")}))
sys.stdout.flush()
input()  # holds the UI open until the test has looked
spark.stop()
"""


def _listening(port: int) -> set[str]:
    """The local addresses listening on `port`, as /proc/net/tcp and tcp6 spell them (hex)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_the_spark_ui_of_a_local_job_listens_on_the_loopback_only_with_its_kill_links_off() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP" and not k.startswith("ENRICH_")}
    with subprocess.Popen(
        [sys.executable, "-c", _SESSION],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # Spark's warnings (no Delta jars here)
        text=True,
        env=env,
    ) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        try:
            started = json.loads(proc.stdout.readline())
            port = int(started["url"].rsplit(":", 1)[1])
            assert started["kill"] == "false"
            # 127.0.0.1 (as IPv4, or IPv4 on an IPv6 socket), not every interface
            assert _listening(port) and _listening(port) <= {"0100007F", "0000000000000000FFFF00000100007F"}
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.wait(60) == 0
        finally:
            proc.kill()


def test_with_log_format_json_the_driver_jvm_logs_json_lines_too() -> None:
    script = (
        "from enrichment_job.runtime.session import build_session\n"
        "from enrichment_job.settings import JobSettings\n"
        "build_session(JobSettings(master='local[1]')).stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENRICH_")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "LOG_FORMAT": "json"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    # Hadoop's warning about its native library, at least, comes from log4j
    native = [line for line in lines if line["logger"] == "NativeCodeLoader"]
    assert native and native[0]["level"] == "WARN", done.stderr
    assert not [line for line in done.stderr.splitlines() if " WARN NativeCodeLoader" in line]


def test_a_driver_that_runs_no_task_over_records_compiles_with_c1_alone_unless_its_options_choose_a_jit() -> (
    None
):
    on_cluster = JobSettings(master="spark://127.0.0.1:7077")
    assert driver_jvm_options(on_cluster) == f"-XX:+UseParallelGC {C1_ONLY}"
    assert driver_jvm_options(JobSettings(master="spark://h:7077", join_in="tasks")).endswith(C1_ONLY)
    # local mode, the join on the driver: the JVM only plans the query
    assert driver_jvm_options(JobSettings(master="local[2]")) == f"-XX:+UseParallelGC {C1_ONLY}"
    assert driver_jvm_options(JobSettings(master="local[2]", join_in="driver")).endswith(C1_ONLY)
    # local mode, the driver JVM runs tasks over records: both compilers
    assert driver_jvm_options(JobSettings(master="local[2]", join_in="tasks")) == "-XX:+UseParallelGC"
    assert driver_jvm_options(JobSettings(master="local[2]", views_in_job=True)) == "-XX:+UseParallelGC"
    assert driver_jvm_options(ViewsSettings(master="local[2]")) == "-XX:+UseParallelGC"
    assert driver_jvm_options(JobSettings(master="")) == "-XX:+UseParallelGC"  # spark-submit's choice
    chosen = JobSettings(master="spark://h:7077", driver_java_options="-XX:-TieredCompilation")
    assert driver_jvm_options(chosen) == "-XX:-TieredCompilation"
    assert driver_jvm_options(
        JobSettings(master="local[2]", driver_java_options="-XX:-TieredCompilation")
    ) == ("-XX:-TieredCompilation")
    views = ViewsSettings(master="spark://127.0.0.1:7077")
    assert driver_jvm_options(views).endswith(C1_ONLY)


def test_the_class_archive_of_a_driver_is_keyed_by_the_options_it_runs_with(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    both = driver_archive(
        JobSettings(master="local[2]", views_in_job=True, class_archive_dir=str(tmp_path)), "app"
    )
    c1 = driver_archive(JobSettings(master="spark://h:7077", class_archive_dir=str(tmp_path)), "app")
    assert both is not None and c1 is not None
    assert both.path != c1.path  # an archive is recorded with the JIT flags it is mapped with


def test_with_a_spark_conf_dir_of_files_on_its_class_path_the_driver_has_no_class_archive(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # The JVM refuses to archive a class path with such a folder ("non-empty directory"): an
    # error at every stop, and no archive ever written.
    settings = JobSettings(master="spark://h:7077", class_archive_dir=str(tmp_path / "archives"))
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert driver_archive(settings, "app") is not None  # an empty folder is archived
    (conf / "spark-defaults.conf").write_text("spark.authenticate true\n")
    assert driver_archive(settings, "app") is None
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))  # its conf folder when SPARK_CONF_DIR is unset
    assert driver_archive(settings, "app") is None


def test_the_session_module_loads_what_registers_fork_hooks_before_its_thread_forks() -> None:
    # A module that registers fork hooks, imported by another thread while the session's
    # thread forked spark-submit, ran its after-fork hook alone: a traceback in the job's log.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, enrichment_job.runtime.session; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "'concurrent.futures.thread'" in loaded


class _Session:
    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_a_session_started_in_the_background_is_handed_over_once_up(monkeypatch: Any) -> None:
    built = _Session()
    calls: list[tuple[str, Any]] = []

    def build(settings: Any, app_name: str, archive: Any) -> _Session:
        calls.append((app_name, archive))
        return built

    monkeypatch.setattr(session_module, "build_session", build)
    starting = SessionStart(JobSettings(), "an-app", None)
    got: Any = starting.session()
    assert got is built
    assert calls == [("an-app", None)]
    assert not built.stopped


def test_what_the_background_start_raised_is_raised_to_the_caller(monkeypatch: Any) -> None:
    def build(settings: Any, app_name: str, archive: Any) -> _Session:
        raise RuntimeError("no JVM here")

    monkeypatch.setattr(session_module, "build_session", build)
    starting = SessionStart(JobSettings(), "an-app", None)
    with pytest.raises(RuntimeError, match="no JVM here"):
        starting.session()
    starting.abandon()  # nothing to stop, and no second error


def test_abandoning_a_start_stops_the_session_once_it_is_up(monkeypatch: Any) -> None:
    built, release = _Session(), threading.Event()

    def build(settings: Any, app_name: str, archive: Any) -> _Session:
        release.wait(10)
        return built

    monkeypatch.setattr(session_module, "build_session", build)
    starting = SessionStart(JobSettings(), "an-app", None)
    threading.Timer(0.2, release.set).start()
    starting.abandon()  # waits for the start, then stops what it started: no JVM left behind
    assert built.stopped


def test_in_local_mode_the_jars_go_on_the_class_path_after_sparks_own(monkeypatch: Any) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv(DIST_CLASSPATH, "/opt/hadoop/lib.jar")
    local = JobSettings(master="local[2]", spark_jars="/j/a.jar,/j/b.jar")
    assert jars_on_class_path(local)
    assert not jars_on_class_path(JobSettings(master="local[2]", spark_jars=""))
    # on a cluster the executors need them (spark.jars ships them)
    assert not jars_on_class_path(JobSettings(master="spark://host:7077", spark_jars="/j/a.jar"))
    # a JVM that spark-submit started has its class path already
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "4040")
    assert not jars_on_class_path(local)


def test_a_session_in_local_mode_loads_the_jars_from_the_class_path(tmp_path: Path) -> None:
    """The jars reach the JVM's own class path (SPARK_DIST_CLASSPATH, after Spark's jars), not
    spark.jars: a class of the jar loads, and no copy of it is fetched for the executor."""
    jar = tmp_path / "marker.jar"
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("product/marker.txt", "on the class path\n")
    script = (
        "import json\n"
        "from enrichment_job.runtime.session import build_session\n"
        "from enrichment_job.settings import JobSettings\n"
        f"spark = build_session(JobSettings(master='local[1]', spark_jars={str(jar)!r}))\n"
        "jvm = spark.sparkContext._jvm\n"
        "found = jvm.java.lang.ClassLoader.getSystemClassLoader().getResource('product/marker.txt')\n"
        "print(json.dumps({'found': found is not None,\n"
        "    'spark_jars': spark.conf.get('spark.jars', ''),\n"
        "    'class_path': jvm.java.lang.System.getProperty('java.class.path')}))\n"
        "spark.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENRICH_") and k != DIST_CLASSPATH}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["found"], seen
    assert seen["spark_jars"] == ""
    entries = seen["class_path"].split(":")
    assert entries[-1] == str(jar)  # last: Spark's own jars come first
    assert any("pyspark/jars" in e for e in entries[:-1])


def test_a_query_keeps_the_settings_it_started_with_and_the_session_gets_its_own_back(spark: Any) -> None:
    seen: list[str | None] = []
    key = "spark.sql.codegen.wholeStage"
    before = spark.conf.get(key)
    with query_conf(spark, {key: "false", "spark.sql.unit.test.unset": "x"}):
        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 1)
            .load()
            .writeStream.foreachBatch(lambda batch, _: seen.append(batch.sparkSession.conf.get(key)))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
    try:
        assert (spark.conf.get(key), spark.conf.get("spark.sql.unit.test.unset", None)) == (before, None)
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
    assert len(seen) >= 2 and set(seen) == {"false"}
    assert spark.conf.get(key) == before


def test_the_archive_holds_the_product_s_packages_as_imported_without_byte_code(tmp_path: Path) -> None:
    with zipfile.ZipFile(product_archive(tmp_path / "p.zip")) as archive:
        names = set(archive.namelist())
    assert {"enrichment_job/__init__.py", "enrichment_job/tasks/enrich.py", "foundation/__init__.py"} <= names
    assert "enrichment_job/runtime/scheduler_pools.xml" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
