"""Messages built from alerts: customer text cannot ping or link, every field shows, fallback text
is escaped too, and alerts beyond the rate fold into one summary that covers every id once."""

import json
from typing import Any

import pytest

from services.slack_notifier.alert import Alert
from services.slack_notifier.message import (
    EVENT_TYPE,
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
    assert "parse" not in body
    assert body["unfurl_links"] is False
    assert body["metadata"] == {
        "event_type": EVENT_TYPE,
        "event_payload": {"kind": "alert", "rating_ids": ["7"]},
    }
    assert covered_ids(body["metadata"]) == {7}


def test_a_long_review_is_clipped_before_escaping() -> None:
    message = alert_message(alert(message="<" * 5000))
    review = message.blocks[2]["text"]["text"]
    assert len(review) < 3000
    assert review.endswith("&lt;…")


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
