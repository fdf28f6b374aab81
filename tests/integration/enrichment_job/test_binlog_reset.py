"""A binlog that starts over: RESET MASTER while the connector is stopped, the connector's offsets
deleted, then the connector resumed, so it snapshots the table again from the new binlog's start
into the same CDC topic. The job follows the new history: a customer changed after the reset is
joined as changed, though every position of the new history is below the old one's furthest."""

import time
from pathlib import Path
from typing import Any

from support.enrichment import Job, Topics, by_rating, insert_customer, next_second, produce, rating

from infra.stack.bootstrap import start_binlog_over
from infra.stack.settings import StackSettings

StackEnv = dict[str, str]


def test_after_reset_master_and_a_new_snapshot_changes_reach_the_join(
    stack_env: StackEnv, topics: Topics, db: Any, tmp_path: Path
) -> None:
    job = Job(stack_env, topics, tmp_path / "job", grace_ms=0).start()
    try:
        customer = insert_customer(db, "silver")
        first = time.time_ns() // 1000
        produce(stack_env, topics.name("ratings"), [rating(first, customer, 4, next_second(db))])
        assert by_rating(stack_env, topics.name("enriched"), {first}, 180)[first]["club_status"] == "silver"

        # The binlog starts over, and the connector snapshots the table again from its start.
        start_binlog_over(StackSettings())

        with db.cursor() as cur:
            cur.execute("UPDATE customers SET club_status = 'platinum' WHERE id = %s", (customer,))
        second = first + 1
        produce(stack_env, topics.name("ratings"), [rating(second, customer, 1, next_second(db))])
        out = by_rating(stack_env, topics.name("enriched"), {second}, 180)[second]
        assert out["club_status"] == "platinum", f"the change after the reset was not followed:\n{job.tail()}"
        log = job.log.read_text(errors="replace")
        assert "starts below the furthest position read before it" in log, job.tail()
        assert "earlier binlog file" not in log, job.tail()
    finally:
        job.stop()
