"""The notifier's settings: the README documents exactly the settings that exist, a bad value
names its variable, and a bad combination of modes names the setting to fix."""

import re
from pathlib import Path

import pytest

from foundation.errors import ConfigError
from foundation.settings import load_settings
from services.slack_notifier.config import SlackSettings

README = Path(__file__).resolve().parents[4] / "services" / "slack_notifier" / "README.md"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SlackSettings.model_fields:
        monkeypatch.delenv(f"SLACK_{name.upper()}", raising=False)
    monkeypatch.delenv("SLACK_ENV_FILE", raising=False)


def test_the_readme_documents_every_setting_and_no_other() -> None:
    documented = set(re.findall(r"SLACK_[A-Z0-9_]+", README.read_text())) - {"SLACK_ENV_FILE"}
    assert documented == {f"SLACK_{name.upper()}" for name in SlackSettings.model_fields}


def test_each_setting_has_a_table_row() -> None:
    rows = set(re.findall(r"^\| `(SLACK_[A-Z0-9_]+)` \|", README.read_text(), re.MULTILINE))
    assert rows == {f"SLACK_{name.upper()}" for name in SlackSettings.model_fields}


def test_defaults_print_with_low_latency_batches() -> None:
    settings = load_settings(SlackSettings)
    assert settings.mode == "print"
    assert settings.input_topics == ("unhappy-platinum-customers",)
    assert (settings.group_id, settings.dlq_topic) == ("slack-notifier", "slack-notifier-dlq")
    assert settings.batch_max_wait_ms <= 200


def test_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_MAX_MESSAGES_PER_SECOND", "0")
    with pytest.raises(ConfigError, match="SLACK_MAX_MESSAGES_PER_SECOND"):
        load_settings(SlackSettings)


def test_token_and_webhook_together_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.setenv("SLACK_CHANNEL", "C1")
    monkeypatch.setenv("SLACK_WEBHOOK_URL", "https://hooks.example/secret-part")
    with pytest.raises(ConfigError, match="setting SLACK_WEBHOOK_URL") as raised:
        load_settings(SlackSettings)
    assert "secret-part" not in str(raised.value) and "xoxb-1" not in str(raised.value)


def test_a_token_needs_a_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    with pytest.raises(ConfigError, match="setting SLACK_CHANNEL"):
        load_settings(SlackSettings)


def test_modes_and_empty_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.setenv("SLACK_CHANNEL", "C1")
    monkeypatch.setenv("SLACK_WEBHOOK_URL", "")
    monkeypatch.setenv("SLACK_BASE_URL", "http://127.0.0.1:1/api")
    settings = load_settings(SlackSettings)
    assert settings.mode == "bot"
    assert settings.base_url == "http://127.0.0.1:1/api/"
    assert "xoxb-1" not in repr(settings)
