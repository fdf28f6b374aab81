"""The shared settings: librdkafka dicts that read committed data only, and errors that name the
variable to fix."""

from pathlib import Path

import pytest
from pydantic_settings import SettingsConfigDict

from foundation.errors import ConfigError
from foundation.settings import load_settings
from services.core.settings import ServiceSettings


class DemoSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="DEMO_SVC_", frozen=True, extra="forbid")
    group_id: str = "demo"


def test_consumers_read_committed_data_and_commit_by_hand() -> None:
    config = DemoSettings(kafka_extra={"security.protocol": "SSL"}).consumer_config()
    assert config["isolation.level"] == "read_committed"
    assert config["enable.auto.commit"] is False
    assert config["group.id"] == "demo"
    assert config["security.protocol"] == "SSL"


def test_a_killed_members_partitions_move_after_the_session_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DemoSettings().consumer_config()["session.timeout.ms"] == 10_000
    monkeypatch.setenv("DEMO_SVC_SESSION_TIMEOUT_MS", "30000")
    config = load_settings(DemoSettings).consumer_config()
    assert (config["session.timeout.ms"], config["heartbeat.interval.ms"]) == (30_000, 10_000)
    # Below the broker's group.min.session.timeout.ms the group would refuse to let it join.
    monkeypatch.setenv("DEMO_SVC_SESSION_TIMEOUT_MS", "5000")
    with pytest.raises(ConfigError, match="DEMO_SVC_SESSION_TIMEOUT_MS"):
        load_settings(DemoSettings)


def test_dead_letters_are_confirmed_by_every_replica() -> None:
    config = DemoSettings().producer_config()
    assert config["acks"] == "all"
    assert config["enable.idempotence"] is True


def test_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_SVC_BATCH_MAX_RECORDS", "0")
    with pytest.raises(ConfigError, match="DEMO_SVC_BATCH_MAX_RECORDS"):
        load_settings(DemoSettings)


def test_a_missing_env_file_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_SVC_ENV_FILE", "/nonexistent/service.env")
    with pytest.raises(ConfigError, match="DEMO_SVC_ENV_FILE"):
        load_settings(DemoSettings)


def test_settings_come_from_the_env_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env_file = tmp_path / "svc.env"
    env_file.write_text('DEMO_SVC_DLQ_TOPIC=my-dlq\nDEMO_SVC_INPUT_TOPICS=["a","b"]\n')
    monkeypatch.setenv("DEMO_SVC_ENV_FILE", str(env_file))
    settings = load_settings(DemoSettings)
    assert settings.dlq_topic == "my-dlq"
    assert settings.input_topics == ("a", "b")
