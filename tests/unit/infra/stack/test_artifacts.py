"""Which JDK the Spark jobs run on: the setting, else the newest fitting JDK 25 found."""

from pathlib import Path

import pytest

from infra.stack.artifacts import Installed, find_spark_java, java_release
from infra.stack.errors import PrerequisiteMissing
from infra.stack.settings import StackSettings


def _jdk(home: Path, version: str | None) -> Path:
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("")
    if version is not None:
        (home / "release").write_text(f'JAVA_VERSION="{version}"\nOS_NAME="Linux"\n')
    return home


def test_the_newest_jdk_25_at_the_wanted_version_or_later_is_chosen(tmp_path: Path) -> None:
    _jdk(tmp_path / "java-17-openjdk-amd64", "17.0.15")
    _jdk(tmp_path / "temurin-25-jdk-amd64", "25.0.3")
    _jdk(tmp_path / "jdk-25.0.4", "25.0.4")
    _jdk(tmp_path / "jdk-26", "26")
    _jdk(tmp_path / "no-release", None)
    assert find_spark_java(StackSettings(), "25.0.3", tmp_path) == tmp_path / "jdk-25.0.4"


def test_a_jdk_25_before_the_wanted_version_is_not_taken(tmp_path: Path) -> None:
    # Spark 4.2 calls Java 25 before 25.0.3 deprecated (a G1 data corruption)
    _jdk(tmp_path / "jdk-25.0.2", "25.0.2")
    assert find_spark_java(StackSettings(), "25.0.3", tmp_path) is None
    assert find_spark_java(StackSettings(), "25.0.3", tmp_path / "missing") is None


def test_the_setting_wins_and_must_be_a_jdk(tmp_path: Path) -> None:
    chosen = _jdk(tmp_path / "jdk-21", "21.0.5")
    _jdk(tmp_path / "jdk-25", "25.0.3")
    assert find_spark_java(StackSettings(spark_java_home=chosen), "25.0.3", tmp_path) == chosen
    with pytest.raises(PrerequisiteMissing, match="STACK_SPARK_JAVA_HOME"):
        find_spark_java(StackSettings(spark_java_home=tmp_path / "nothing"), "25.0.3", tmp_path)


def test_release_versions_and_the_fallback_to_the_components_jdk(tmp_path: Path) -> None:
    assert java_release(_jdk(tmp_path / "a", "25.0.3")) == (25, 0, 3)
    assert java_release(tmp_path / "missing") is None
    parts = [tmp_path / n for n in ("jdk", "kafka", "s3proxy", "spark", "plugins", "es.zip")]
    assert Installed(*parts).spark_java == tmp_path / "jdk"
    with_25 = Installed(*parts, spark_java_home=tmp_path / "jdk25")
    assert with_25.spark_java == tmp_path / "jdk25"
