"""How long the claim-check store keeps dead letters' bytes, from the dead-letter topic's own
settings on the real broker."""

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kafka import StackEnv, drop_topics, make_topics

from enrichment_job.kafka.claim_check import MARGIN_MS, StorePruner, topic_record_lifetime_ms
from enrichment_job.settings import JobSettings


@pytest.fixture
def dlq_topics(stack_env: StackEnv, unique: str) -> Iterator[tuple[str, str]]:
    aging, forever = f"dlq-aging-{unique}", f"dlq-forever-{unique}"
    make_topics(stack_env, [aging], partitions=1, config={"retention.ms": "3600000", "segment.ms": "600000"})
    make_topics(stack_env, [forever], partitions=1, config={"retention.ms": "-1"})
    yield aging, forever
    drop_topics(stack_env, [aging, forever])


def _aged(path: Path, age_s: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_a_records_lifetime_is_read_from_the_topics_settings(
    stack_env: StackEnv, dlq_topics: tuple[str, str]
) -> None:
    aging, forever = dlq_topics
    config = {"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]}
    assert topic_record_lifetime_ms(config, aging) == 4_200_000
    assert topic_record_lifetime_ms(config, forever) is None


def test_the_job_store_keeps_bytes_while_the_topic_may_keep_their_dead_letter(
    stack_env: StackEnv, dlq_topics: tuple[str, str], tmp_path: Path
) -> None:
    aging, forever = dlq_topics
    lifetime_s = (4_200_000 + MARGIN_MS) / 1000
    for topic, gone in ((aging, True), (forever, False)):
        settings = JobSettings(
            state_dir=str(tmp_path / topic), bootstrap_servers=stack_env["KAFKA_BOOTSTRAP_SERVERS"]
        )
        store = tmp_path / topic / "dead-letters" / "enrichment" / "ratings" / "0"
        past = _aged(store / "1", lifetime_s + 600)
        within = _aged(store / "2", lifetime_s - 600)
        pruner = StorePruner.of(settings, ("enrichment",), topic, first_after_s=0)
        assert pruner._thread is not None
        if gone:  # the pruner goes on, a round an hour: until its first round removed the file
            deadline = time.monotonic() + 30
            while past.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        else:  # the pruner asks the broker, finds nothing to prune, and ends
            pruner._thread.join(30)
            assert not pruner._thread.is_alive()
        pruner.close()
        assert past.exists() != gone, topic
        assert within.exists()
        assert pruner.keep_ms == (4_200_000 + MARGIN_MS if gone else None)
