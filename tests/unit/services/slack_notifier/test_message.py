"""Messages built from alerts: customer text cannot ping, link or format (it is plain_text, never
inside a mrkdwn object, and the fallback text is sent with mrkdwn off), every field shows, and
alerts beyond the rate fold into one summary that covers every id once."""

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from services.slack_notifier.alert import Alert
from services.slack_notifier.message import (
    EVENT_TYPE,
    SlackMessage,
    alert_message,
    covered_ids,
    escape,
    fold,
    summary_message,
)

INJECTIONS = {
    "channel ping": ("<!channel> look", "&lt;!channel&gt; look"),
    "here ping": ("<!here>", "&lt;!here&gt;"),
    "everyone ping": ("<!everyone>", "&lt;!everyone&gt;"),
    "user mention": ("hi <@U123>", "hi &lt;@U123&gt;"),
    "group mention": ("<!subteam^S1>", "&lt;!subteam^S1&gt;"),
    "disguised link": ("<http://evil.example|your invoice>", "&lt;http://evil.example|your invoice&gt;"),
    "pre-escaped entity": ("&lt;!channel&gt;", "&amp;lt;!channel&amp;gt;"),
}

# Slack mrkdwn a customer might type, as typed and as it must read in a plain_text object.
FORMATTING = {
    "bold": ("*bold* offer", "*bold* offer"),
    "italic": ("so _x_ slow", "so _x_ slow"),
    "strike": ("a ~x~ b", "a ~x~ b"),
    "code": ("run `x` now", "run `x` now"),
    "code block": ("```x```", "```x```"),
    "channel ping": ("<!channel>", "&lt;!channel&gt;"),
    "user mention": ("<@U123>", "&lt;@U123&gt;"),
    "disguised link": ("<http://evil|click>", "&lt;http://evil|click&gt;"),
    "bare url": ("see http://evil.example/x", "see http://evil.example/x"),
    "quote": ("> quote", "&gt; quote"),
    "emoji code": (":rotating_light: now", ":rotating_light: now"),
}
RECORD_FIELDS = ["name", "email", "message", "channel", "club_status"]

# Every mrkdwn text the product sends: its own labels and sentences, none holding record text.
PRODUCT_MRKDWN = {
    "*Customer*",
    "*Email*",
    "*Club status*",
    "*Stars*",
    "*Channel*",
    "*Time*",
    "*History*",
    "*Review*",
    "_(no text)_",
    "Alerts came faster than Slack's rate allows, so these are summarised:",
}
PAIRED = re.compile(r"([*_~`]).+?\1", re.DOTALL)


def alert(rating_id: int = 42, **overrides: object) -> Alert:
    fields: dict[str, object] = {
        "rating_id": rating_id,
        "user_id": 7,
        "name": "Rica Blaisdell",
        "email": "rica@example.com",
        "club_status": "platinum",
        "stars": 1,
        "message": "the bus never came",
        "channel": "iOS",
        "rating_time_ms": 1_795_000_000_000,
    }
    return Alert(**(fields | overrides))  # type: ignore[arg-type]


def every_text(message: object) -> str:
    return json.dumps(message, ensure_ascii=False)


def text_objects(node: object) -> Iterator[dict[str, Any]]:
    """Every Block Kit text object (`{"type": "mrkdwn"|"plain_text", "text": ...}`) in `node`."""
    if isinstance(node, dict):
        if node.get("type") in ("mrkdwn", "plain_text") and isinstance(node.get("text"), str):
            yield node
        for value in node.values():
            yield from text_objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from text_objects(value)


def assert_no_customer_text_in_mrkdwn(blocks: list[dict[str, Any]], *typed: str) -> None:
    """Fails when a mrkdwn text holds anything but the product's own text, or any of `typed`
    (as typed or escaped), or a formatting pair that is not one of the product's labels."""
    for obj in text_objects(blocks):
        if obj["type"] != "mrkdwn":
            continue
        text = obj["text"]
        for value in typed:
            assert value not in text and escape(value) not in text, (value, text)
        assert text in PRODUCT_MRKDWN, f"mrkdwn text that is not the product's own: {text!r}"
        assert all(pair in PRODUCT_MRKDWN for pair in (m.group(0) for m in PAIRED.finditer(text))), text


def plain_texts(blocks: list[dict[str, Any]]) -> list[str]:
    objs = [o for o in text_objects(blocks) if o["type"] == "plain_text"]
    assert all(o.get("emoji") is False for o in objs), objs  # ":x:" typed stays ":x:"
    return [o["text"] for o in objs]


def review_block(message: SlackMessage) -> dict[str, Any]:
    """The text object of the block after the "*Review*" label."""
    texts: list[dict[str, Any]] = [b.get("text", {}) for b in message.blocks]
    return texts[texts.index({"type": "mrkdwn", "text": "*Review*"}) + 1]


@pytest.mark.parametrize("typed, escaped", INJECTIONS.values(), ids=INJECTIONS.keys())
def test_escape_neutralises_each_injection_form(typed: str, escaped: str) -> None:
    assert escape(typed) == escaped


@pytest.mark.parametrize("field", ["name", "email", "message", "channel", "club_status"])
@pytest.mark.parametrize("typed, escaped", INJECTIONS.values(), ids=INJECTIONS.keys())
def test_no_record_field_reaches_slack_unescaped(field: str, typed: str, escaped: str) -> None:
    overrides: dict[str, Any] = {field: typed}
    message = alert_message(alert(**overrides))
    blocks, text = every_text(message.blocks), message.text
    for rendered in (blocks, text):
        assert "<!" not in rendered and "<@" not in rendered and "<http" not in rendered
    assert escaped in blocks
    assert escaped in text


def test_an_alert_shows_every_field() -> None:
    message = alert_message(alert())
    shown = every_text(message.blocks)
    for value in ("Rica Blaisdell", "rica@example.com", "platinum", "1/5", "the bus never came", "iOS", "42"):
        assert value in shown
    assert "2026-11-18 11:06:40 UTC" in shown  # rating_time in UTC
    assert "Rica Blaisdell" in message.text


def test_messages_never_link_names_or_parse_and_carry_their_ids() -> None:
    body = alert_message(alert(7)).body()
    assert body["link_names"] is False
    assert body["mrkdwn"] is False
    assert "parse" not in body
    assert body["unfurl_links"] is False
    assert body["unfurl_media"] is False
    assert body["metadata"] == {
        "event_type": EVENT_TYPE,
        "event_payload": {"kind": "alert", "rating_ids": ["7"]},
    }
    assert covered_ids(body["metadata"]) == {7}


@pytest.mark.parametrize("field", RECORD_FIELDS)
@pytest.mark.parametrize("typed, shown", FORMATTING.values(), ids=FORMATTING.keys())
def test_customer_formatting_reaches_slack_as_plain_text_only(field: str, typed: str, shown: str) -> None:
    overrides: dict[str, Any] = {field: typed}
    message = alert_message(alert(**overrides))
    assert_no_customer_text_in_mrkdwn(message.blocks, typed, shown)
    assert shown in plain_texts(message.blocks)  # readable: the characters as typed, a value alone
    assert "<!" not in every_text(message.blocks) + message.text


@pytest.mark.parametrize("typed, shown", FORMATTING.values(), ids=FORMATTING.keys())
def test_the_fallback_text_keeps_formatting_literal_with_mrkdwn_off(typed: str, shown: str) -> None:
    body = alert_message(alert(message=typed, name=typed)).body()
    assert body["mrkdwn"] is False
    assert body["text"].count(shown) == 2
    assert "<" not in body["text"] and ">" not in body["text"]


def test_the_labels_stay_bold_and_each_value_stands_beside_its_label() -> None:
    message = alert_message(alert(name="*Rica*"))
    fields = [f for b in message.blocks if b["type"] == "section" for f in b.get("fields", [])]
    assert fields[:4] == [
        {"type": "mrkdwn", "text": "*Customer*"},
        {"type": "plain_text", "text": "*Rica*", "emoji": False},
        {"type": "mrkdwn", "text": "*Email*"},
        {"type": "plain_text", "text": "rica@example.com", "emoji": False},
    ]
    assert all(len(b.get("fields", [])) <= 10 for b in message.blocks)
    assert review_block(message) == {"type": "plain_text", "text": "the bus never came", "emoji": False}
    assert message.blocks[-1]["elements"] == [{"type": "plain_text", "text": "rating id 42", "emoji": False}]


def test_the_checker_catches_customer_text_in_mrkdwn() -> None:
    leaked = [{"type": "section", "text": {"type": "mrkdwn", "text": "*Review*\n*bold*"}}]
    with pytest.raises(AssertionError):
        assert_no_customer_text_in_mrkdwn(leaked, "*bold*")
    escaped = [{"type": "section", "text": {"type": "mrkdwn", "text": "&lt;@U123&gt;"}}]
    with pytest.raises(AssertionError):
        assert_no_customer_text_in_mrkdwn(escaped, "<@U123>")
    unknown = [{"type": "context", "elements": [{"type": "mrkdwn", "text": "_x_"}]}]
    with pytest.raises(AssertionError):
        assert_no_customer_text_in_mrkdwn(unknown)


def test_empty_or_blank_values_are_never_an_empty_text() -> None:
    message = alert_message(alert(message="", channel="", name="   "))
    assert all(o["text"].strip() for o in text_objects(message.blocks))
    assert review_block(message) == {"type": "mrkdwn", "text": "_(no text)_"}
    assert "-" in plain_texts(message.blocks)


def test_a_long_review_is_clipped_before_escaping() -> None:
    message = alert_message(alert(message="<" * 5000))
    review = review_block(message)
    assert review["type"] == "plain_text"
    assert len(review["text"]) <= 3000  # Block Kit: a section's text
    assert review["text"].endswith("&lt;…")


def test_long_values_fit_block_kits_field_size() -> None:
    message = alert_message(alert(name="&" * 5000, email="x" * 5000, channel="<" * 5000))
    fields = [f for b in message.blocks for f in b.get("fields", [])]
    assert fields and all(len(f["text"]) <= 2000 for f in fields)


def test_escape_cuts_whole_entities_only() -> None:
    assert escape("a<b", limit=4) == "a…"
    assert escape("a<b", limit=6) == "a&lt;…"
    assert escape("a<b", limit=10) == "a&lt;b"


def test_within_the_budget_every_alert_gets_its_own_message() -> None:
    messages = fold([alert(i) for i in range(3)], posts_allowed=3, max_lines=20)
    assert [m.kind for m in messages] == ["alert"] * 3


def test_beyond_the_budget_the_rest_folds_into_one_summary() -> None:
    alerts = [alert(i) for i in range(30)]
    messages = fold(alerts, posts_allowed=3, max_lines=20)
    assert [m.kind for m in messages] == ["alert", "alert", "summary"]
    ids = [i for m in messages for i in m.rating_ids]
    assert sorted(ids) == list(range(30))  # every alert covered exactly once
    assert covered_ids(messages[2].metadata) == set(range(2, 30))


def test_an_empty_budget_still_sends_one_message() -> None:
    assert [m.kind for m in fold([alert(1), alert(2)], posts_allowed=0, max_lines=5)] == ["summary"]
    assert [m.kind for m in fold([alert(1)], posts_allowed=0, max_lines=5)] == ["alert"]


def test_a_summary_lists_a_capped_number_of_escaped_names() -> None:
    alerts = [alert(i, name=f"<!here> customer {i}") for i in range(50)]
    message = summary_message(alerts, max_lines=10)
    assert message.blocks[2]["text"]["type"] == "plain_text"
    listing = message.blocks[2]["text"]["text"]
    assert listing.count("•") == 10
    assert "…and 40 more" in listing
    assert "<!here>" not in every_text(message.blocks) + message.text
    assert "&lt;!here&gt; customer 3" in listing
    assert message.text.startswith("50 more unhappy customer alerts")
    assert len(message.rating_ids) == 50


def test_covered_ids_ignores_other_messages() -> None:
    assert covered_ids(None) == set()
    assert covered_ids({"event_type": "something_else", "event_payload": {"rating_ids": ["1"]}}) == set()
    assert covered_ids({"event_type": EVENT_TYPE, "event_payload": {"rating_ids": ["1", "x", 2]}}) == {1, 2}


@pytest.mark.parametrize("typed, shown", FORMATTING.values(), ids=FORMATTING.keys())
def test_a_summary_shows_customer_formatting_as_plain_text(typed: str, shown: str) -> None:
    message = summary_message([alert(i, name=typed) for i in range(3)], max_lines=10)
    assert_no_customer_text_in_mrkdwn(message.blocks, typed, shown)
    (listing,) = [t for t in plain_texts(message.blocks) if "•" in t]
    assert listing.count(f"• {shown}: 1/5") == 3
    body = message.body()
    assert body["mrkdwn"] is False and shown in body["text"]
    assert "<!" not in every_text(body)
