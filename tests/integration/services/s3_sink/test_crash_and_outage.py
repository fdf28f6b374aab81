"""Exactly once in the lake across a kill -9 (objects written but never committed are replaced
by the replay), an offset reset into the middle of written objects, and an S3 outage that pauses
the sink without committing or losing anything."""

import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message, TopicPartition
from support.kafka import committed_total, produce
from support.lake import Interleaved, Lake
from support.proxy import proxy_to
from support.services import ServiceProcess, as_kafka, enriched_record

from services.core.records import Incoming
from services.s3_sink.config import S3SinkSettings
from services.s3_sink.layout import offsets_of
from services.s3_sink.sink import S3Sink, s3_client

StackEnv = dict[str, str]
HOUR_MS = 3_600_000


def ratings(count: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    """Spread over four hours, so batches hold several objects per partition."""
    base = 1_795_000_000_000
    return [
        as_kafka(enriched_record(i, rating_time=base + (i % 4) * HOUR_MS))
        for i in range(start, start + count)
    ]


def s3_settings(env: dict[str, str]) -> S3SinkSettings:
    """The S3 part of the service's environment, as settings for a sink made in the test."""
    fields = ("endpoint_url", "region", "access_key", "secret_key", "bucket", "prefix")
    return S3SinkSettings(**{f: env[f"S3_SINK_{f.upper()}"] for f in fields})


def uncommitted(env: dict[str, str], topic: str, count: int) -> list[Message]:
    """The next `count` records after the group's committed offsets, without committing."""
    consumer = Consumer(
        {
            "bootstrap.servers": env["S3_SINK_BOOTSTRAP_SERVERS"],
            "group.id": env["S3_SINK_GROUP_ID"],
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",  # a partition without a commit starts at the beginning
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign(consumer.committed([TopicPartition(topic, p) for p in meta.partitions], timeout=10))
        messages: list[Message] = []
        deadline = time.monotonic() + 30
        while len(messages) < count and time.monotonic() < deadline:
            messages += [m for m in consumer.consume(count - len(messages), 1) if m.error() is None]
        assert len(messages) == count
        return messages
    finally:
        consumer.close()


def test_kill_9_and_restart_leave_every_rating_exactly_once(
    stack_env: StackEnv,
    topics: Callable[..., tuple[str, str]],
    sink_env: Callable[..., dict[str, str]],
    lake: Lake,
    tmp_path: Path,
) -> None:
    total, before_kill = 3000, 1000
    names = topics(2)
    # The rest is produced after the kill: a sink fast enough to write everything before the
    # kill lands would otherwise leave nothing for the restart to do.
    produce(stack_env, names[0], ratings(before_kill))
    env = sink_env(names, batch_max_records=200, batch_max_wait_ms=200)
    first = ServiceProcess("services.s3_sink", "S3_SINK_", env, tmp_path).start()
    first.wait_for(lambda m: m["written"] >= 600, "600 ratings written")
    first.kill()
    committed = committed_total(stack_env, env["S3_SINK_GROUP_ID"], names[0])
    assert committed <= before_kill
    produce(stack_env, names[0], ratings(total - before_kill, start=before_kill))

    # What a crash between writing and committing leaves: objects for a batch larger than the
    # ones the restarted service will make, starting at the committed offsets.
    settings = s3_settings(env)
    crashed = S3Sink.from_settings(settings)
    batch = uncommitted(env, names[0], min(500, total - committed))
    crashed.write([Incoming(m.value(), m) for m in batch])
    crashed.close()
    assert len(lake.rows()) > committed

    second = ServiceProcess("services.s3_sink", "S3_SINK_", env, tmp_path).start()
    try:
        second.wait_for(lambda m: m["written"] >= total - committed, "the rest written")
        assert committed_total(stack_env, env["S3_SINK_GROUP_ID"], names[0]) == total
    finally:
        assert second.stop() == 0
    rows = lake.rows()
    assert len(rows) == total
    assert {r["rating_id"] for r in rows} == set(range(total))
    assert len({(r["kafka_partition"], r["kafka_offset"]) for r in rows}) == total


def test_an_offset_reset_into_the_middle_of_written_objects_leaves_every_rating_once(
    stack_env: StackEnv,
    topics: Callable[..., tuple[str, str]],
    sink_env: Callable[..., dict[str, str]],
    lake: Lake,
    tmp_path: Path,
) -> None:
    total = 1000
    names = topics(2)
    produce(stack_env, names[0], ratings(total))
    env = sink_env(names, batch_max_records=200, batch_max_wait_ms=500)
    first = ServiceProcess("services.s3_sink", "S3_SINK_", env, tmp_path).start()
    try:
        first.wait_for(lambda m: m["written"] == total, "every rating written")
    finally:
        assert first.stop() == 0
    # An operator moves the group back, to offsets that fall inside written objects.
    resetter = Consumer(
        {"bootstrap.servers": env["S3_SINK_BOOTSTRAP_SERVERS"], "group.id": env["S3_SINK_GROUP_ID"]}
    )
    try:
        resetter.commit(offsets=[TopicPartition(names[0], p, 137) for p in (0, 1)], asynchronous=False)
    finally:
        resetter.close()
    replayed = total - 2 * 137
    second = ServiceProcess(
        "services.s3_sink", "S3_SINK_", env | {"S3_SINK_BATCH_MAX_RECORDS": "150"}, tmp_path
    )
    second.start()
    try:
        second.wait_for(lambda m: m["written"] == replayed, "the replay written")
    finally:
        assert second.stop() == 0
    rows = lake.rows()
    assert sorted(r["rating_id"] for r in rows) == list(range(total))
    # Within a partition and hour, the objects' offset ranges are apart.
    spans: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for key in lake.keys():
        folder, name = key.rsplit("/", 1)
        offsets = offsets_of(key)
        assert offsets is not None, key
        spans.setdefault((folder, name.split("+")[1]), []).append(offsets)
    for ranges in spans.values():
        ranges.sort()
        assert all(a[1] < b[0] for a, b in pairwise(ranges)), ranges


def test_s3_outage_pauses_commits_nothing_more_and_everything_lands_once_after(
    stack_env: StackEnv,
    topics: Callable[..., tuple[str, str]],
    sink_env: Callable[..., dict[str, str]],
    lake: Lake,
    tmp_path: Path,
) -> None:
    names = topics(2)
    host, port = stack_env["S3_ENDPOINT_URL"].removeprefix("http://").split(":")
    with proxy_to(host, int(port)) as proxy:
        env = sink_env(names, endpoint_url=proxy.url)
        service = ServiceProcess("services.s3_sink", "S3_SINK_", env, tmp_path).start()
        try:
            produce(stack_env, names[0], ratings(100))
            service.wait_for(lambda m: m["written"] == 100, "100 ratings written")
            assert committed_total(stack_env, env["S3_SINK_GROUP_ID"], names[0]) == 100
            objects_before = set(lake.keys())

            proxy.down()
            produce(stack_env, names[0], ratings(200, start=100))
            waiting = service.wait_for(
                lambda m: m["state"] == "waiting for downstream" and m["retries"] >= 2, "paused for S3"
            )
            assert "S3 unreachable" in waiting["last_error"]
            assert committed_total(stack_env, env["S3_SINK_GROUP_ID"], names[0]) == 100
            assert set(lake.keys()) == objects_before

            proxy.up()
            service.wait_for(lambda m: m["written"] == 300 and m["state"] == "running", "300 written")
            assert committed_total(stack_env, env["S3_SINK_GROUP_ID"], names[0]) == 300
        finally:
            assert service.stop() == 0
    rows = lake.rows()
    assert sorted(r["rating_id"] for r in rows) == list(range(300))
    assert len({(r["kafka_partition"], r["kafka_offset"]) for r in rows}) == 300


@pytest.mark.parametrize("at", ["put", "settle"])
def test_two_sinks_writing_one_folder_at_the_same_time_leave_every_rating_once(
    stack_env: StackEnv,
    topics: Callable[..., tuple[str, str]],
    sink_env: Callable[..., dict[str, str]],
    lake: Lake,
    at: str,
) -> None:
    """A member that lost its partitions without noticing (frozen past the session timeout) and
    the new owner both write from the committed offset, with other batch bounds, one inside the
    other's write. Before, each trimmed or deleted the other's object and rows were lost."""
    names = topics(1)
    produce(stack_env, names[0], ratings(400))
    env = sink_env(names)
    settings = s3_settings(env)
    records = [Incoming(m.value() or b"", m) for m in uncommitted(env, names[0], 400)]
    zombie = S3Sink.from_settings(settings)
    owner = S3Sink(settings, Interleaved(s3_client(settings), lambda: zombie.write(records[:250]), at))
    try:
        owner.write(records[:150])
        owner.write(records[150:])
        zombie.write(records[250:])
    finally:
        owner.close()
        zombie.close()
    rows = lake.rows()
    assert sorted((r["kafka_offset"], r["rating_id"]) for r in rows) == [(i, i) for i in range(400)]
