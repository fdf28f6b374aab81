"""The notifier as a process against real Kafka and a fake Slack: every alert posted exactly
once with its fields escaped and as plain text, offsets committed after the posts, 429/5xx
ridden out, a kill -9 while Slack holds its answer reconciled on restart, bursts folded into a
summary, permanent errors stopping the process, malformed alerts dead-lettered, and print mode
printing."""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.kafka import committed_total, drop_topics, make_topics, produce, read_topic
from support.services import ServiceProcess, as_kafka, enriched_record, unique_name
from support.views_api import Service, Views, free_port

from infra.slack.fake import CHANNEL, TOKEN, FakeSlack, fake_slack

StackEnv = dict[str, str]


@dataclass
class Setup:
    stack_env: StackEnv
    slack: FakeSlack
    topic: str
    dlq: str
    group: str
    workdir: Path

    def env(self, **overrides: str) -> dict[str, str]:
        base = {
            "SLACK_BOOTSTRAP_SERVERS": self.stack_env["KAFKA_BOOTSTRAP_SERVERS"],
            "SLACK_GROUP_ID": self.group,
            "SLACK_INPUT_TOPICS": json.dumps([self.topic]),
            "SLACK_DLQ_TOPIC": self.dlq,
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_CHANNEL": CHANNEL,
            "SLACK_WEBHOOK_URL": "",
            "SLACK_BASE_URL": self.slack.base_url,
            "SLACK_STATE_DIR": str(self.workdir / "state"),
            "SLACK_MAX_MESSAGES_PER_SECOND": "50",
            "SLACK_BURST_MESSAGES": "50",
            "SLACK_RETRY_INITIAL_MS": "100",
            "SLACK_RETRY_MAX_MS": "400",
            "SLACK_TIMEOUT_S": "5",
            "SLACK_ENV_FILE": "",
            # No views query service: every alert here goes out without the customer's row,
            # after a refused connection, as it would with the service down.
            "SLACK_VIEWS_URL": f"http://127.0.0.1:{free_port()}",
        }
        return base | overrides

    def service(self, **overrides: str) -> ServiceProcess:
        return ServiceProcess(
            "services.slack_notifier", "SLACK_", self.env(**overrides), self.workdir
        ).start()

    def produce_alerts(self, ids: range | list[int], **fields: Any) -> None:
        records = [as_kafka(enriched_record(i, stars=1, club_status="platinum", **fields)) for i in ids]
        produce(self.stack_env, self.topic, list(records))

    def committed(self) -> int:
        return committed_total(self.stack_env, self.group, self.topic)


@pytest.fixture
def setup(stack_env: StackEnv, tmp_path: Path) -> Iterator[Setup]:
    topic, dlq = unique_name("slack-in"), unique_name("slack-dlq")
    make_topics(stack_env, [topic, dlq], partitions=1)
    with fake_slack() as slack:
        yield Setup(stack_env, slack, topic, dlq, unique_name("slack-group"), tmp_path)
    drop_topics(stack_env, [topic, dlq])


def written(count: int) -> Any:
    return lambda m: m.get("written", 0) + m.get("dead_letters", 0) >= count


def field_texts(post: dict[str, Any]) -> str:
    return json.dumps(post["blocks"], ensure_ascii=False)


def test_each_alert_is_posted_once_with_its_fields(setup: Setup) -> None:
    setup.produce_alerts(range(1, 6))
    service = setup.service()
    service.wait_for(written(5), "5 alerts written")
    assert service.stop() == 0
    posts = setup.slack.posts()
    assert setup.slack.covered() == dict.fromkeys(range(1, 6), 1)
    assert setup.committed() == 5
    for post in posts:
        rating_id = int(post["metadata"]["event_payload"]["rating_ids"][0])
        record = enriched_record(rating_id, stars=1, club_status="platinum")
        shown = field_texts(post)
        for value in (record["full_name"], record["email"], "platinum", "1/5", record["message"]):
            assert value in shown
        assert record["channel"] in shown and f"rating id {rating_id}" in shown
        assert post["request"]["link_names"] is False and "parse" not in post["request"]
        assert post["channel"] == CHANNEL


def text_objects(node: Any) -> list[dict[str, Any]]:
    """Every Block Kit text object in `node`."""
    if isinstance(node, list):
        return [o for item in node for o in text_objects(item)]
    if not isinstance(node, dict):
        return []
    found = [node] if node.get("type") in ("mrkdwn", "plain_text") and "text" in node else []
    return found + [o for value in node.values() for o in text_objects(value)]


def test_customer_text_arrives_escaped_and_as_plain_text(setup: Setup) -> None:
    typed = "<!channel> <!here> <@U123> <http://evil.example|refund> *bold* _x_ `code`"
    setup.produce_alerts([1], message=typed, full_name="<!everyone> Mallory")
    service = setup.service()
    service.wait_for(written(1), "the alert written")
    service.stop()
    (post,) = setup.slack.posts()
    escaped = (
        "&lt;!channel&gt; &lt;!here&gt; &lt;@U123&gt; &lt;http://evil.example|refund&gt; *bold* _x_ `code`"
    )
    for rendered in (field_texts(post), post["text"]):
        assert "<!" not in rendered and "<@" not in rendered and "<http" not in rendered
        assert escaped in rendered
        assert "&lt;!everyone&gt; Mallory" in rendered
    assert post["request"]["mrkdwn"] is False  # the fallback text: no markup parsed
    objects = text_objects(post["blocks"])
    plain = [o["text"] for o in objects if o["type"] == "plain_text"]
    assert escaped in plain and "&lt;!everyone&gt; Mallory" in plain
    mrkdwn = [o["text"] for o in objects if o["type"] == "mrkdwn"]
    assert not [t for t in mrkdwn if "Mallory" in t or "bold" in t or "evil" in t]


def test_429_with_retry_after_is_honoured_and_nothing_is_lost(setup: Setup) -> None:
    setup.slack.rate_limit(3, retry_after_s=1)
    setup.produce_alerts(range(1, 4))
    service = setup.service(SLACK_RATE_LIMIT_RETRIES="2")
    service.wait_for(written(3), "3 alerts written")
    service.stop()
    assert setup.slack.covered() == {1: 1, 2: 1, 3: 1}
    assert setup.slack.calls["chat.postMessage"] == 3 + 3  # each 429 answered by one retry
    assert setup.committed() == 3


def test_500s_for_a_while_then_back_nothing_lost_nothing_doubled(setup: Setup) -> None:
    setup.slack.fail(8, status=500)
    setup.produce_alerts(range(1, 7))
    service = setup.service()
    metrics = service.wait_for(written(6), "6 alerts written")
    service.stop()
    assert metrics["retries"] >= 8
    assert setup.slack.covered() == dict.fromkeys(range(1, 7), 1)
    assert setup.committed() == 6


def test_kill_9_after_slack_accepted_a_post_then_restart_posts_each_alert_once(setup: Setup) -> None:
    setup.slack.hold(1)
    setup.produce_alerts(range(1, 5))
    first = setup.service()
    assert setup.slack.held.wait(60), first.tail()
    first.kill()  # Slack has the message; the service never heard back
    setup.slack.release()
    assert setup.committed() == 0
    second = setup.service()
    second.wait_for(written(4), "4 alerts written after the restart")
    assert second.stop() == 0
    assert setup.slack.covered() == dict.fromkeys(range(1, 5), 1)
    assert setup.committed() == 4
    assert "already in Slack" in second.log.read_text()
    assert setup.slack.calls["conversations.history"] >= 1


def test_a_burst_beyond_the_rate_becomes_posts_and_one_summary(setup: Setup) -> None:
    setup.produce_alerts(range(1, 31))
    service = setup.service(SLACK_MAX_MESSAGES_PER_SECOND="1", SLACK_BURST_MESSAGES="3")
    service.wait_for(written(30), "30 alerts written")
    service.stop()
    posts = setup.slack.posts()
    kinds = [p["metadata"]["event_payload"]["kind"] for p in posts]
    assert setup.slack.covered() == dict.fromkeys(range(1, 31), 1)  # every alert exactly once
    assert "alert" in kinds and "summary" in kinds
    assert len(posts) <= 6
    summary = next(p for p in posts if p["metadata"]["event_payload"]["kind"] == "summary")
    assert "more unhappy customer alerts" in summary["text"]
    assert setup.committed() == 30


def test_a_permanent_error_stops_the_service_with_exit_1(setup: Setup) -> None:
    setup.slack.refuse("channel_not_found")
    setup.produce_alerts(range(1, 3))
    service = setup.service()
    assert service.wait_exit() == 1
    log = service.log.read_text()
    assert "channel_not_found" in log and "check SLACK_CHANNEL" in log
    assert TOKEN not in log
    assert setup.committed() == 0
    assert setup.slack.posts() == []


def test_malformed_alerts_go_to_the_dead_letter_topic_and_one_without_an_email_is_posted(
    setup: Setup,
) -> None:
    setup.produce_alerts([1])
    produce(
        setup.stack_env,
        setup.topic,
        [
            (b"k", b"{not json"),
            as_kafka(enriched_record(2, email=None)),
            as_kafka(enriched_record(4, club_status=None)),
        ],
    )
    setup.produce_alerts([3])
    service = setup.service()
    service.wait_for(written(5), "5 records handled")
    service.stop()
    assert setup.slack.covered() == {1: 1, 2: 1, 3: 1}
    assert "(no email on file)" in json.dumps(setup.slack.posts())
    dead = read_topic(setup.stack_env, setup.dlq, min_records=2)
    reasons = sorted(dict(m.headers())["dlq.reason"].decode() for m in dead)
    assert len(reasons) == 2
    assert "Invalid JSON" in reasons[0] or "Invalid JSON" in reasons[1]
    assert any("missing club_status" in r for r in reasons)
    assert setup.committed() == 5


def test_print_mode_prints_what_it_would_post(setup: Setup) -> None:
    setup.produce_alerts([1, 2], message="<!here> slow")
    service = setup.service(SLACK_BOT_TOKEN="", SLACK_CHANNEL="")
    service.wait_for(written(2), "2 alerts printed")
    assert service.stop() == 0
    lines = service.log.read_text().splitlines()
    bodies = [json.loads(line) for line in lines if line.startswith("{")]
    assert sorted(b["metadata"]["event_payload"]["rating_ids"][0] for b in bodies) == ["1", "2"]
    assert sum(line.startswith("[dry run] would post") for line in lines) == 2
    assert all("&lt;!here&gt; slow" in json.dumps(b) for b in bodies)
    assert setup.slack.posts() == []
    assert setup.committed() == 2


def test_an_alert_carries_the_customers_row_from_the_views_query_service(
    setup: Setup, stack_env: StackEnv, tmp_path: Path
) -> None:
    views = Views(stack_env)
    views.create()
    try:
        record = enriched_record(1, stars=1, club_status="platinum")
        row = {
            "user_id": record["user_id"],
            "ratings": 17,
            "unhappy_ratings": 4,
            "stars_sum": 41,
            "average_stars": 2.412,
            "last_rating_time": record["rating_time"],
            "last_rating_id": 1,
        }
        views.write([row])
        (tmp_path / "views").mkdir()
        api = Service(stack_env, views, tmp_path / "views").start()
        api.wait_healthy()
        setup.produce_alerts([1])
        service = setup.service(SLACK_VIEWS_URL=f"http://127.0.0.1:{api.port}", SLACK_VIEWS_TIMEOUT_MS="2000")
        service.wait_for(written(1), "the alert written")
        assert service.stop() == 0
        (post,) = setup.slack.posts()
        assert "4th unhappy rating; average 2.4 over 17 ratings" in field_texts(post)
        assert api.stop() == 0
    finally:
        views.drop()


def test_without_the_views_service_alerts_go_out_without_the_row(setup: Setup) -> None:
    setup.produce_alerts(range(1, 4))
    service = setup.service()  # SLACK_VIEWS_URL: a port nothing listens on
    service.wait_for(written(3), "3 alerts written", timeout_s=30)
    assert service.stop() == 0
    assert setup.slack.covered() == {1: 1, 2: 1, 3: 1}
    assert all("History" not in field_texts(p) for p in setup.slack.posts())
    assert "without the customer's history" in service.log.read_text()
