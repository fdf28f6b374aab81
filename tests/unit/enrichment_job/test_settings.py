"""The job's settings: every one is documented in README.md, and a bad value names the setting."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from enrichment_job.settings import JobSettings

REPO = Path(__file__).resolve().parents[3]
# Not a field: it names the file the settings are read from.
NOT_FIELDS = {"ENRICH_ENV_FILE"}


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("ENRICH_"):
            monkeypatch.delenv(name)


def test_every_setting_is_documented_and_every_documented_one_exists() -> None:
    readme = (REPO / "README.md").read_text() + (REPO / "docs" / "reference.md").read_text()
    documented = set(re.findall(r"\bENRICH_[A-Z0-9_]+", readme)) - NOT_FIELDS
    fields = {f"ENRICH_{name.upper()}" for name in JobSettings.model_fields}
    assert documented - fields == set(), "README.md names settings the job does not have"
    assert fields - documented == set(), "settings missing from README.md"


def test_a_bad_value_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_env(monkeypatch)
    monkeypatch.setenv("ENRICH_GRACE_MS", "-5")
    with pytest.raises(pydantic.ValidationError, match="grace_ms"):
        JobSettings()


@pytest.mark.parametrize(
    "name, value",
    [
        ("ENRICH_GRACE_MS", "-5"),
        ("ENRICH_SPARK_KAFKA_EXTRA", '{"not": json'),
        ("ENRICH_TRIGGER_INTERVAL", "500 ms"),
    ],
)
def test_the_job_stops_before_spark_with_the_setting_named(name: str, value: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENRICH_")}
    env[name] = value
    done = subprocess.run(
        [sys.executable, "-m", "enrichment_job"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"setting {name}:" in done.stderr and "Traceback" not in done.stderr


def test_spark_kafka_source_holds_fetches_briefly_and_extra_options_pass_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _clean_env(monkeypatch)
    monkeypatch.setenv("ENRICH_SPARK_KAFKA_EXTRA", '{"sasl.jaas.config": "jaas"}')
    monkeypatch.setenv("ENRICH_KAFKA_EXTRA", '{"sasl.username": "enrichment"}')
    options = JobSettings().kafka_options()
    assert options["kafka.sasl.jaas.config"] == "jaas" and "kafka.sasl.username" not in options
    assert JobSettings().producer_config()["sasl.username"] == "enrichment"
    assert "sasl.jaas.config" not in JobSettings().producer_config()
    assert options["kafka.isolation.level"] == "read_committed"
    assert options["kafka.fetch.max.wait.ms"] == "20"
    monkeypatch.setenv("ENRICH_SOURCE_FETCH_MAX_WAIT_MS", "0")
    assert JobSettings().kafka_options()["kafka.fetch.max.wait.ms"] == "0"


def test_a_trigger_interval_spark_would_refuse_stops_the_job_by_name() -> None:
    for bad in ("half a second", "0.5 hours"):
        with pytest.raises(pydantic.ValidationError, match="trigger_interval"):
            JobSettings(trigger_interval=bad)


def test_the_release_waits_at_most_half_the_trigger_interval() -> None:
    assert JobSettings().release_wait_s == 0.25  # the defaults: 250 ms of a 500 ms trigger
    assert JobSettings(trigger_interval="200 milliseconds").release_wait_s == 0.1
    assert JobSettings(trigger_interval="2 seconds", release_wait_ms=700).release_wait_s == 0.7
    assert JobSettings(release_wait_ms=0).release_wait_s == 0
    assert JobSettings(trigger_interval="0 seconds").release_wait_s == 0  # batches back to back
