"""What Slack's answers mean for the consumer loop, in one table: retry later (SinkUnavailable),
stop and fix a setting (FatalSinkError), or dead-letter the alerts of this one message."""

from foundation.errors import FatalSinkError, RatingsError, RecordError, SinkUnavailable

__all__ = ["FIX_A_SETTING", "MESSAGE_REFUSED", "TRY_AGAIN", "MessageRejected", "classify"]


class MessageRejected(RecordError):
    """Slack refused this one message (its blocks or size): its alerts go to the dead-letter topic."""


# Slack `error` codes (Web API) and webhook bodies -> the setting a person has to fix.
FIX_A_SETTING = {
    "invalid_auth": "SLACK_BOT_TOKEN",
    "not_authed": "SLACK_BOT_TOKEN",
    "account_inactive": "SLACK_BOT_TOKEN",
    "token_revoked": "SLACK_BOT_TOKEN",
    "token_expired": "SLACK_BOT_TOKEN",
    "no_permission": "SLACK_BOT_TOKEN",
    "missing_scope": "SLACK_BOT_TOKEN",
    "not_allowed_token_type": "SLACK_BOT_TOKEN",
    "channel_not_found": "SLACK_CHANNEL",
    "not_in_channel": "SLACK_CHANNEL",
    "is_archived": "SLACK_CHANNEL",
    "restricted_action": "SLACK_CHANNEL",
    "invalid_token": "SLACK_WEBHOOK_URL",
    "no_service": "SLACK_WEBHOOK_URL",
    "no_service_id": "SLACK_WEBHOOK_URL",
    "no_team": "SLACK_WEBHOOK_URL",
    "no_active_hooks": "SLACK_WEBHOOK_URL",
    "team_disabled": "SLACK_WEBHOOK_URL",
    "channel_is_archived": "SLACK_WEBHOOK_URL",
    "action_prohibited": "SLACK_WEBHOOK_URL",
    "posting_to_general_channel_denied": "SLACK_WEBHOOK_URL",
}
MESSAGE_REFUSED = {
    "invalid_blocks",
    "invalid_blocks_format",
    "invalid_metadata_format",
    "invalid_metadata_schema",
    "metadata_too_large",
    "msg_too_long",
    "msg_blocks_too_long",
    "no_text",
    "invalid_payload",
    "too_many_attachments",
}
TRY_AGAIN = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}


def classify(error: str, status: int, setting: str) -> RatingsError:
    """The exception for a failed call: `error` is Slack's code, `status` the HTTP status, and
    `setting` the one to name when the code itself does not say (the mode's credential)."""
    if status == 429 or status >= 500 or error in TRY_AGAIN:
        return SinkUnavailable(f"Slack answered {status} {error or ''}".strip())
    if error in FIX_A_SETTING:
        if FIX_A_SETTING[error] == "SLACK_WEBHOOK_URL":
            setting = "SLACK_WEBHOOK_URL"
        elif setting != "SLACK_WEBHOOK_URL":
            setting = FIX_A_SETTING[error]
        return FatalSinkError(f"Slack refused with {error!r} (HTTP {status}): check {setting}")
    if error in MESSAGE_REFUSED:
        return MessageRejected(f"Slack refused the message: {error}")
    return FatalSinkError(f"Slack answered {status} with unexpected error {error!r}: check {setting}")
