"""python -m infra.bench.slack_notifier: alert latency of the notifier on this machine.

Against the local stack's Kafka and a fake Slack (infra/slack/fake.py) in this process:
starts the notifier in bot mode on its own topics, produces one alert every --interval seconds
for --duration seconds, and measures the time from producing an alert to Kafka to the fake Slack
receiving its post. Prints p50/p99/max and writes them as JSON (--out).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from infra.slack.fake import CHANNEL, TOKEN, FakeSlack
from infra.stack.secrets import read_env_file
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.stack import stack_env_path

GOAL = "alert p99 < 2.5 s for the whole pipeline (Spark job included, measured separately)"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def alert(rating_id: int) -> bytes:
    return json.dumps(
        {
            "rating_id": rating_id,
            "user_id": 7,
            "stars": 1,
            "rating_time": int(time.time() * 1000),
            "channel": "web",
            "message": f"bench alert {rating_id}",
            "full_name": "Bench Customer",
            "email": "bench@example.com",
            "club_status": "platinum",
            "customer_matched": True,
        }
    ).encode()


def start_notifier(env: dict[str, str], slack: FakeSlack, topics: tuple[str, str], work: Path) -> Any:
    child_env = {
        **os.environ,
        "SLACK_BOOTSTRAP_SERVERS": env["KAFKA_BOOTSTRAP_SERVERS"],
        "SLACK_GROUP_ID": f"bench-slack-{uuid.uuid4().hex[:8]}",
        "SLACK_INPUT_TOPICS": json.dumps([topics[0]]),
        "SLACK_DLQ_TOPIC": topics[1],
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_CHANNEL": CHANNEL,
        "SLACK_WEBHOOK_URL": "",
        "SLACK_BASE_URL": slack.base_url,
        "SLACK_STATE_DIR": str(work / "state"),
    }
    log = (work / "notifier.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "services.slack_notifier"], env=child_env, stdout=log, stderr=subprocess.STDOUT
    )


def measure(
    env: dict[str, str], slack: FakeSlack, topic: str, interval: float, duration: float
) -> dict[str, Any]:
    producer = Producer({"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"], "linger.ms": 0})
    print("warm-up: first alert through the notifier ...", flush=True)
    producer.produce(topic, key=b"7", value=alert(0))
    producer.flush(10)
    if not slack.wait_for_posts(1, 90):
        raise SystemExit("the notifier posted nothing within 90 s; see its log")
    produced: dict[int, float] = {}
    count = int(duration / interval)
    for i in range(1, count + 1):
        produced[i] = time.time()
        producer.produce(topic, key=b"7", value=alert(i))
        producer.flush(10)
        if i % 10 == 0:
            print(f"  {i}/{count} alerts produced, {len(slack.posts()) - 1} posted", flush=True)
        time.sleep(max(0.0, produced[i] + interval - time.time()))
    slack.wait_for_posts(count + 1, 30)
    received = {
        int(rid): post["received_at"]
        for post in slack.posts()
        for rid in post["metadata"]["event_payload"]["rating_ids"]
    }
    latencies = [received[i] - produced[i] for i in produced if i in received]
    covered = slack.covered()
    return {
        "alerts": count,
        "posted": len(latencies),
        "missing": count - len(latencies),
        "duplicates": sum(n - 1 for n in covered.values() if n > 1),
        "latency_p50_s": round(percentile(latencies, 50), 3),
        "latency_p99_s": round(percentile(latencies, 99), 3),
        "latency_max_s": round(max(latencies), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--interval", type=float, default=1.5, help="seconds between alerts")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of alerts")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "slack_notifier.json")
    args = parser.parse_args()
    env = read_env_file(stack_env_path(StackSettings()))
    admin = AdminClient({"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"]})
    suffix = uuid.uuid4().hex[:8]
    topics = (f"bench-slack-alerts-{suffix}", f"bench-slack-dlq-{suffix}")
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=1, replication_factor=1) for t in topics]
    ).values():
        future.result(30)
    slack = FakeSlack()
    with tempfile.TemporaryDirectory(prefix="slack-bench-") as work:
        notifier = start_notifier(env, slack, topics, Path(work))
        try:
            print(f"notifier started (pid {notifier.pid}); an alert every {args.interval} s", flush=True)
            figures = measure(env, slack, topics[0], args.interval, args.duration)
        finally:
            notifier.terminate()
            notifier.wait(30)
            slack.close()
            for future in admin.delete_topics(list(topics)).values():
                future.result(30)
    result = {
        "name": "slack_notifier",
        "figures": figures,
        "goal": GOAL,
        "params": {"interval_s": args.interval, "duration_s": args.duration, "fake_slack": True},
    }
    print(json.dumps(figures, indent=1))
    print(
        f"alert latency (produced -> Slack): p50 {figures['latency_p50_s']} s, "
        f"p99 {figures['latency_p99_s']} s, max {figures['latency_max_s']} s"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
