"""Slack messages from alerts, as pure functions: one Block Kit message per alert, or one summary
for alerts that came faster than the rate allows.

Text a customer typed reaches Slack as literal text and cannot format the message:

- In the blocks, every value taken from a record (name, email, review, channel, club status, and
  the figures) is a `plain_text` text object with `"emoji": false`, which Slack shows as it is:
  no bold, italics, strike, code, quotes, emoji codes, mentions or `<url|label>` links. The
  product's own labels ("*Customer*", "*Review*") are `mrkdwn` objects of their own that never
  hold record text, so the labels stay bold. Block Kit's sizes hold: a section's text at most
  3000 characters, a field at most 2000, at most 10 fields a section.
- The top-level `text` (notifications, and clients that cannot show blocks) holds record text
  too, so the body says `"mrkdwn": false`: Slack does not parse markup in it.
- `&`, `<`, `>` are still sent as entities (`&amp;`, `&lt;`, `&gt;`) in every text, plain or
  not, as Slack's formatting reference asks of all text sent to it; Slack shows them as the
  characters. So no text can hold `<!channel>`, `<@U123>` or `<http://x|y>` markup whatever
  its type.

Messages are sent with `link_names: false`, no `parse`, and unfurling off (a URL the customer typed
may still show as a link to itself, but it fetches no preview and cannot hide where it goes).
Every message carries metadata naming the rating ids it covers: that is how a restart finds out
what Slack already has.
"""

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from services.slack_notifier.alert import Alert
from services.slack_notifier.history import History, history_text

__all__ = [
    "ENTITIES",
    "EVENT_TYPE",
    "FALLBACK_MAX_CHARS",
    "FIELDS_PER_SECTION",
    "FIELD_MAX_CHARS",
    "NAME_MAX_CHARS",
    "REVIEW_MAX_CHARS",
    "SECTION_MAX_CHARS",
    "SlackMessage",
    "alert_message",
    "covered_ids",
    "escape",
    "fold",
    "stars",
    "summary_message",
    "utc",
]

EVENT_TYPE = "unhappy_platinum_alert"
REVIEW_MAX_CHARS = 2000
FALLBACK_MAX_CHARS = 300
SECTION_MAX_CHARS = 2900
FIELD_MAX_CHARS = 500
NAME_MAX_CHARS = 80
FIELDS_PER_SECTION = 10  # Block Kit's most; a label and its value take two


@dataclass(frozen=True)
class SlackMessage:
    """What one post sends: fallback text, blocks, metadata, and the rating ids it covers."""

    text: str
    blocks: list[dict[str, Any]]
    rating_ids: tuple[int, ...]
    kind: str = "alert"
    metadata: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        payload = {"kind": self.kind, "rating_ids": [str(i) for i in self.rating_ids]}
        object.__setattr__(self, "metadata", {"event_type": EVENT_TYPE, "event_payload": payload})

    def body(self) -> dict[str, Any]:
        """The JSON body fields (without channel) for chat.postMessage or an incoming webhook."""
        return {
            "text": self.text,
            "blocks": self.blocks,
            "metadata": self.metadata,
            "mrkdwn": False,  # the top-level text holds customer text: no markup parsed in it
            "link_names": False,
            "unfurl_links": False,
            "unfurl_media": False,
        }


ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def escape(text: str, limit: int = FIELD_MAX_CHARS) -> str:
    """Slack's control characters as entities, so no mention, channel ping or link survives; at
    most `limit` characters (ending in "…" when cut), never cutting an entity in half."""
    out: list[str] = []
    size = 0
    for char in text:
        piece = ENTITIES.get(char, char)
        if size + len(piece) > limit - 1:
            return "".join(out) + "…"
        out.append(piece)
        size += len(piece)
    return "".join(out)


def utc(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def stars(count: int) -> str:
    return f"{count}/5 " + "★" * count + "☆" * (5 - count)


def _mrkdwn(text: str) -> dict[str, str]:
    """The product's own formatted text only: never anything taken from a record."""
    return {"type": "mrkdwn", "text": text}


def _plain(text: str) -> dict[str, Any]:
    """Text shown as it is (no markup, no emoji codes); "-" for none, as Slack wants 1 character."""
    return {"type": "plain_text", "text": text if text.strip() else "-", "emoji": False}


def _label(label: str) -> dict[str, str]:
    return _mrkdwn(f"*{label}*")


def _field_sections(fields: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Label and value side by side: the label bold (mrkdwn), the value plain_text, two columns."""
    items = [obj for label, value in fields for obj in (_label(label), _plain(value))]
    return [
        {"type": "section", "fields": items[i : i + FIELDS_PER_SECTION]}
        for i in range(0, len(items), FIELDS_PER_SECTION)
    ]


def alert_message(alert: Alert, history: History | None = None) -> SlackMessage:
    """One alert; with the customer's `history` (their customer_ratings row) when it is known."""
    review = escape(alert.message, REVIEW_MAX_CHARS)
    fields = [
        ("Customer", escape(alert.name)),
        ("Email", escape(alert.email)),
        ("Club status", escape(alert.club_status)),
        ("Stars", stars(alert.stars)),
        ("Channel", escape(alert.channel)),
        ("Time", utc(alert.rating_time_ms)),
    ]
    if history is not None:
        fields.append(("History", escape(history_text(history, alert))))
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain("Unhappy customer alert")},
        *_field_sections(fields),
        {"type": "section", "text": _label("Review")},
        {"type": "section", "text": _plain(review) if review.strip() else _mrkdwn("_(no text)_")},
        {"type": "context", "elements": [_plain(f"rating id {alert.rating_id}")]},
    ]
    text = escape(
        f"Unhappy {alert.club_status} customer {alert.name} ({alert.email}) gave "
        f"{alert.stars}/5 via {alert.channel or '-'}: {alert.message}",
        FALLBACK_MAX_CHARS,
    )
    return SlackMessage(text=text, blocks=blocks, rating_ids=(alert.rating_id,))


def summary_message(alerts: list[Alert], max_lines: int) -> SlackMessage:
    """One message for alerts beyond the rate: their count, and a capped list of who and what."""
    lines: list[str] = []
    for a in alerts[:max_lines]:
        line = f"• {escape(a.name, NAME_MAX_CHARS)}: {stars(a.stars)}, rating id {a.rating_id}"
        if sum(len(x) + 1 for x in lines) + len(line) > SECTION_MAX_CHARS - 100:
            break
        lines.append(line)
    shown = alerts[: len(lines)]
    if len(alerts) > len(shown):
        lines.append(f"…and {len(alerts) - len(shown)} more (all rating ids are in the message metadata)")
    listing = "\n".join(lines)
    headline = f"{len(alerts)} more unhappy customer alerts"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(headline)},
        {
            "type": "section",
            "text": _mrkdwn("Alerts came faster than Slack's rate allows, so these are summarised:"),
        },
        {"type": "section", "text": _plain(listing)},
    ]
    names = ", ".join(a.name for a in shown)
    text = escape(f"{headline}: {names}", FALLBACK_MAX_CHARS)
    return SlackMessage(
        text=text, blocks=blocks, rating_ids=tuple(a.rating_id for a in alerts), kind="summary"
    )


def fold(
    alerts: list[Alert], posts_allowed: int, max_lines: int, histories: dict[int, History] | None = None
) -> list[SlackMessage]:
    """One message per alert while they fit in `posts_allowed`; else the first `posts_allowed - 1`
    alone and the rest in one summary. At least one message, whatever the budget. `histories`:
    the customers' customer_ratings rows by user id, shown beside single alerts."""
    known = histories or {}
    allowed = max(posts_allowed, 1)
    alone = alerts if len(alerts) <= allowed else alerts[: allowed - 1]
    singles = [alert_message(a, known.get(a.user_id)) for a in alone]
    return (
        singles
        if len(alone) == len(alerts)
        else [*singles, summary_message(alerts[allowed - 1 :], max_lines)]
    )


def covered_ids(metadata: dict[str, Any] | None) -> set[int]:
    """The rating ids a posted message covers, read back from its metadata (history)."""
    if not metadata or metadata.get("event_type") != EVENT_TYPE:
        return set()
    ids = (metadata.get("event_payload") or {}).get("rating_ids") or []
    return {int(i) for i in ids if str(i).lstrip("-").isdigit()}
