"""ENRICH_MAX_BATCH_BYTES: a backlog of large ratings is taken a bounded number of bytes a batch,
with the join on the driver and in tasks, and every rating still comes out once, in each
customer's order. ENRICH_MAX_OFFSETS_PER_TRIGGER alone counts records: the whole backlog went
into the first batch, whatever its ratings weighed."""

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from support.enrichment import Job, StackEnv, Topics, create_topics, delete_topics, read_topic

from infra.bench.backlog_memory import backlog

RATINGS = 60
MESSAGE_BYTES = 100_000  # 6 MB in all: at least 6 batches of at most 1 MB
MAX_BATCH_BYTES = 1_000_000
USERS = 6  # ids no customer has: every rating comes out unmatched, at once (grace 0)


@pytest.mark.parametrize("join_in", ["driver", "tasks"])
def test_a_backlog_of_large_ratings_is_read_a_bounded_number_of_bytes_a_batch_each_once_in_order(
    stack_env: StackEnv, tmp_path: Path, join_in: str
) -> None:
    topics = Topics()
    names = create_topics(stack_env, topics, partitions=2)
    # before the job starts: its first batch could take them all
    backlog(stack_env["KAFKA_BOOTSTRAP_SERVERS"], topics.name("ratings"), RATINGS, MESSAGE_BYTES, USERS)
    extra = {"ENRICH_JOIN_IN": join_in, "ENRICH_MAX_BATCH_BYTES": str(MAX_BATCH_BYTES)}
    job = Job(stack_env, topics, tmp_path / "job", 0, extra).start()
    try:
        records = read_topic(stack_env, topics.name("enriched"), RATINGS, timeout_s=180, idle_s=5)
        produced = read_topic(stack_env, topics.name("ratings"), RATINGS, timeout_s=30)
        assert job.proc is not None and job.proc.poll() is None, job.tail()
    finally:
        job.stop()
        delete_topics(stack_env, names)
    enriched = [json.loads(r.value()) for r in records]
    ids = [int(e["rating_id"]) for e in enriched]
    assert sorted(ids) == list(range(RATINGS)), f"every rating, once: {ids}\n{job.tail()}"
    assert all(e["message"] == chr(97 + e["rating_id"] % 26) * MESSAGE_BYTES for e in enriched)
    # each customer's ratings in the order the ratings topic has them
    by_user: dict[int, list[int]] = defaultdict(list)
    for e in enriched:
        by_user[e["user_id"]].append(e["rating_id"])
    in_topic: dict[int, list[int]] = defaultdict(list)
    for r in produced:
        rating = json.loads(r.value())
        in_topic[rating["user_id"]].append(rating["rating_id"])
    assert by_user == in_topic, f"{by_user}\n{in_topic}\n{job.tail()}"
    log = job.log.read_text()
    taken = [int(n) for n in re.findall(r"batch \d+: (\d+) new", log)]
    assert sum(taken) == RATINGS, f"{taken}\n{job.tail()}"
    # each a little over 100 KB: at most 9 in a batch of 1 MB (the tasks share it, 500 KB each)
    assert max(taken) <= MAX_BATCH_BYTES // MESSAGE_BYTES - 1, f"{taken}\n{job.tail()}"
    if join_in == "driver":
        assert "ratings left for the next batches" in log and "ENRICH_MAX_BATCH_BYTES 1000000" in log
