"""TransactionalOutput against the real broker: a batch's records opened early with `begin`
and committed with the rest, or dropped."""

import json
from collections.abc import Iterator

import pytest
from support.kafka import StackEnv, drop_topics, make_topics, read_topic

from enrichment_job.kafka_out import Fenced, Records, TransactionalOutput


@pytest.fixture
def topics(stack_env: StackEnv, unique: str) -> Iterator[list[str]]:
    names = [f"out-{unique}", f"side-{unique}", f"commits-{unique}"]
    make_topics(stack_env, names, partitions=1)
    yield names
    drop_topics(stack_env, names)


def _output(stack_env: StackEnv, commits: str, name: str) -> TransactionalOutput:
    return TransactionalOutput({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]}, name, commits)


def _records(topic: str, n: int, tag: str) -> Records:
    return Records(topic, [str(i).encode() for i in range(n)], [f"{tag}{i}".encode() for i in range(n)])


def test_records_produced_from_begin_are_committed_with_the_rest_and_the_marker(
    stack_env: StackEnv, topics: list[str], unique: str
) -> None:
    out_topic, side_topic, commits = topics
    out = _output(stack_env, commits, f"tx-{unique}")
    early = _records(side_topic, 5_000, "early")
    out.begin([early])
    assert read_topic(stack_env, side_topic, idle_s=1) == [], "nothing is readable before the commit"
    written = out.write(7, [_records(out_topic, 3, "late")], {"note": "x"})
    assert written == 5_003
    assert [m.value() for m in read_topic(stack_env, side_topic, min_records=5_000)] == early.values
    late = read_topic(stack_env, out_topic, min_records=3)
    assert [m.value() for m in late] == [b"late0", b"late1", b"late2"]
    marker = json.loads(read_topic(stack_env, commits, min_records=1)[-1].value())
    assert (marker["batch_id"], marker["note"]) == (7, "x")
    assert out.committed(7) and not out.committed(8)


def test_an_aborted_batch_leaves_nothing_and_the_next_one_commits(
    stack_env: StackEnv, topics: list[str], unique: str
) -> None:
    out_topic, side_topic, commits = topics
    out = _output(stack_env, commits, f"tx-{unique}")
    out.begin([_records(side_topic, 1_000, "dropped")])
    out.abort()  # the batch failed before its write
    out.abort()  # nothing open: nothing to do
    assert out.write(0, [_records(out_topic, 2, "kept")], {}) == 2, "the producer goes on"
    assert [m.value() for m in read_topic(stack_env, out_topic, min_records=2)] == [b"kept0", b"kept1"]
    assert read_topic(stack_env, side_topic, idle_s=1) == [], "the aborted records are never readable"


def test_a_fenced_output_that_began_a_batch_raises_fenced_at_its_write(
    stack_env: StackEnv, topics: list[str], unique: str
) -> None:
    out_topic, side_topic, commits = topics
    first = _output(stack_env, commits, f"tx-{unique}")
    first.begin([_records(side_topic, 10, "old")])
    second = _output(stack_env, commits, f"tx-{unique}")  # a later instance of the same name
    with pytest.raises(Fenced):
        first.write(0, [_records(out_topic, 1, "old")], {})
    assert second.write(0, [_records(out_topic, 1, "new")], {}) == 1
    assert [m.value() for m in read_topic(stack_env, out_topic, min_records=1)] == [b"new0"]
    assert read_topic(stack_env, side_topic, idle_s=1) == []
