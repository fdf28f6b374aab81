"""The state folder's location: a local path or a URI, and how Spark and Python reach it."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from enrichment_job.runtime.state_dir import ObjectStoreSettings, StateDir, metrics_path
from enrichment_job.settings import JobSettings
from enrichment_job.views.settings import ViewsSettings


def test_a_relative_path_is_made_absolute_and_spelled_as_a_file_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = JobSettings(state_dir="state dir/job")
    assert settings.state_dir == (tmp_path / "state dir" / "job").as_uri()
    assert settings.state.local_path == str(tmp_path / "state dir" / "job")
    table, _ = settings.state.table_location("customer_versions")
    assert table == str(tmp_path / "state dir" / "job" / "customer_versions")
    assert settings.metrics_path == tmp_path / "state dir" / "job" / "metrics.json"


@pytest.mark.parametrize("cls", [JobSettings, ViewsSettings])
def test_an_s3a_uri_is_kept_and_has_no_default_metrics_file(cls: type[JobSettings | ViewsSettings]) -> None:
    settings = cls(state_dir="s3a://ratings-state/jobs/a/")
    assert settings.state_dir == "s3a://ratings-state/jobs/a"
    assert not settings.state.is_local and settings.metrics_path is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [("hdfs://nn/state", "scheme 'hdfs'"), ("s3a:///state", "names no bucket"), ("s3://b/p", "scheme 's3'")],
)
def test_a_location_the_job_cannot_use_is_refused_naming_the_problem(value: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        JobSettings(state_dir=value)


def test_files_are_written_read_and_removed_through_the_uri(tmp_path: Path) -> None:
    state = StateDir(tmp_path.as_uri(), ObjectStoreSettings())
    assert state.read_text("a/b/run_id") is None and not state.exists("a")
    state.write_text("a/b/run_id", "abc")
    assert state.read_text("a/b/run_id") == "abc" and (tmp_path / "a" / "b" / "run_id").read_text() == "abc"
    state.remove("a")
    assert not state.exists("a") and not (tmp_path / "a").exists()
    state.remove("a")  # nothing there: nothing to do


def test_spark_reaches_s3_state_with_the_same_endpoint_and_keys_and_local_state_needs_nothing() -> None:
    store = ObjectStoreSettings(
        s3_endpoint="http://127.0.0.1:9000", s3_region="us-east-1", s3_access_key="k", s3_secret_key="s"
    )
    conf = StateDir("s3a://b/p", store).spark_conf()
    assert conf == {
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.access.key": "k",
        "spark.hadoop.fs.s3a.secret.key": "s",
    }
    assert StateDir("file:///tmp/x", store).spark_conf() == {}
    assert "s" not in repr(store.s3_secret_key).replace("SecretStr", "")


def test_an_explicit_metrics_file_wins(tmp_path: Path) -> None:
    state = StateDir("s3a://b/p", ObjectStoreSettings())
    assert metrics_path(tmp_path / "m.json", state) == tmp_path / "m.json"


def test_the_delta_writer_reaches_a_local_table_by_path_and_one_in_s3_with_the_same_settings(
    tmp_path: Path,
) -> None:
    local = JobSettings(state_dir=tmp_path).state
    assert local.table_location("customer_versions") == (str(tmp_path / "customer_versions"), {})
    store = ObjectStoreSettings(
        s3_endpoint="http://127.0.0.1:9000",
        s3_region="eu-west-1",
        s3_access_key="AKIA1",  # type: ignore[arg-type]
        s3_secret_key="s3cret",  # type: ignore[arg-type]
    )
    uri, options = StateDir("s3a://ratings-state/jobs/a", store).table_location("customer_versions")
    assert uri == "s3://ratings-state/jobs/a/customer_versions"
    assert options == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "eu-west-1",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ACCESS_KEY_ID": "AKIA1",
        "AWS_SECRET_ACCESS_KEY": "s3cret",
    }
    aws = StateDir("s3a://b/p", ObjectStoreSettings(s3_path_style=False)).table_location("t")
    assert aws == ("s3://b/p/t", {"AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"}), "AWS: the default chain"
