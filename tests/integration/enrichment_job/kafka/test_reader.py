"""The ratings' reader against the real broker: a range whose records were deleted before it was
read (retention, delete-records) stops the job, or with ENRICH_ACCEPT_DELETED_RATINGS is read
on from the log start, the loss logged. librdkafka's default jumped to the partition's end: a
restart with waiting ratings past retention lost them, and every record after them, in silence.
A read bounded in bytes (ENRICH_MAX_BATCH_BYTES) stops short of its ranges and says where each
partition goes on, so that the next read takes the rest: nothing skipped, nothing twice."""

import logging

import pyarrow as pa
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support.kafka import StackEnv, make_topics, produce

from enrichment_job.kafka.reader import RecordsDeleted, TopicReader
from enrichment_job.settings import JobSettings


def _deleted_head(stack_env: StackEnv, unique: str) -> str:
    """A topic of 8 records whose first 3 were deleted."""
    topic = f"ratings-{unique}"
    make_topics(stack_env, [topic], partitions=1)
    produce(stack_env, topic, [(b"k", f"v{i}".encode()) for i in range(8)])
    admin = AdminClient({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
    for future in admin.delete_records([TopicPartition(topic, 0, 3)]).values():
        future.result(30)
    return topic


def _reader(stack_env: StackEnv, topic: str, **settings: object) -> TopicReader:
    job = JobSettings(bootstrap_servers=stack_env["KAFKA_BOOTSTRAP_SERVERS"], ratings_topic=topic, **settings)
    return TopicReader(job, topic, f"test-{topic}", timeout_s=30)


def test_ratings_deleted_before_they_were_read_stop_the_read_naming_what_was_lost(
    stack_env: StackEnv, unique: str
) -> None:
    topic = _deleted_head(stack_env, unique)
    reader = _reader(stack_env, topic)
    try:
        with pytest.raises(RecordsDeleted, match=rf"{topic}\[0\]: offsets 1\.\.2 \(2 records\) were deleted"):
            reader.read({0: (1, 8)})
        assert reader.read({0: (5, 8)}).column("value").to_pylist() == [b"v5", b"v6", b"v7"]
    finally:
        reader.close()


def test_with_the_loss_accepted_the_read_goes_on_from_the_log_start_and_says_so(
    stack_env: StackEnv, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _deleted_head(stack_env, unique)
    reader = _reader(stack_env, topic, accept_deleted_ratings=True)
    try:
        with caplog.at_level(logging.ERROR, "enrichment_job"):
            table = reader.read({0: (0, 6)})
        assert table.column("offset").to_pylist() == [3, 4, 5]
        assert "offsets 0..2 (3 records) were deleted" in caplog.text
        assert "ENRICH_ACCEPT_DELETED_RATINGS" in caplog.text
    finally:
        reader.close()


def _large(stack_env: StackEnv, unique: str, sizes: list[int]) -> str:
    """A topic of two partitions, record i of `sizes[i]` bytes on partition i % 2."""
    topic = f"large-{unique}"
    make_topics(stack_env, [topic], partitions=2)
    producer = Producer({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
    for i, size in enumerate(sizes):
        producer.produce(topic, key=b"k", value=bytes([65 + i]) * size, partition=i % 2)
    assert producer.flush(30) == 0
    return topic


def _where(table: pa.Table) -> set[tuple[int, int]]:
    """(partition, offset) of each record read."""
    return set(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))


def test_a_read_bounded_in_bytes_stops_before_the_bound_and_says_where_each_partition_goes_on(
    stack_env: StackEnv, unique: str
) -> None:
    topic = _large(stack_env, unique, [300_000] * 10)  # 5 a partition, 3 MB in all
    reader = _reader(stack_env, topic, max_batch_bytes=1_000_000)
    try:
        first = reader.read({0: (0, 5), 1: (0, 5)}, max_bytes=1_000_000)
        assert 1 <= first.num_rows <= 3
        assert sum(len(v) + 1 for v in first.column("value").to_pylist()) <= 1_000_000
        assert set(reader.cut) == {0, 1}, "neither partition was read to its end"
        read = _where(first)
        for p in (0, 1):  # each goes on right after its last record read: nothing skipped
            assert reader.cut[p] == 1 + max((o for q, o in read if q == p), default=-1)
        seen = set(read)
        while reader.cut:
            ranges = {p: (at, 5) for p, at in reader.cut.items()}
            more = reader.read(ranges, max_bytes=1_000_000)
            assert 1 <= more.num_rows <= 3
            seen |= _where(more)
        assert seen == {(p, o) for p in (0, 1) for o in range(5)}
        # without the bound, the same ranges come whole
        assert reader.read({0: (0, 5), 1: (0, 5)}).num_rows == 10 and reader.cut == {}
    finally:
        reader.close()


def test_a_record_larger_than_the_bound_is_read_on_its_own(stack_env: StackEnv, unique: str) -> None:
    topic = _large(stack_env, unique, [900_000, 10, 900_000, 10])  # partition 0: 900 KB, then 900 KB
    reader = _reader(stack_env, topic, max_batch_bytes=1_000_000)
    try:
        table = reader.read({0: (0, 2)}, max_bytes=500_000)
        assert table.column("offset").to_pylist() == [0]
        assert reader.cut == {0: 1}
        assert reader.read({0: (1, 2)}, max_bytes=500_000).column("offset").to_pylist() == [1]
        assert reader.cut == {}
    finally:
        reader.close()
