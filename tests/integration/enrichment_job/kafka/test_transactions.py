"""TransactionalOutput against the real broker: a batch's records opened early with `begin`
and committed with the rest, or dropped."""

import json
from collections.abc import Iterator

import pytest
from support.kafka import COMPACTED, StackEnv, drop_topics, make_topics, produce, read_topic

from enrichment_job.kafka.transactions import (
    CommitsTopicPolicy,
    Fenced,
    Records,
    TransactionalOutput,
    last_markers,
)


@pytest.fixture
def topics(stack_env: StackEnv, unique: str) -> Iterator[list[str]]:
    names = [f"out-{unique}", f"side-{unique}", f"commits-{unique}"]
    make_topics(stack_env, names[:2], partitions=1)
    make_topics(stack_env, names[2:], partitions=1, config=COMPACTED)
    yield names
    drop_topics(stack_env, names)


def _output(stack_env: StackEnv, commits: str, name: str) -> TransactionalOutput:
    return TransactionalOutput.open(
        {"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]}, name, commits
    )


def _records(topic: str, n: int, tag: str) -> Records:
    return Records(topic, [str(i).encode() for i in range(n)], [f"{tag}{i}".encode() for i in range(n)])


def test_records_produced_from_begin_are_committed_with_the_rest_and_the_marker(
    stack_env: StackEnv, topics: list[str], unique: str
) -> None:
    out_topic, side_topic, commits = topics
    out = _output(stack_env, commits, f"tx-{unique}")
    early = _records(side_topic, 5_000, "early")
    out.begin(0, [early])
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
    out.begin(0, [_records(side_topic, 1_000, "dropped")])
    out.abort(0)  # the batch failed before its write
    out.abort(0)  # nothing open: nothing to do
    assert out.write(0, [_records(out_topic, 2, "kept")], {}) == 2, "the producer goes on"
    assert [m.value() for m in read_topic(stack_env, out_topic, min_records=2)] == [b"kept0", b"kept1"]
    assert read_topic(stack_env, side_topic, idle_s=1) == [], "the aborted records are never readable"


def test_an_output_fenced_between_batches_raises_fenced_at_the_next_write(
    stack_env: StackEnv, topics: list[str], unique: str
) -> None:
    out_topic, side_topic, commits = topics
    first = _output(stack_env, commits, f"tx-{unique}")
    assert first.write(0, [_records(out_topic, 1, "first")], {}) == 1
    second = _output(stack_env, commits, f"tx-{unique}")  # a later instance of the same name
    assert second.committed(0), "it reads the first one's last marker"
    first.begin(1, [_records(side_topic, 10, "stale")])  # opening is local: the broker says no later
    with pytest.raises(Fenced, match="batch 1"):
        first.write(1, [_records(out_topic, 1, "stale")], {})
    assert second.write(1, [_records(out_topic, 1, "second")], {}) == 1
    assert [m.value() for m in read_topic(stack_env, out_topic, min_records=2)] == [b"first0", b"second0"]
    assert read_topic(stack_env, side_topic, idle_s=1) == [], "the fenced batch's early records never show"


def test_an_output_fenced_while_its_transaction_is_open_raises_fenced_at_the_write(
    stack_env: StackEnv, topics: list[str], unique: str
) -> None:
    out_topic, side_topic, commits = topics
    first = _output(stack_env, commits, f"tx-{unique}")
    first.begin(0, [_records(side_topic, 200_000, "stale")])  # records on their way to the broker
    second = _output(stack_env, commits, f"tx-{unique}")  # takes over: the broker aborts the first's
    with pytest.raises(Fenced, match="batch 0"):
        first.write(0, [_records(out_topic, 1, "stale")], {})
    assert second.write(0, [_records(out_topic, 1, "second")], {}) == 1
    assert [m.value() for m in read_topic(stack_env, out_topic, min_records=1, idle_s=1)] == [b"second0"]
    assert read_topic(stack_env, side_topic, idle_s=1) == [], "the fenced batch's early records never show"


@pytest.mark.parametrize("policy", ["delete", "compact,delete"])
def test_a_commits_topic_whose_markers_can_age_out_is_refused_naming_it_and_the_fix(
    stack_env: StackEnv, unique: str, policy: str
) -> None:
    """Its markers are the job's only memory: aged out, the job would start over and write
    everything again."""
    commits = f"commits-{policy.replace(',', '-')}-{unique}"
    make_topics(stack_env, [commits], partitions=1, config={"cleanup.policy": policy})
    try:
        with pytest.raises(CommitsTopicPolicy, match=f"commits topic {commits} has cleanup.policy={policy}"):
            _output(stack_env, commits, f"tx-{unique}")
    finally:
        drop_topics(stack_env, [commits])


def test_one_read_of_the_commits_topic_gives_the_last_marker_of_each_key_a_tombstone_none(
    stack_env: StackEnv, topics: list[str]
) -> None:
    commits = topics[2]
    produce(
        stack_env,
        commits,
        [
            (b"a", b'{"batch_id": 1}'),
            (b"b", b'{"batch_id": 1}'),
            (b"a", b'{"batch_id": 2}'),
            (b"b", None),
            (b"c", b'{"batch_id": 5}'),
        ],
    )
    config = {"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]}
    assert last_markers(config, commits, ["a", "b", "d"]) == {"a": {"batch_id": 2}, "b": None, "d": None}
    assert last_markers(config, commits, []) == {}
    output = TransactionalOutput.open(config, "c", commits, other_markers=("a", "b"))
    assert (output.marker, output.others) == ({"batch_id": 5}, {"a": {"batch_id": 2}, "b": None})
