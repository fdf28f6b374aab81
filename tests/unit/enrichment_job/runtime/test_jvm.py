"""The driver JVM's class data sharing archive: written once, mapped after, one per JVM and jars."""

import os
from pathlib import Path

import pytest

from enrichment_job.runtime.jvm import ClassArchive, archive_path, class_archive, prune


def _jdk(home: Path, version: str) -> Path:
    home.mkdir(parents=True)
    (home / "release").write_text(f'IMPLEMENTOR="Eclipse Adoptium"\nJAVA_VERSION="{version}"\n')
    return home


@pytest.fixture
def java_17(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests below are about AppCDS: a JDK before 25, whatever JAVA_HOME the run has."""
    monkeypatch.setenv("JAVA_HOME", str(_jdk(tmp_path / "jdk-17", "17.0.15")))


@pytest.mark.usefixtures("java_17")
def test_without_an_archive_the_jvm_writes_one_under_a_name_of_its_own(tmp_path: Path) -> None:
    archive = class_archive(tmp_path / "jvm", "job", "", "-XX:+UseParallelGC")
    assert archive.writing is not None
    assert archive.writing.parent == archive.path.parent == tmp_path / "jvm"
    assert archive.writing != archive.path
    assert archive.java_options == f"-XX:ArchiveClassesAtExit={archive.writing}"


@pytest.mark.usefixtures("java_17")
def test_an_archive_that_is_there_is_mapped(tmp_path: Path) -> None:
    path = archive_path(tmp_path, "job", "", "")
    path.write_bytes(b"archive")
    archive = class_archive(tmp_path, "job", "", "")
    assert archive == ClassArchive(path)
    assert archive.java_options == f"-XX:SharedArchiveFile={path}"


def test_other_jars_jvm_options_or_java_make_another_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"x")
    first = archive_path(tmp_path, "job", str(jar), "")
    assert archive_path(tmp_path, "job", str(jar), "") == first
    assert archive_path(tmp_path, "job", "", "") != first
    assert archive_path(tmp_path, "job", str(jar), "-Xmx1g") != first
    # the same jars on the JVM's class path: another class path, so another archive
    assert archive_path(tmp_path, "job", str(jar), "", on_class_path=True) != first
    jar.write_bytes(b"xy")  # the same jar, changed
    assert archive_path(tmp_path, "job", str(jar), "") != first
    before = archive_path(tmp_path, "job", "", "")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "another-jdk"))
    assert archive_path(tmp_path, "job", "", "") != before


def test_another_spark_install_of_the_same_version_makes_another_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An archive names every class path entry by its absolute path: one written by another
    # checkout's virtualenv cannot be mapped here ("the top archive failed to load").
    monkeypatch.delenv("SPARK_HOME", raising=False)
    here = archive_path(tmp_path, "job", "", "")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "another-checkout" / "pyspark"))
    assert archive_path(tmp_path, "job", "", "") != here


def test_only_the_newest_archives_are_kept(tmp_path: Path) -> None:
    names = [tmp_path / f"job-{i:016x}.jsa" for i in range(6)]
    for age, path in enumerate(reversed(names)):
        path.write_bytes(b"a")
        os.utime(path, (1_000 + age, 1_000 + age))  # names[-1] oldest ... names[0] newest
    other = tmp_path / "views-0000000000000000.jsa"
    other.write_bytes(b"b")
    prune(names[0], keep=4)
    assert sorted(tmp_path.iterdir()) == sorted([*names[:4], other])


def test_no_jvm_to_wait_for_leaves_no_archive(tmp_path: Path) -> None:
    writing = tmp_path / "a.jsa.1.tmp"
    archive = ClassArchive(tmp_path / "a.jsa", writing)
    archive.finish(None)  # no JVM that this process started
    assert not archive.path.exists()


def test_on_java_25_the_archive_is_an_aot_cache_with_the_run_s_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_jdk(tmp_path / "jdk-25", "25.0.3")))
    writing = class_archive(tmp_path / "jvm", "job", "", "")
    assert writing.path.suffix == ".aot"
    assert writing.writing is not None
    assert writing.java_options.startswith(f"-XX:AOTCacheOutput={writing.writing} ")
    writing.path.write_bytes(b"cache")
    assert class_archive(tmp_path / "jvm", "job", "", "").java_options == f"-XX:AOTCache={writing.path}"


def test_before_java_25_the_archive_is_appcds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_jdk(tmp_path / "jdk-17", "17.0.15")))
    archive = class_archive(tmp_path / "jvm", "job", "", "")
    assert archive.path.suffix == ".jsa"
    assert archive.java_options == f"-XX:ArchiveClassesAtExit={archive.writing}"


def test_pruning_keeps_each_kind_apart(tmp_path: Path) -> None:
    caches = [tmp_path / f"job-{i:016x}.aot" for i in range(3)]
    archives = [tmp_path / f"job-{i:016x}.jsa" for i in range(3)]
    for age, path in enumerate([*caches, *archives]):
        path.write_bytes(b"a")
        os.utime(path, (2_000 - age, 2_000 - age))  # caches[0] newest
    prune(caches[0], keep=1)
    assert sorted(tmp_path.iterdir()) == sorted([caches[0], *archives])


@pytest.mark.usefixtures("java_17")
def test_an_archive_a_start_maps_is_kept_before_newer_ones_no_start_uses(tmp_path: Path) -> None:
    folder = tmp_path / "jvm"
    folder.mkdir()
    used = archive_path(folder, "job", "", "")
    tried = [folder / f"job-{i:016x}.jsa" for i in range(4)]
    for age, path in enumerate([used, *tried]):
        path.write_bytes(b"a")
        os.utime(path, (1_000 + age, 1_000 + age))  # `used` written first, long ago
    assert class_archive(folder, "job", "", "") == ClassArchive(used)  # a start maps it
    prune(tried[-1], keep=4)
    assert sorted(folder.iterdir()) == sorted([used, *tried[1:]])


def test_pruning_removes_what_writers_that_are_gone_left(tmp_path: Path) -> None:
    kept = tmp_path / "job-00000000000000aa.aot"
    kept.write_bytes(b"a")
    gone = 2**22 + 1  # above Linux's largest pid
    left = [
        tmp_path / f"job-00000000000000bb.aot.{gone}.tmp",
        tmp_path / f"job-00000000000000bb.aot.{gone}.tmp.config",
    ]
    writing = tmp_path / f"job-00000000000000cc.aot.{os.getpid()}.tmp.config"  # a JVM still running
    other = tmp_path / f"views-00000000000000bb.aot.{gone}.tmp"
    for path in [*left, writing, other]:
        path.write_bytes(b"")
    prune(kept)
    assert sorted(tmp_path.iterdir()) == sorted([kept, writing, other])
