"""The pins in infra/versions.toml and pyproject.toml agree, and the Spark side is one release."""

import re
import tomllib
from pathlib import Path

from infra.stack.versions import load_versions

ROOT = Path(__file__).resolve().parents[4]


def _pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [
        s for extra in project["optional-dependencies"].values() for s in extra
    ]
    pins: dict[str, str] = {}
    for spec in specs:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[a-z,]+\])?==([^\s;]+)", spec)
        assert match, f"not an exact pin: {spec}"
        # one version per package, whichever extras name it
        assert pins.setdefault(match.group(1).lower(), match.group(2)) == match.group(2), spec
    return pins


def test_every_python_dependency_is_pinned_with_a_reason_in_versions_toml() -> None:
    assert _pyproject_pins() == {k.lower(): v for k, v in load_versions().python.items()}


def test_pyspark_and_delta_match_the_staged_jars() -> None:
    versions = load_versions()
    assert versions.python["pyspark"] == versions.spark
    assert versions.python["delta-spark"] == versions.delta


def test_elasticsearch_client_matches_the_server_major() -> None:
    versions = load_versions()
    assert versions.python["elasticsearch"].split(".")[0] == versions.elasticsearch.split(".")[0]


def test_maven_properties_cover_every_pom_placeholder() -> None:
    provided = set(load_versions().maven_properties())
    for pom in (ROOT / "infra" / "maven").glob("*.xml"):
        used = set(re.findall(r"\$\{([a-z0-9.]+)\}", pom.read_text()))
        assert used <= provided, f"{pom.name} uses {used - provided} which versions.toml does not set"


def test_hadoop_aws_matches_the_hadoop_client_the_pyspark_package_ships() -> None:
    from infra.stack.artifacts import pyspark_jars_dir  # noqa: PLC0415

    shipped = [p.name for p in pyspark_jars_dir().glob("hadoop-client-api-*.jar")]
    assert shipped == [f"hadoop-client-api-{load_versions().hadoop}.jar"]
