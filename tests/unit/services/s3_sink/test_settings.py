"""The README's settings table and the settings class agree both ways, and a bad value names the
variable to fix."""

import re
from pathlib import Path

import pytest

from foundation.errors import ConfigError
from foundation.settings import load_settings
from services.s3_sink.config import S3SinkSettings

README = Path(__file__).parents[4] / "services" / "s3_sink" / "README.md"


def test_the_readme_documents_every_setting_and_no_other() -> None:
    documented = set(re.findall(r"S3_SINK_[A-Z0-9_]+", README.read_text())) - {"S3_SINK_ENV_FILE"}
    assert documented == {f"S3_SINK_{name.upper()}" for name in S3SinkSettings.model_fields}


def test_every_setting_has_a_table_row() -> None:
    rows = set(re.findall(r"^\| `(S3_SINK_[A-Z0-9_]+)` \|", README.read_text(), flags=re.MULTILINE))
    assert rows == {f"S3_SINK_{name.upper()}" for name in S3SinkSettings.model_fields}


def test_the_defaults_are_the_lakes() -> None:
    settings = S3SinkSettings()
    assert settings.input_topics == ("ratings-with-customer-data",)
    assert (settings.group_id, settings.dlq_topic, settings.bucket) == (
        "s3-sink",
        "s3-sink-dlq",
        "ratings-lake",
    )
    assert settings.path_style is True
    assert S3SinkSettings(prefix="/lake/").key_prefix == "lake"


@pytest.mark.parametrize(
    ("name", "value"),
    [("S3_SINK_COMPRESSION", "lz5"), ("S3_SINK_BATCH_MAX_WAIT_MS", "0"), ("S3_SINK_PATH_STYLE", "perhaps")],
)
def test_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        load_settings(S3SinkSettings)


def test_secrets_are_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3_SINK_SECRET_KEY", "very-secret")
    assert "very-secret" not in repr(load_settings(S3SinkSettings))
