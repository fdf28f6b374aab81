"""Settings of the load generator (prefix LOADGEN_), overridable by command-line flags."""

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from foundation.settings import Settings

__all__ = ["LoadgenSettings"]


class LoadgenSettings(Settings):
    model_config = SettingsConfigDict(env_prefix="LOADGEN_")

    bootstrap_servers: str = "127.0.0.1:9092"
    ratings_topic: str = "ratings"
    kafka_extra: dict[str, str] = Field(default_factory=dict, description="extra librdkafka settings")
    db_kind: Literal["mariadb", "postgres"] = Field("mariadb", description="the customer database")
    db_host: str = "127.0.0.1"
    db_port: int = Field(0, ge=0, le=65535, description="0: the kind's usual port (3306, 5432)")
    db_name: str = "demo"
    db_user: str = "ratings_app"
    db_password: SecretStr = SecretStr("")

    rate: float = Field(100.0, gt=0, description="ratings per second")
    duration_s: float = Field(0, ge=0, description="stop after this long; 0 runs until stopped")
    customers: int = Field(3000, ge=1, description="customers in the table before ratings start")
    changes_per_s: float = Field(1.0, ge=0, description="customer changes per second in the database")
    unmatched_share: float = Field(0.05, ge=0, le=1, description="share of ratings for unknown user ids")
    bad_every: int = Field(500, ge=0, description="every Nth record is unreadable (0: none)")
    seed: int = 42
    first_rating_id: int = Field(0, ge=0, description="0: derived from the clock, unique per run")
    metrics_file: Path | None = None

    @property
    def database_port(self) -> int:
        return self.db_port or {"mariadb": 3306, "postgres": 5432}[self.db_kind]
