"""The es_sink's settings (prefix ES_SINK_): the shared Kafka/batch/retry settings plus where and
how to index. Secrets are SecretStr and never logged."""

from importlib import resources
from pathlib import Path
from typing import Self

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from services.core.settings import ServiceSettings
from services.es_sink.documents import DAILY_DAYS

__all__ = ["TEMPLATE_RESOURCE", "EsSinkSettings", "packaged_template"]

TEMPLATE_RESOURCE = "ratings-index-template.json"


def packaged_template() -> str:
    """The index template that comes with the service (package data, wherever it is installed)."""
    return resources.files("services.es_sink").joinpath(TEMPLATE_RESOURCE).read_text()


class EsSinkSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="ES_SINK_")

    group_id: str = "es-sink"
    input_topics: tuple[str, ...] = ("ratings-with-customer-data", "unhappy-platinum-customers")
    dlq_topic: str = "es-sink-dlq"
    batch_max_records: int = Field(2000, gt=0, description="a batch is at most this many records")
    bulk_max_bytes: int = Field(
        10_000_000,
        ge=1000,
        description="a batch's bulk request is split so that each part stays under this size",
    )
    batch_max_wait_ms: int = Field(500, gt=0, description="... or when the oldest record waited this long")

    alert_topics: tuple[str, ...] = Field(
        ("unhappy-platinum-customers",), description="input topics whose records are alerts"
    )
    url: str = "http://127.0.0.1:9200"
    username: SecretStr | None = None
    password: SecretStr | None = None
    api_key: SecretStr | None = None
    request_timeout_s: float = Field(30.0, gt=0, description="per bulk request")
    ratings_index_prefix: str = Field("ratings-", min_length=1, description="+ YYYY.MM.DD of rating_time")
    daily_index_days: int = Field(
        DAILY_DAYS,
        ge=0,
        description="a rating more than this many days older than its Kafka timestamp goes to the "
        "yearly index <prefix>YYYY, not a daily one: a replayed history makes an index a year",
    )
    ratings_alias: str = Field("ratings", min_length=1)
    alerts_index_prefix: str = Field("unhappy-platinum-", min_length=1)
    alerts_alias: str = Field("unhappy-platinum", min_length=1)
    template_file: Path | None = Field(
        None, description="the index template to install; none: the one that comes with the service"
    )
    install_template: bool = True

    @model_validator(mode="after")
    def _one_way_to_log_in(self) -> Self:
        if (self.username is None) != (self.password is None):
            raise ValueError("ES_SINK_USERNAME and ES_SINK_PASSWORD go together")
        if self.api_key is not None and self.username is not None:
            raise ValueError("set ES_SINK_API_KEY or ES_SINK_USERNAME/PASSWORD, not both")
        ratings, alerts = self.ratings_index_prefix, self.alerts_index_prefix
        if ratings.startswith(alerts) or alerts.startswith(ratings):
            raise ValueError("ES_SINK_RATINGS_INDEX_PREFIX and ES_SINK_ALERTS_INDEX_PREFIX must not overlap")
        return self
