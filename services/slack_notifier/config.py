"""The notifier's settings (prefix SLACK_): the shared consumer settings plus where and how fast
to post. Bot token, incoming webhook, or neither (print what would be posted)."""

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import SettingsConfigDict

from services.core.settings import ServiceSettings

__all__ = ["Mode", "SlackSettings"]

Mode = Literal["bot", "webhook", "print"]


class SlackSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="SLACK_")

    group_id: str = "slack-notifier"
    input_topics: tuple[str, ...] = ("unhappy-platinum-customers",)
    dlq_topic: str = "slack-notifier-dlq"
    batch_max_records: int = Field(100, gt=0, description="hand the sink a batch at this many alerts")
    batch_max_wait_ms: int = Field(150, gt=0, description="... or when the oldest alert waited this long")

    bot_token: SecretStr | None = Field(None, description="bot token (xoxb-...): post with chat.postMessage")
    webhook_url: SecretStr | None = Field(None, description="incoming webhook URL (instead of a bot token)")
    channel: str | None = Field(
        None, validate_default=True, description="channel ID to post to (required with a bot token)"
    )
    base_url: str = Field("https://slack.com/api/", description="Slack Web API base URL (tests: a fake)")
    state_dir: Path = Field(
        Path(".state/slack-notifier"),
        validate_default=True,
        description="the posted-alerts ledger (relative: to the working directory at start)",
    )
    max_messages_per_second: float = Field(1.0, gt=0, description="sustained posting rate (Slack: ~1/s)")
    burst_messages: int = Field(3, ge=1, description="messages allowed back to back after a quiet spell")
    summary_max_lines: int = Field(20, ge=1, description="alerts listed by name in a summary message")
    rate_limit_retries: int = Field(3, ge=0, description="429 retries (after Retry-After) per API call")
    timeout_s: int = Field(10, gt=0, description="HTTP timeout of one Slack call")
    ledger_keep_days: int = Field(30, ge=1, description="posted alert ids older than this are forgotten")
    views_url: str = Field(
        "http://127.0.0.1:8087",
        description="the views query service, for the customer's customer_ratings row (empty: off)",
    )
    views_timeout_ms: int = Field(
        300, gt=0, description="a batch's history lookups wait at most this long; then alerts go without"
    )

    @field_validator("bot_token", "webhook_url", "channel", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("webhook_url")
    @classmethod
    def _one_mode(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is not None and info.data.get("bot_token") is not None:
            raise ValueError("set SLACK_BOT_TOKEN or SLACK_WEBHOOK_URL, not both")
        return value

    @field_validator("channel", mode="after")
    @classmethod
    def _channel_with_token(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and info.data.get("bot_token") is not None:
            raise ValueError("SLACK_BOT_TOKEN is set, so SLACK_CHANNEL (a channel ID) is required")
        return value

    @field_validator("state_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.absolute()

    @field_validator("base_url")
    @classmethod
    def _slash(cls, value: str) -> str:
        return value if value.endswith("/") else value + "/"

    @property
    def mode(self) -> Mode:
        if self.bot_token is not None:
            return "bot"
        return "webhook" if self.webhook_url is not None else "print"
