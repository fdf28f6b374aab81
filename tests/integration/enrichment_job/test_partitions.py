"""The ratings topic grown while the job runs, as the cut-over in docs/reference.md does it (the
producers paused, the job drained, the partitions added, the producers resumed): the job reads
the new partitions from their start, each rating is enriched once, and every customer's
ratings come out in the order they went in, with the join on the driver and in tasks. A rating
too large for Kafka's limit keeps its bytes in the claim-check store, in both places."""

import json
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from support.enrichment import Job, StackEnv, Topics, create_topics, delete_topics, produce, read_topic

from enrichment_job.kafka.claim_check import Claimed

USERS = 12  # ids no customer has: every rating comes out unmatched, at once (grace 0)
FIRST_USER = 900_000


def _produce(stack_env: StackEnv, topic: str, first_id: int, count: int, partitions: int) -> None:
    """`count` ratings, rating ids from `first_id`, spread over the users and, by user, over the
    topic's `partitions` (as a keyed producer would after the cut-over: a user's new ratings in
    one partition)."""
    producer = Producer({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
    now = int(time.time() * 1000)
    for i in range(count):
        user = FIRST_USER + i % USERS
        rating = {
            "rating_id": first_id + i,
            "user_id": user,
            "stars": 4,
            "route_id": 1,
            "rating_time": now,
            "channel": "web",
            "message": "ok",
        }
        key, value = str(user).encode(), json.dumps(rating).encode()
        producer.produce(topic, key=key, value=value, partition=user % partitions)
    assert producer.flush(30) == 0


def _enriched(stack_env: StackEnv, topic: str, count: int) -> list[dict[str, object]]:
    deadline = time.monotonic() + 120
    records: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        records = [json.loads(r.value()) for r in read_topic(stack_env, topic, count, timeout_s=30)]
        if len(records) >= count:
            break
    return records


@pytest.mark.parametrize("join_in", ["driver", "tasks"])
def test_ratings_partitions_added_after_a_drain_are_read_whole_once_and_in_each_customer_s_order(
    stack_env: StackEnv, tmp_path: Path, join_in: str
) -> None:
    topics = Topics()
    names = create_topics(stack_env, topics, partitions=2)
    ratings, enriched = topics.name("ratings"), topics.name("enriched")
    job = Job(stack_env, topics, tmp_path / "job", 0, {"ENRICH_JOIN_IN": join_in}).start()
    try:
        _produce(stack_env, ratings, 0, 120, 2)
        # and one too large for Kafka's limit, whose bytes the join keeps in the claim-check store
        key, large = (
            str(FIRST_USER).encode(),
            json.dumps({"rating_id": -1, "message": "m" * 950_000}).encode(),
        )
        produce(stack_env, ratings, [(key, large)])
        assert len(_enriched(stack_env, enriched, 120)) == 120  # drained: nothing waits
        (letter,) = read_topic(stack_env, topics.name("dlq"), 1, timeout_s=60)
        claimed = Claimed.of(dict(letter.headers()))
        assert letter.value() is None and claimed is not None
        assert claimed.local_path().read_bytes() == large  # type: ignore[union-attr]
        admin = AdminClient({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
        for future in admin.create_partitions([NewPartitions(ratings, 4)]).values():
            future.result(30)
        _produce(stack_env, ratings, 120, 120, 4)  # half of the users now on partitions 2 and 3
        records = _enriched(stack_env, enriched, 240)
        assert job.proc is not None and job.proc.poll() is None, job.tail()
    finally:
        job.stop()
        delete_topics(stack_env, names)
    ids = [int(str(r["rating_id"])) for r in records]
    assert sorted(ids) == list(range(240)), "every rating, once"
    assert {r["rating_partition"] for r in records if int(str(r["rating_id"])) >= 120} == {0, 1, 2, 3}
    by_user: dict[object, list[int]] = defaultdict(list)
    for r, rid in zip(records, ids, strict=True):
        by_user[r["user_id"]].append(rid)
    # a user's enriched records share a partition (keyed by user): read back in the job's order
    assert all(rids == sorted(rids) for rids in by_user.values()), by_user
