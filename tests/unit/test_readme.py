"""Every setting README.md and docs/reference.md name exists in the settings class of its
program (a user who copies one gets a working variable), and the load generator's table is
complete."""

import re
from pathlib import Path

from pydantic_settings import BaseSettings

from enrichment_job.settings import JobSettings
from enrichment_job.views.settings import ViewsSettings
from infra.stack.settings import StackSettings
from services.es_sink.config import EsSinkSettings
from services.loadgen.config import LoadgenSettings
from services.s3_sink.config import S3SinkSettings
from services.slack_notifier.config import SlackSettings
from services.views.config import ViewsApiSettings

ROOT = Path(__file__).resolve().parents[2]
# The README and the reference it leads to: every setting is documented in one of them.
README = (ROOT / "README.md").read_text() + (ROOT / "docs" / "reference.md").read_text()
CLASSES: dict[str, type[BaseSettings]] = {
    "ENRICH_": JobSettings,
    "VIEWS_JOB_": ViewsSettings,  # before VIEWS_: the longer prefix is tried first
    "VIEWS_": ViewsApiSettings,
    "STACK_": StackSettings,
    "SLACK_": SlackSettings,
    "ES_SINK_": EsSinkSettings,
    "S3_SINK_": S3SinkSettings,
    "LOADGEN_": LoadgenSettings,
}
# A name ends in a letter or digit: `VIEWS_JOB_*` names the prefix, not a variable.
NAMED = re.compile(r"\b(" + "|".join(CLASSES) + r")([A-Z0-9_]*[A-Z0-9])\b")


def variables(cls: type[BaseSettings], prefix: str) -> set[str]:
    return {f"{prefix}{name.upper()}" for name in cls.model_fields} | {f"{prefix}ENV_FILE"}


def test_every_variable_the_readme_names_exists() -> None:
    named = {(m.group(1), m.group(0)) for m in NAMED.finditer(README)}
    unknown = {name for prefix, name in named if name not in variables(CLASSES[prefix], prefix)}
    assert unknown == set()
    assert len(named) > 60  # the check reads the tables, not an empty file


def test_the_load_generator_table_lists_every_setting() -> None:
    rows = set(re.findall(r"^\| `(LOADGEN_[A-Z0-9_]+)` \|", README, flags=re.MULTILINE))
    assert rows == variables(LoadgenSettings, "LOADGEN_") - {"LOADGEN_ENV_FILE"}
