"""The sink against a fake Slack in this process: each alert posted once (replays skipped,
pending ids reconciled against the channel's history), Slack's answers mapped to retry, stop or
dead letter, and alerts beyond the rate folded into a summary."""

import json
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message
from support.services import enriched_record

from foundation.errors import FatalSinkError, SinkUnavailable
from infra.slack.fake import CHANNEL, TOKEN, FakeSlack, fake_slack
from services.core.records import Incoming
from services.slack_notifier.alert import Alert, decode_alert
from services.slack_notifier.config import SlackSettings
from services.slack_notifier.message import alert_message
from services.slack_notifier.sink import SlackSink, make_sink


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with fake_slack() as fake:
        yield fake


def settings(tmp_path: Path, **overrides: Any) -> SlackSettings:
    values: dict[str, Any] = {
        "bot_token": TOKEN,
        "channel": CHANNEL,
        "state_dir": tmp_path / "state",
        "max_messages_per_second": 1000,
        "burst_messages": 1000,
        "rate_limit_retries": 2,
        "timeout_s": 5,
    }
    return SlackSettings(**(values | overrides))


def sink(slack: FakeSlack, tmp_path: Path, **overrides: Any) -> SlackSink:
    return make_sink(settings(tmp_path, base_url=slack.base_url, **overrides))


def alerts(*ids: int, **overrides: Any) -> list[Incoming[Alert]]:
    out = []
    for i in ids:
        raw = json.dumps(enriched_record(i, stars=1, club_status="platinum", **overrides)).encode()
        message = Message(topic="alerts", partition=0, offset=i, key=b"k", value=raw)
        out.append(Incoming(decode_alert(message), message))
    return out


def test_each_alert_is_posted_once_and_a_replay_is_skipped(slack: FakeSlack, tmp_path: Path) -> None:
    notifier = sink(slack, tmp_path)
    assert notifier.write(alerts(1, 2, 3)) == []
    assert notifier.write(alerts(1, 2, 3, 3)) == []
    notifier.close()
    assert sink(slack, tmp_path).write(alerts(2, 4)) == []  # a restart remembers
    assert slack.covered() == {1: 1, 2: 1, 3: 1, 4: 1}
    post = slack.posts()[0]
    assert post["request"]["link_names"] is False
    assert post["metadata"]["event_type"] == "unhappy_platinum_alert"


def test_a_pending_alert_found_in_history_is_not_posted_again(slack: FakeSlack, tmp_path: Path) -> None:
    first = sink(slack, tmp_path)
    first.write(alerts(1))
    # a crash right after Slack accepted alert 2: posted, but the ledger says pending
    first.ledger.mark_pending([2, 3])
    first.transport.post(alert_message(alerts(2)[0].value))
    first.close()
    assert sink(slack, tmp_path).write(alerts(2, 3)) == []
    assert slack.covered() == {1: 1, 2: 1, 3: 1}
    assert slack.calls["conversations.history"] == 1


def test_slack_errors_retry_and_nothing_doubles(slack: FakeSlack, tmp_path: Path) -> None:
    notifier = sink(slack, tmp_path)
    slack.fail(3, status=503)
    for _ in range(3):
        with pytest.raises(SinkUnavailable, match="503"):
            notifier.write(alerts(1, 2))
    assert notifier.write(alerts(1, 2)) == []
    assert slack.covered() == {1: 1, 2: 1}


def test_429_waits_for_retry_after_then_gives_up_to_the_loop(slack: FakeSlack, tmp_path: Path) -> None:
    notifier = sink(slack, tmp_path, rate_limit_retries=1)
    slack.rate_limit(1, retry_after_s=0)
    assert notifier.write(alerts(1)) == []
    assert slack.calls["chat.postMessage"] == 2
    slack.rate_limit(2, retry_after_s=0)
    with pytest.raises(SinkUnavailable, match="429"):
        notifier.write(alerts(2))
    assert notifier.write(alerts(2)) == []
    assert slack.covered() == {1: 1, 2: 1}


@pytest.mark.parametrize(
    "error, setting",
    [
        ("invalid_auth", "SLACK_BOT_TOKEN"),
        ("token_revoked", "SLACK_BOT_TOKEN"),
        ("is_archived", "SLACK_CHANNEL"),
    ],
)
def test_a_permanent_error_stops_naming_the_setting(
    slack: FakeSlack, tmp_path: Path, error: str, setting: str
) -> None:
    slack.refuse(error)
    with pytest.raises(FatalSinkError, match=f"{error}.*{setting}"):
        sink(slack, tmp_path).write(alerts(1))


def test_a_wrong_channel_stops_naming_the_channel(slack: FakeSlack, tmp_path: Path) -> None:
    with pytest.raises(FatalSinkError, match=r"channel_not_found.*SLACK_CHANNEL"):
        sink(slack, tmp_path, channel="C0NOPE").write(alerts(1))


def test_a_message_slack_refuses_is_dead_lettered(slack: FakeSlack, tmp_path: Path) -> None:
    notifier = sink(slack, tmp_path)
    notifier.write(alerts(1))
    slack.refuse("invalid_blocks")
    rejected = notifier.write(alerts(2, 3))
    assert sorted(r.message.offset() or 0 for r in rejected) == [2, 3]
    assert {r.reason for r in rejected} == {"Slack refused the message: invalid_blocks"}
    assert notifier.ledger.pending() == {}


def test_an_unreachable_slack_is_unavailable(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    notifier = make_sink(settings(tmp_path, base_url=f"http://127.0.0.1:{port}/api/"))
    with pytest.raises(SinkUnavailable, match=r"auth\.test"):
        notifier.write(alerts(1))


def test_beyond_the_rate_the_rest_is_one_summary(slack: FakeSlack, tmp_path: Path) -> None:
    notifier = sink(slack, tmp_path, max_messages_per_second=1, burst_messages=3)
    assert notifier.write(alerts(*range(1, 21))) == []
    kinds = [p["metadata"]["event_payload"]["kind"] for p in slack.posts()]
    assert kinds == ["alert", "alert", "summary"]
    assert slack.covered() == dict.fromkeys(range(1, 21), 1)


def test_webhook_mode_posts_and_reposts_what_it_cannot_check(slack: FakeSlack, tmp_path: Path) -> None:
    notifier = sink(slack, tmp_path, bot_token=None, channel=None, webhook_url=slack.webhook_url)
    assert notifier.write(alerts(1)) == []
    notifier.ledger.mark_pending([2])  # a crash after a post: webhook mode cannot read history
    assert notifier.write(alerts(1, 2)) == []
    assert slack.covered() == {1: 1, 2: 1}
    assert slack.posts()[0]["via"] == "webhook"
    slack.refuse("channel_is_archived")
    with pytest.raises(FatalSinkError, match="SLACK_WEBHOOK_URL") as raised:
        notifier.write(alerts(3))
    assert "hook-secret" not in str(raised.value)


def test_print_mode_prints_the_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notifier = make_sink(settings(tmp_path, bot_token=None, channel=None))
    assert notifier.write(alerts(5, message="<!channel> awful")) == []
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[dry run] would post to (no channel): Unhappy platinum customer")
    body = json.loads(out[1])
    assert body["metadata"]["event_payload"]["rating_ids"] == ["5"]
    assert "&lt;!channel&gt; awful" in out[1] and "<!channel>" not in out[1]


def test_another_rating_under_an_alerted_id_is_a_dead_letter_and_the_same_one_a_replay(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """Two producers gave one id to two ratings: before, the second was skipped as a replay."""
    notifier = sink(slack, tmp_path)
    assert notifier.write(alerts(1, message="the bus was late")) == []
    again = alerts(1, message="the bus was late", enriched_ms=5)  # the same rating, joined anew
    other = alerts(1, message="the driver was rude")
    rejected = notifier.write([*again, *other])
    assert [r.message.value() for r in rejected] == [other[0].message.value()]
    assert rejected[0].reason.startswith("rating_id 1 was alerted already for another rating")
    # ... and within one batch: the first rating under the id is posted, the second is a dead letter
    first, second = alerts(2, message="cold"), alerts(2, message="dirty")
    rejected = notifier.write([*first, *second, *first])
    assert [r.message.value() for r in rejected] == [second[0].message.value()]
    assert "was alerted already in this batch" in rejected[0].reason
    assert slack.covered() == {1: 1, 2: 1}


def test_a_ledger_from_before_the_digests_is_read_and_its_ids_still_skip_replays(
    slack: FakeSlack, tmp_path: Path
) -> None:
    path = tmp_path / "state" / "ledger.sqlite3"
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as old:
        old.execute(
            "CREATE TABLE alerts (rating_id INTEGER PRIMARY KEY, state TEXT NOT NULL, channel TEXT, "
            "ts TEXT, updated_at REAL NOT NULL)"
        )
        old.execute("INSERT INTO alerts VALUES (1, 'posted', 'C1', '1.0', ?)", (time.time(),))
    old.close()
    notifier = sink(slack, tmp_path)
    assert notifier.write(alerts(1, 2)) == []
    assert slack.covered() == {2: 1}
    assert notifier.ledger.ratings([1, 2]) == {1: None, 2: alerts(2)[0].value.rating}
