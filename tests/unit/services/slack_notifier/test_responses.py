"""Slack's answers, mapped in one table: retry later, stop naming a setting, or dead-letter."""

import pytest

from foundation.errors import FatalSinkError, SinkUnavailable
from services.slack_notifier.responses import MessageRejected, classify


@pytest.mark.parametrize(
    "error, status, mode_setting, kind, named",
    [
        ("", 500, "SLACK_BOT_TOKEN", SinkUnavailable, None),
        ("ratelimited", 429, "SLACK_BOT_TOKEN", SinkUnavailable, None),
        ("internal_error", 200, "SLACK_BOT_TOKEN", SinkUnavailable, None),
        ("invalid_auth", 200, "SLACK_BOT_TOKEN", FatalSinkError, "SLACK_BOT_TOKEN"),
        ("not_in_channel", 200, "SLACK_BOT_TOKEN", FatalSinkError, "SLACK_CHANNEL"),
        ("channel_not_found", 404, "SLACK_WEBHOOK_URL", FatalSinkError, "SLACK_WEBHOOK_URL"),
        ("no_service", 404, "SLACK_WEBHOOK_URL", FatalSinkError, "SLACK_WEBHOOK_URL"),
        ("invalid_blocks", 200, "SLACK_BOT_TOKEN", MessageRejected, None),
        ("something_new", 200, "SLACK_BOT_TOKEN", FatalSinkError, "SLACK_BOT_TOKEN"),
    ],
)
def test_classify(
    error: str, status: int, mode_setting: str, kind: type[Exception], named: str | None
) -> None:
    result = classify(error, status, mode_setting)
    assert type(result) is kind
    if named:
        assert named in str(result)
