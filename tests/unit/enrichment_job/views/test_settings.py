"""The views job's settings: documented, checked at the edge, and --help connects nowhere."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from enrichment_job.views.background import background_env
from enrichment_job.views.settings import ViewsSettings
from foundation.errors import ConfigError

REPO = Path(__file__).resolve().parents[4]
NOT_FIELDS = {"VIEWS_JOB_ENV_FILE"}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VIEWS_JOB_")}
    return subprocess.run(
        [sys.executable, "-m", "enrichment_job.views", *args],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_setting_is_documented_in_the_readme_and_every_documented_one_exists() -> None:
    documented = (
        set(
            re.findall(
                r"\bVIEWS_JOB_[A-Z0-9_]+",
                (REPO / "README.md").read_text() + (REPO / "docs" / "reference.md").read_text(),
            )
        )
        - NOT_FIELDS
    )
    fields = {f"VIEWS_JOB_{name.upper()}" for name in ViewsSettings.model_fields}
    assert documented - fields == set(), "README.md names settings the views job does not have"
    assert fields - documented == set(), "settings missing from README.md"


def test_help_lists_every_setting_with_its_default_and_starts_nothing() -> None:
    # An unreachable Kafka: --help must not try it.
    done = _run({"VIEWS_JOB_BOOTSTRAP_SERVERS": "127.0.0.1:1"}, "--help")
    assert done.returncode == 0, done.stderr
    for name in ViewsSettings.model_fields:
        assert f"VIEWS_JOB_{name.upper()}=" in done.stdout
    assert "VIEWS_JOB_WINDOW_LATENESS_S=3600" in done.stdout
    assert "SparkSession" not in done.stderr


def test_a_bad_value_stops_the_job_before_spark_naming_the_setting() -> None:
    done = _run({"VIEWS_JOB_UNHAPPY_STARS_BELOW": "9"})
    assert done.returncode == 2
    assert "VIEWS_JOB_UNHAPPY_STARS_BELOW" in done.stderr
    # A trigger Spark would refuse at the first batch (no fraction of a minute) is refused here.
    done = _run({"VIEWS_JOB_WINDOWED_TRIGGER_INTERVAL": "0.5 minutes"})
    assert done.returncode == 2
    assert "VIEWS_JOB_WINDOWED_TRIGGER_INTERVAL" in done.stderr and "only seconds" in done.stderr


def test_spark_reads_only_committed_enriched_records() -> None:
    settings = ViewsSettings(
        kafka_extra={"sasl.username": "views"}, spark_kafka_extra={"sasl.jaas.config": "j"}
    )
    options = settings.kafka_options()
    assert options["kafka.isolation.level"] == "read_committed"
    assert options["kafka.sasl.jaas.config"] == "j" and "kafka.sasl.username" not in options
    assert settings.producer_config()["sasl.username"] == "views"


def test_queries_default_to_all_and_a_subset_keeps_its_order_once() -> None:
    known = ("views", "view-segment_hourly", "view-channel_daily")
    assert ViewsSettings().chosen_queries(known) == known
    chosen = ViewsSettings(
        queries=" view-channel_daily, view-segment_hourly,view-channel_daily "
    ).chosen_queries(known)
    assert chosen == ("view-channel_daily", "view-segment_hourly")


def test_an_unknown_query_is_an_error_naming_the_setting_and_the_known_queries() -> None:
    with pytest.raises(
        ConfigError, match=r"VIEWS_JOB_QUERIES: unknown view-customer_ratings .*view-segment_hourly"
    ):
        ViewsSettings(queries="views,view-customer_ratings").chosen_queries(("views", "view-segment_hourly"))


def test_background_names_every_query_but_the_keyed_views() -> None:
    known = ("views", "view-segment_hourly", "view-channel_daily")
    chosen = ViewsSettings(queries="background").chosen_queries(known)
    assert chosen == ("view-segment_hourly", "view-channel_daily")
    assert (
        ViewsSettings(queries="view-channel_daily,background").chosen_queries(known)[0]
        == "view-channel_daily"
    )


def test_the_background_process_and_a_query_list_exclude_each_other() -> None:
    done = _run({"VIEWS_JOB_BACKGROUND_PROCESS": "true", "VIEWS_JOB_QUERIES": "views"})
    assert done.returncode == 2
    assert "VIEWS_JOB_BACKGROUND_PROCESS" in done.stderr and "VIEWS_JOB_QUERIES" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_batch_bound_the_driver_cannot_collect_is_refused_naming_both_settings() -> None:
    assert ViewsSettings(driver_memory="1g", max_batch_bytes=268_435_456).max_batch_bytes == 268_435_456
    assert ViewsSettings(driver_memory="2048", max_batch_bytes=536_870_912).driver_memory == "2048"  # MiB
    done = _run({"VIEWS_JOB_MAX_BATCH_BYTES": "2147483648"})  # a collect of it stopped a 1 GB driver
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "VIEWS_JOB_MAX_BATCH_BYTES (2147483648)" in done.stderr
    assert "VIEWS_JOB_DRIVER_MEMORY (1g: 268435456 bytes)" in done.stderr
    done = _run({"VIEWS_JOB_DRIVER_MEMORY": "a lot"})
    assert done.returncode == 2 and "VIEWS_JOB_DRIVER_MEMORY" in done.stderr


def test_the_background_process_gets_its_own_queries_state_and_ports() -> None:
    settings = ViewsSettings(
        state_dir="s3a://lake/views/",
        metrics_port=9464,
        metrics_file=Path("/var/lib/views/metrics.json"),
        background_process=True,
        background_nice=7,
    )
    env = background_env(settings, {"VIEWS_JOB_NAME": "prod", "VIEWS_JOB_BACKGROUND_PROCESS": "true"})
    assert env["VIEWS_JOB_NAME"] == "prod"  # the same job: its transactional ids are <name>-<query>
    assert env["VIEWS_JOB_QUERIES"] == "background"
    assert env["VIEWS_JOB_BACKGROUND_PROCESS"] == "false"  # no third process
    assert env["VIEWS_JOB_STATE_DIR"] == "s3a://lake/views/background"
    assert env["VIEWS_JOB_METRICS_PORT"] == "0"
    assert env["VIEWS_JOB_METRICS_FILE"] == "/var/lib/views/metrics-background.json"
    assert env["VIEWS_JOB_NICE"] == "7"
    assert ViewsSettings(_env_file=None, **_as_fields(env)).chosen_queries(
        ("views", "view-segment_hourly")
    ) == ("view-segment_hourly",)


def _as_fields(env: dict[str, str]) -> dict[str, str]:
    prefix = "VIEWS_JOB_"
    return {k[len(prefix) :].lower(): v for k, v in env.items() if k.startswith(prefix)}


def test_a_view_in_sql_runs_at_its_own_trigger_else_every_two_seconds() -> None:
    settings = ViewsSettings()
    assert settings.sql_trigger(None) == "2 seconds" != settings.trigger_interval
    assert settings.sql_trigger("5 seconds") == "5 seconds"
    assert ViewsSettings(sql_trigger_interval="1 second").sql_trigger(None) == "1 second"
    with pytest.raises(ValueError, match="sql_trigger_interval"):
        ViewsSettings(sql_trigger_interval="every second")
