"""The three ways to deliver a message: the Web API with a bot token, an incoming webhook, or
printing it (no credentials: the demo). Each turns Slack's answers into the core's errors.

Retries: slack-sdk's RateLimitErrorRetryHandler is the only retry handler on the clients (it
waits out a 429's Retry-After); connection errors and 5xx surface at once as SinkUnavailable and
the consumer loop owns those retries.
"""

import http.client
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from slack_sdk.web import SlackResponse
from slack_sdk.webhook import WebhookClient

from foundation.errors import SinkUnavailable
from services.slack_notifier.config import SlackSettings
from services.slack_notifier.message import SlackMessage
from services.slack_notifier.responses import classify

log = logging.getLogger(__name__)
NETWORK_ERRORS = (OSError, http.client.HTTPException)
HISTORY_PAGE = 200
HISTORY_MAX_PAGES = 50


@dataclass(frozen=True)
class Receipt:
    channel: str | None
    ts: str | None


class Delivery(Protocol):
    mode: str

    def check(self) -> None:
        """Fail early (FatalSinkError) if the credentials cannot work."""

    def post(self, message: SlackMessage) -> Receipt: ...

    def history(self, channel: str | None, oldest: float) -> Iterator[dict[str, Any]] | None:
        """Messages in the channel since `oldest` (epoch s), with metadata; None if unreadable."""


class WebApi:
    mode = "bot"

    def __init__(self, settings: SlackSettings) -> None:
        assert settings.bot_token is not None
        self.channel = str(settings.channel)
        self.client = WebClient(
            token=settings.bot_token.get_secret_value(),
            base_url=settings.base_url,
            timeout=settings.timeout_s,
            retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=settings.rate_limit_retries)],
        )

    def _call(self, method: str, **kwargs: Any) -> SlackResponse:
        try:
            return self.client.api_call(method, json=kwargs.pop("json", None), params=kwargs or None)
        except SlackApiError as err:
            error = str(err.response.get("error", "")) if isinstance(err.response.data, dict) else ""
            raise classify(error, int(err.response.status_code), "SLACK_BOT_TOKEN") from None
        except NETWORK_ERRORS as err:
            raise SinkUnavailable(f"Slack Web API {method}: {err!r}") from None

    def check(self) -> None:
        answer = self._call("auth.test")
        log.info("Slack bot token works: team %s, bot user %s", answer.get("team"), answer.get("user_id"))

    def post(self, message: SlackMessage) -> Receipt:
        answer = self._call("chat.postMessage", json={"channel": self.channel, **message.body()})
        return Receipt(str(answer.get("channel") or self.channel), str(answer.get("ts")))

    def history(self, channel: str | None, oldest: float) -> Iterator[dict[str, Any]]:
        cursor = None
        for _ in range(HISTORY_MAX_PAGES):
            params: dict[str, Any] = {
                "channel": channel or self.channel,
                "oldest": f"{oldest:.6f}",
                "limit": HISTORY_PAGE,
                "include_all_metadata": "true",
            }
            if cursor:
                params["cursor"] = cursor
            answer = self._call("conversations.history", **params)
            yield from answer.get("messages") or []
            cursor = (answer.get("response_metadata") or {}).get("next_cursor")
            if not answer.get("has_more") or not cursor:
                return
        log.warning("history: stopped after %d pages; older alerts count as not posted", HISTORY_MAX_PAGES)


class Webhook:
    mode = "webhook"

    def __init__(self, settings: SlackSettings) -> None:
        assert settings.webhook_url is not None
        self.client = WebhookClient(
            url=settings.webhook_url.get_secret_value(),
            timeout=settings.timeout_s,
            retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=settings.rate_limit_retries)],
        )

    def check(self) -> None:
        """A webhook has no test call; a bad URL shows at the first post."""

    def post(self, message: SlackMessage) -> Receipt:
        try:
            answer = self.client.send_dict(message.body())
        except NETWORK_ERRORS as err:
            # the URL is a secret: name the kind of failure only
            raise SinkUnavailable(f"Slack webhook: {type(err).__name__}") from None
        if answer.status_code != 200:
            raise classify(str(answer.body or "").strip(), answer.status_code, "SLACK_WEBHOOK_URL")
        return Receipt(None, None)

    def history(self, channel: str | None, oldest: float) -> None:
        return None


class Printer:
    """No credentials: print what would be posted (one readable line, then the JSON body)."""

    mode = "print"

    def __init__(self, settings: SlackSettings) -> None:
        self.channel = settings.channel or "(no channel)"

    def check(self) -> None:
        log.info("no SLACK_BOT_TOKEN or SLACK_WEBHOOK_URL: printing messages instead of posting")

    def post(self, message: SlackMessage) -> Receipt:
        print(f"[dry run] would post to {self.channel}: {message.text}", flush=True)
        print(json.dumps({"channel": self.channel, **message.body()}, ensure_ascii=False), flush=True)
        return Receipt(None, None)

    def history(self, channel: str | None, oldest: float) -> None:
        return None


def delivery(settings: SlackSettings) -> Delivery:
    kinds: dict[str, type[WebApi] | type[Webhook] | type[Printer]] = {
        "bot": WebApi,
        "webhook": Webhook,
        "print": Printer,
    }
    return kinds[settings.mode](settings)
