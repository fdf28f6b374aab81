"""The README's settings table and the settings class agree both ways; bad values name the variable."""

import re
from pathlib import Path

import pytest

from foundation.errors import ConfigError
from foundation.settings import load_settings
from services.es_sink.config import EsSinkSettings
from services.es_sink.service import make_sink
from services.es_sink.sink import load_template

README = Path(__file__).resolve().parents[4] / "services" / "es_sink" / "README.md"


def test_the_readme_documents_every_setting_and_no_other() -> None:
    documented = set(re.findall(r"ES_SINK_[A-Z0-9_]+", README.read_text())) - {"ES_SINK_ENV_FILE"}
    fields = {f"ES_SINK_{name.upper()}" for name in EsSinkSettings.model_fields}
    assert documented == fields


def test_every_setting_has_a_row_in_the_table() -> None:
    rows = set(re.findall(r"^\| `(ES_SINK_[A-Z0-9_]+)` \|", README.read_text(), flags=re.MULTILINE))
    assert rows == {f"ES_SINK_{name.upper()}" for name in EsSinkSettings.model_fields}


def test_defaults_suit_the_local_stack() -> None:
    settings = EsSinkSettings()
    assert settings.group_id == "es-sink"
    assert settings.dlq_topic == "es-sink-dlq"
    assert set(settings.alert_topics) <= set(settings.input_topics)
    assert settings.template_file is None and load_template(settings)["template"]["mappings"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ES_SINK_BATCH_MAX_RECORDS", "0"),
        ("ES_SINK_REQUEST_TIMEOUT_S", "soon"),
        ("ES_SINK_INSTALL_TEMPLATE", "perhaps"),
        ("ES_SINK_RATINGS_ALIAS", ""),
    ],
)
def test_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        load_settings(EsSinkSettings)


def test_a_user_without_a_password_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_SINK_USERNAME", "elastic")
    with pytest.raises(ConfigError, match="ES_SINK_PASSWORD"):
        load_settings(EsSinkSettings)


def test_overlapping_index_prefixes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_SINK_ALERTS_INDEX_PREFIX", "ratings-alerts-")
    with pytest.raises(ConfigError, match="ES_SINK_ALERTS_INDEX_PREFIX"):
        load_settings(EsSinkSettings)


def test_a_missing_template_file_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ES_SINK_TEMPLATE_FILE"):
        make_sink(EsSinkSettings(template_file=tmp_path / "missing.json"))


def test_secrets_stay_out_of_the_settings_repr() -> None:
    settings = EsSinkSettings(username="elastic", password="hunter2-secret")
    assert "hunter2-secret" not in repr(settings)
    assert "hunter2-secret" not in str(settings.model_dump())
