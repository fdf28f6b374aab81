"""The job with its state in S3 (ENRICH_STATE_DIR=s3a://..., the stack's S3 server), in local
mode and on the stack's Spark standalone cluster: the update join (a) holds, and the checkpoint,
the run id, the customer table and the bytes of a dead letter too large for Kafka are in the
bucket, not on the local disk. The kill -9 case (f) in both is in test_exactly_once.py."""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.delta import live_rows
from support.enrichment import (
    Job,
    StackEnv,
    Topics,
    insert_customer,
    next_second,
    produce,
    rating,
    read_topic,
    s3_state,
    update_join_case,
)

from enrichment_job.runtime.state_dir import StateDir
from infra.stack.clients import spark_job_on_cluster


@pytest.fixture(scope="module", params=["local", "cluster"])
def s3_job(
    request: pytest.FixtureRequest,
    stack_env: StackEnv,
    topics: Topics,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Job, StateDir, Path]]:
    state, extra = s3_state(stack_env, "semantics")
    folder = tmp_path_factory.mktemp("s3-job") / "job"  # the log and the metrics file only
    extra |= {"ENRICH_METRICS_FILE": str(folder / "metrics.json"), "ENRICH_TABLE_COMMIT_INTERVAL_S": "1"}
    if request.param == "cluster":
        # the driver's join, whose state the driver keeps in the bucket (auto would take tasks)
        extra |= spark_job_on_cluster(stack_env) | {"ENRICH_JOIN_IN": "driver"}
    job = Job(stack_env, topics, folder, 3000, extra).start()
    yield job, state, folder
    job.stop()


def test_a_the_update_join_with_the_state_in_s3(
    stack_env: StackEnv, topics: Topics, s3_job: tuple[Job, StateDir, Path], db: Any
) -> None:
    base = time.time_ns() // 1000
    update_join_case(stack_env, topics, db, base, base + 1)


def test_the_checkpoint_run_id_and_customer_table_are_in_the_bucket(
    s3_job: tuple[Job, StateDir, Path],
) -> None:
    job, state, folder = s3_job
    run = state.read_text("checkpoints/run_id")
    assert run is not None and len(run) == 16
    assert state.exists("checkpoints/pipeline/offsets/0") and state.exists("checkpoints/pipeline/commits/0")
    assert state.exists("checkpoints/query-start.json")
    table = state.locate("customer_versions")
    deadline = time.monotonic() + 90  # appended at most a second after a change (see the fixture)
    while not state.exists("customer_versions/_delta_log") or live_rows(table).num_rows == 0:
        assert time.monotonic() < deadline, job.tail()
        time.sleep(1)
    # Only the metrics file (and its .tmp, when a batch is rewriting it right now): no state.
    assert {p.name for p in folder.iterdir()} - {"metrics.tmp"} == {"metrics.json"}


def test_a_rating_too_large_for_kafka_keeps_its_bytes_in_the_bucket_where_its_dead_letter_says(
    stack_env: StackEnv, topics: Topics, s3_job: tuple[Job, StateDir, Path], db: Any
) -> None:
    """The claim-check: a valid rating over ENRICH_MAX_RATING_BYTES (900,000) cannot go to the
    dead-letter topic whole, so its bytes go to the state folder's dead-letters in the bucket."""
    job, state, _ = s3_job
    customer = insert_customer(db, "gold")
    key, large = rating(time.time_ns() // 1000, customer, 4, next_second(db), message="m" * 950_000)
    produce(stack_env, topics.name("ratings"), [(key, large)])
    deadline = time.monotonic() + 90
    while not (dead := [r for r in read_topic(stack_env, topics.name("dlq"), timeout_s=5) if r.key() == key]):
        assert time.monotonic() < deadline, job.tail()
    (letter,) = dead
    headers = dict(letter.headers())
    assert letter.value() is None
    assert headers["dlq.reason"].startswith(b"value over 900000 bytes")
    assert headers["dlq.value.bytes"] == str(len(large)).encode()
    where = headers["dlq.value.location"].decode()
    topic, partition, offset = (headers[f"dlq.{n}"].decode() for n in ("topic", "partition", "offset"))
    assert where == state.child(f"dead-letters/enrichment/{topic}/{partition}/{offset}")
    assert state.read_bytes(where.removeprefix(state.uri + "/")) == large
