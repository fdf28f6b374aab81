"""CdcReader against the real broker: the CDC range a batch reads, and the records in it."""

from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from support.change_events import change_event
from support.kafka import StackEnv, make_topics, produce

from enrichment_job.customers.table import CdcState
from enrichment_job.driver.cdc import CdcReader, CdcResult, Prefetch, in_order, ingest_events
from enrichment_job.records import change_events
from enrichment_job.settings import JobSettings


def _reader(stack_env: StackEnv, topic: str, limit: int = 200_000) -> CdcReader:
    settings = JobSettings(
        bootstrap_servers=stack_env["KAFKA_BOOTSTRAP_SERVERS"],
        cdc_topic=topic,
        max_offsets_per_trigger=limit,
    )
    return CdcReader(settings, f"test-{topic}", timeout_s=30)


def test_reads_from_the_committed_offsets_to_the_end_with_the_kafka_columns(
    stack_env: StackEnv, unique: str
) -> None:
    topic = f"cdc-{unique}"
    make_topics(stack_env, [topic], partitions=1)
    produce(stack_env, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(6)] + [(b"k6", None)])
    reader = _reader(stack_env, topic)
    try:
        assert reader.ranges({}) == {0: (0, 7)}, "a run without state starts at the beginning"
        assert reader.ranges({0: 7}) == {}, "nothing new"
        table = reader.read(reader.ranges({0: 4}))
        assert table.column_names == ["key", "value", "topic", "partition", "offset", "timestamp"]
        assert table.column("offset").to_pylist() == [4, 5, 6]
        assert table.column("key").to_pylist() == [b"k4", b"k5", b"k6"]
        assert table.column("value").to_pylist() == [b"v4", b"v5", None], "a tombstone stays a null"
        assert set(table.column("topic").to_pylist()) == {topic}
        assert table.column("timestamp").null_count == 3, "the CDC reader has no use for timestamps"
        # The reader is reused batch after batch.
        assert reader.read(reader.ranges({0: 1})).column("offset").to_pylist() == [1, 2, 3, 4, 5, 6]
    finally:
        reader.close()


def test_a_batch_reads_at_most_max_offsets_per_trigger(stack_env: StackEnv, unique: str) -> None:
    topic = f"cdc-{unique}"
    make_topics(stack_env, [topic], partitions=2)
    produce(stack_env, topic, [(b"a", b"1")] * 5 + [(b"b", b"2")] * 5)
    reader = _reader(stack_env, topic, limit=6)
    try:
        ranges = reader.ranges({})
        assert sum(end - first for first, end in ranges.values()) == 6
        assert reader.read(ranges).num_rows == 6
        rest = reader.ranges({p: end for p, (_, end) in ranges.items()})
        assert sum(end - first for first, end in rest.values()) == 4, "the next batch reads the rest"
    finally:
        reader.close()


def test_a_read_cut_short_by_the_limit_says_where_the_topic_ended_and_can_read_on_to_it(
    stack_env: StackEnv, unique: str
) -> None:
    topic = f"cdc-{unique}"
    make_topics(stack_env, [topic], partitions=1)
    produce(stack_env, topic, [(b"a", b"1")] * 10)
    reader = _reader(stack_env, topic, limit=4)
    try:
        assert reader.ranges({}) == {0: (0, 4)}
        assert reader.short == {0: 10}, "the topic ended at 10 when the read was cut at 4"
        produce(stack_env, topic, [(b"a", b"2")] * 5)  # arrives after the batch started
        assert reader.ranges({0: 4}, until={0: 10}) == {0: (4, 8)}
        assert reader.short == {0: 10}
        assert reader.ranges({0: 8}, until={0: 10}) == {0: (8, 10)}, "not the records that came later"
        assert reader.short == {}, "caught up with where the topic ended"
        assert reader.ranges({0: 10}) == {0: (10, 14)}
        assert reader.short == {0: 15}
    finally:
        reader.close()


def test_reads_bounded_in_bytes_are_cut_short_and_read_on_to_what_one_whole_read_ingests(
    stack_env: StackEnv, unique: str
) -> None:
    # ten customers with 200 KB comments (PostgreSQL's column is TEXT): 2 MB of change events
    events = [change_event("c", n, 1_000 + 10 * n, 10 + n, comments=str(n) * 200_000) for n in range(10)]
    topic = f"cdc-{unique}"
    make_topics(stack_env, [topic], partitions=1)
    produce(stack_env, topic, [(str(n).encode(), e) for n, e in enumerate(events)])
    settings = JobSettings(
        bootstrap_servers=stack_env["KAFKA_BOOTSTRAP_SERVERS"], cdc_topic=topic, max_batch_bytes=1_000_000
    )
    reader = CdcReader(settings, f"test-{topic}", timeout_s=30)
    try:
        state, parts, reads = CdcState(), [], 0
        ranges = reader.ranges({})
        while ranges:
            raw = reader.read(ranges, max_bytes=settings.max_batch_bytes)
            assert (
                1 <= raw.num_rows <= 4 and sum(len(v) for v in raw.column("value").to_pylist()) <= 1_000_000
            )
            part = ingest_events(change_events.read_arrow(in_order(raw)), state, "customers", "dlq")
            parts.append(part)
            state, reads = part.state, reads + 1
            if reader.cut:
                assert reader.short == {0: 10}, "a read cut short says where the topic ended"
            ranges = reader.ranges(state.cdc_to) if reader.short else {}
        whole = _whole(reader, {0: (0, 10)})
        assert reads >= 3
        assert state.cdc_to == {0: 10}
        assert sum(p.events for p in parts) == 10
        assert pa.concat_tables([p.versions for p in parts]).equals(whole.versions)
    finally:
        reader.close()


def test_a_topic_not_created_yet_has_nothing_to_read(stack_env: StackEnv, unique: str) -> None:
    reader = _reader(stack_env, f"cdc-missing-{unique}")
    try:
        assert reader.ranges({}) == {}
    finally:
        reader.close()


def test_changes_deleted_before_they_were_read_stop_the_job_with_a_clear_error(
    stack_env: StackEnv, unique: str
) -> None:
    topic = f"cdc-{unique}"
    make_topics(stack_env, [topic], partitions=1)
    produce(stack_env, topic, [(b"k", b"v")] * 5)
    admin = AdminClient({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
    for future in admin.delete_records([TopicPartition(topic, 0, 3)]).values():
        future.result(30)
    reader = _reader(stack_env, topic)
    try:
        with pytest.raises(KafkaException, match=r"offsets 1\.\.2 were deleted"):
            reader.ranges({0: 1})
        # A fresh state would not know the customers created in the deleted head.
        with pytest.raises(KafkaException, match=rf"{topic}\[0\] starts at offset 3: the head of the CDC"):
            reader.ranges({})
    finally:
        reader.close()
    accepting = CdcReader(
        JobSettings(
            bootstrap_servers=stack_env["KAFKA_BOOTSTRAP_SERVERS"],
            cdc_topic=topic,
            accept_partial_cdc_history=True,
        ),
        f"test-{topic}",
        timeout_s=30,
    )
    try:
        assert accepting.ranges({}) == {0: (3, 5)}, "accepted: the read starts at what is left"
    finally:
        accepting.close()


def _prefetch(reader: CdcReader, state: CdcState | None = None, chunk_size: int = 4) -> Prefetch:
    return Prefetch(reader, state or CdcState(None, None, {}), "customers", "dlq", chunk_size=chunk_size)


@contextmanager
def _cdc_topic(
    stack_env: StackEnv, unique: str, records: list[tuple[bytes, bytes | None]], partitions: int = 1
) -> Iterator[tuple[str, CdcReader]]:
    """A CDC topic of `records`, and a reader of it (the limit of a batch's read: 4 records)."""
    topic = f"cdc-{unique}"
    make_topics(stack_env, [topic], partitions=partitions)
    produce(stack_env, topic, records)
    reader = _reader(stack_env, topic, limit=4)
    try:
        yield topic, reader
    finally:
        reader.close()


def _whole(reader: CdcReader, ranges: dict[int, tuple[int, int]]) -> CdcResult:
    """`ranges` read at once and ingested in one go."""
    events = change_events.read_arrow(in_order(reader.read(ranges)))
    assert events is not None
    return ingest_events(events, CdcState(), "customers", "dlq")


def test_the_topic_read_ahead_ends_where_it_ended_as_the_read_began(stack_env: StackEnv, unique: str) -> None:
    events = [(str(n).encode(), change_event("c", n, 1_000 + n, 10 + n)) for n in range(9)]
    with _cdc_topic(stack_env, unique, events, partitions=2) as (topic, reader):
        ends = {p: end for p, (_, end) in reader.ranges({}, whole=True).items()}
        prefetch = _prefetch(reader, chunk_size=2)  # the limit of a batch's read does not apply
        produce(stack_env, topic, [(b"9", change_event("c", 9, 1_009, 19))])  # after the read began
        taken = prefetch.take()
        assert taken is not None
        assert taken.events == 9
        assert taken.state.cdc_to == ends
        whole = _whole(reader, reader.ranges({}, ends, whole=True))
        assert taken.versions.equals(whole.versions), "partition after partition, as a batch reads them"
        assert taken.customers == whole.customers


def test_the_read_ahead_in_chunks_ingests_what_one_read_of_the_topic_does(
    stack_env: StackEnv, unique: str
) -> None:
    events = [change_event("c", n, 1_000 + 10 * n, 10 + n) for n in range(7)]
    events += [change_event("u", n, 1_100 + n, 20 + n, club_status="gold") for n in range(3)]
    events += [change_event("u", 1, 1_050, 12)]  # a re-send: a duplicate, in another chunk
    records = [(str(n).encode(), e) for n, e in enumerate(events)] + [(b"1", None)]
    with _cdc_topic(stack_env, unique, records) as (_, reader):
        whole = _whole(reader, reader.ranges({}, whole=True))
        taken = _prefetch(reader, chunk_size=3).take()
        assert taken is not None
        assert taken.versions.equals(whole.versions)
        assert taken.customers == whole.customers
        assert (taken.state, taken.events, taken.duplicates) == (whole.state, 12, 1)


def test_a_read_ahead_stops_before_a_chunk_arrow_cannot_read_and_the_first_batch_reads_on(
    stack_env: StackEnv, unique: str
) -> None:
    good = [(str(n).encode(), change_event("c", n, 1_000 + n, 10 + n)) for n in range(9)]
    with _cdc_topic(stack_env, unique, [*good[:6], (b"x", b"not json"), *good[6:]]) as (_, reader):
        taken = _prefetch(reader, chunk_size=3).take()
        assert taken is not None
        assert taken.events == 6, "the chunks before the unreadable event"
        assert taken.state.cdc_to == {0: 6}
        assert reader.ranges(taken.state.cdc_to, whole=True) == {0: (6, 10)}, "the batch reads on from it"


def test_a_failed_read_ahead_leaves_the_topic_to_the_first_batch(stack_env: StackEnv, unique: str) -> None:
    with _cdc_topic(stack_env, unique, [(b"k", b"v")]) as (_, reader):
        # Offsets before the topic's start: what the first batch would refuse too, with its reason.
        assert _prefetch(reader, CdcState(None, None, {0: -5})).take() is None
