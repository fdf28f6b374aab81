"""The ratings' reader against the real broker: a range whose records were deleted before it was
read (retention, delete-records) stops the job, or with ENRICH_ACCEPT_DELETED_RATINGS is read
on from the log start, the loss logged. librdkafka's default jumped to the partition's end: a
restart with waiting ratings past retention lost them, and every record after them, in silence."""

import logging

import pytest
from confluent_kafka import TopicPartition
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
