"""VIEWS_JOB_MAX_BATCH_BYTES: a batch whose changed rows weigh more than the bound (a last message
of 100 KB for each of many customers) is taken to the driver and written a slice at a time, each
within the bound, and the built-in views and a view declared in SQL still come out exact, the
batches after it going on from there. The rows of a batch weigh what its groups keep, not what
it read: without the bound, 1,400 rows of 850 KB stopped the views job (Arrow out of direct
memory in its driver), and a restart reads the same batch."""

import re
from pathlib import Path
from typing import Any

from support.kafka import produce
from support.services import as_kafka, enriched_record
from support.views import (
    ViewsJob,
    ViewTopics,
    expected_customer_ratings,
    rows_equal,
    views_cli,
    wait_until,
)

StackEnv = dict[str, str]
MESSAGE_BYTES = 100_000
MAX_BATCH_BYTES = 1_000_000
START_MS = 1_795_000_000_000
LAST_WORDS = """-- Per customer: ratings and the last message.
SELECT user_id, count(*) AS ratings, max_by(message, rating_time) AS last_message
FROM enriched
GROUP BY user_id
"""


def _rating(rating_id: int, user_id: int, big: bool) -> dict[str, Any]:
    message = chr(97 + rating_id % 26) * MESSAGE_BYTES if big else f"short {rating_id}"
    return enriched_record(
        rating_id,
        user_id=user_id,
        message=message,
        rating_time=START_MS + rating_id * 1000,
        cdc_watermark_ms=START_MS + rating_id * 1000 + 500,
    )


def _last_words(enriched: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    expected = expected_customer_ratings(enriched)
    return {
        k: {"user_id": r["user_id"], "ratings": r["ratings"], "last_message": r["last_message"]}
        for k, r in expected.items()
    }


def test_a_batch_of_rows_over_the_bound_is_written_in_slices_within_it_and_every_view_is_exact(
    stack_env: StackEnv, topics: ViewTopics, tmp_path: Path
) -> None:
    # 30 customers with a short rating then a 100 KB one (3 MB of rows in all), 60 with a short one
    first = [_rating(i, i + 1, big=False) for i in range(30)]
    first += [_rating(100 + i, i + 1, big=True) for i in range(30)]
    first += [_rating(200 + i, 100 + i, big=False) for i in range(60)]
    produce(stack_env, topics.enriched, [as_kafka(r) for r in first])  # before the job: one batch
    job = ViewsJob(stack_env, topics, tmp_path, VIEWS_JOB_MAX_BATCH_BYTES=str(MAX_BATCH_BYTES)).start()
    try:
        wait_until(
            rows_equal(stack_env, topics.customer_ratings, expected_customer_ratings(first), "average_stars"),
            job,
        )
        (tmp_path / "last_words.sql").write_text(LAST_WORDS)
        created = views_cli(stack_env, topics, "create", str(tmp_path / "last_words.sql"))
        assert created.returncode == 0, created.stderr[-3000:]
        view_topic = f"{topics.env()['VIEWS_JOB_TOPIC_PREFIX']}last_words"
        wait_until(rows_equal(stack_env, view_topic, _last_words(first)), job)

        # then a short last rating for the customers of the long ones, and long ones for 20 others
        second = [_rating(300 + i, i + 1, big=False) for i in range(30)]
        second += [_rating(400 + i, 100 + i, big=True) for i in range(20)]
        produce(stack_env, topics.enriched, [as_kafka(r) for r in second])
        wait_until(
            rows_equal(
                stack_env, topics.customer_ratings, expected_customer_ratings(first + second), "average_stars"
            ),
            job,
        )
        wait_until(rows_equal(stack_env, view_topic, _last_words(first + second)), job)
    finally:
        job.stop()
    log = job.log.read_text()
    sliced = re.findall(r"(batch \d+|view last_words, batch \d+): .* collects of at most (\d+) bytes", log)
    assert any(w.startswith("batch") for w, _ in sliced), job.tail()
    assert any(w.startswith("view last_words") for w, _ in sliced), job.tail()
    assert max(int(n) for _, n in sliced) <= MAX_BATCH_BYTES, sliced
