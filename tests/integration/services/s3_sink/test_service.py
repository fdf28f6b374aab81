"""`python -m services.s3_sink` against real Kafka and the real S3 server: every rating lands once
at the expected key with its exact values, files rotate by count and by time, bad records go to
the dead-letter topic with their reason and bytes, and a wrong setting stops it at start."""

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support.kafka import committed_total, produce, read_topic
from support.lake import Lake
from support.services import ServiceProcess, as_kafka, enriched_record

from foundation.enriched import EnrichedRating

StackEnv = dict[str, str]
HOUR_MS = 3_600_000
BASE_HOUR = 1_795_000_000_000 // HOUR_MS * HOUR_MS  # 2026-11-18 11:00 UTC


def ratings(count: int, start: int = 0, hours: int = 3) -> list[dict[str, Any]]:
    """Across `hours` hours; every fifth one matched no customer."""
    out = []
    for i in range(start, start + count):
        record = enriched_record(i, rating_time=BASE_HOUR + (i % hours) * HOUR_MS + i)
        if i % 5 == 0:
            customer = ("first_name", "last_name", "email", "gender", "club_status", "region", "full_name")
            record |= dict.fromkeys(customer, None) | {"customer_matched": False, "customer_version": None}
        out.append(record)
    return out


def as_record(row: dict[str, Any]) -> dict[str, Any]:
    """A lake row back in the shape of the enriched record (epoch ms instead of timestamps)."""
    record = {name: row[name] for name in EnrichedRating.model_fields}
    record["rating_time"] = row["rating_time_ms"]
    if isinstance(row["customer_valid_from"], datetime):
        record["customer_valid_from"] = int(row["customer_valid_from"].timestamp() * 1000)
    return record


def expected_key(topic: str, partition: int, offsets: tuple[int, int], rating_time: int) -> str:
    at = datetime.fromtimestamp(rating_time / 1000, tz=UTC)
    return f"dt={at:%Y-%m-%d}/hour={at:%H}/{topic}+{partition}+{offsets[0]:020d}+{offsets[1]:020d}.parquet"


def test_every_rating_lands_once_at_the_expected_key_with_its_values(
    stack_env: StackEnv,
    topics: Callable[..., tuple[str, str]],
    sink_env: Callable[..., dict[str, str]],
    lake: Lake,
    tmp_path: Path,
) -> None:
    names = topics(2)
    records = ratings(400)
    produce(stack_env, names[0], [as_kafka(r) for r in records])
    # one batch of all of them: the keys are then known in advance
    env = sink_env(names, batch_max_records=400, batch_max_wait_ms=30_000)
    service = ServiceProcess("services.s3_sink", "S3_SINK_", env, tmp_path).start()
    try:
        service.wait_for(lambda m: m["written"] == 400, "400 ratings written")
        assert committed_total(stack_env, env["S3_SINK_GROUP_ID"], names[0]) == 400
    finally:
        assert service.stop() == 0

    # where Kafka put each rating, and so the first and last offsets of each (partition, hour)
    placed = {
        m.value(): (m.partition(), m.offset()) for m in read_topic(stack_env, names[0], min_records=400)
    }
    span: dict[tuple[int, int], tuple[int, int]] = {}
    by_id = {}
    for record, (_, value) in zip(records, map(as_kafka, records), strict=True):
        partition, offset = placed[value]
        group = (partition, record["rating_time"] // HOUR_MS)
        low, high = span.get(group, (offset, offset))
        span[group] = (min(low, offset), max(high, offset))
        by_id[record["rating_id"]] = (record, partition, offset)
    assert len({p for p, _ in span}) == 2 and len({h for _, h in span}) == 3

    objects = lake.objects()
    assert sorted(objects) == sorted(
        expected_key(names[0], p, offsets, h * HOUR_MS) for (p, h), offsets in span.items()
    )
    rows = [row for table in objects.values() for row in table.to_pylist()]
    assert sorted(r["rating_id"] for r in rows) == list(range(400))
    for row in rows:
        record, partition, offset = by_id[row["rating_id"]]
        assert as_record(row) == record
        assert (row["kafka_topic"], row["kafka_partition"], row["kafka_offset"]) == (
            names[0],
            partition,
            offset,
        )


def test_files_rotate_at_the_record_count(
    stack_env: StackEnv,
    topics: Callable[..., tuple[str, str]],
    sink_env: Callable[..., dict[str, str]],
    lake: Lake,
    tmp_path: Path,
) -> None:
    names = topics(1)
    produce(stack_env, names[0], [as_kafka(r) for r in ratings(230, hours=1)])
    env = sink_env(names, batch_max_records=50, batch_max_wait_ms=2000)
    service = ServiceProcess("services.s3_sink", "S3_SINK_", env, tmp_path).start()
    try:
        service.wait_for(lambda m: m["written"] == 230, "230 ratings written")
    finally:
        assert service.stop() == 0
    objects = lake.objects()
    spans = [(0, 49), (50, 99), (100, 149), (150, 199), (200, 229)]
    assert [key.split("+", 2)[2] for key in objects] == [f"{a:020d}+{b:020d}.parquet" for a, b in spans]
    assert [t.num_rows for t in objects.values()] == [50, 50, 50, 50, 30]


def test_a_file_is_written_when_the_batch_times_out_without_more_input(
    stack_env: StackEnv,
    topics: Callable[..., tuple[str, str]],
    sink_env: Callable[..., dict[str, str]],
    lake: Lake,
    tmp_path: Path,
) -> None:
    names = topics(1)
    env = sink_env(names, batch_max_records=100_000, batch_max_wait_ms=500)
    service = ServiceProcess("services.s3_sink", "S3_SINK_", env, tmp_path).start()
    try:
        service.wait_for(lambda m: m["state"] == "running", "running")
        produce(stack_env, names[0], [as_kafka(r) for r in ratings(3, hours=1)])
        service.wait_for(lambda m: m["written"] == 3, "3 ratings written")
        assert len(lake.keys()) == 1
        produce(stack_env, names[0], [as_kafka(r) for r in ratings(2, start=3, hours=1)])
        service.wait_for(lambda m: m["written"] == 5, "5 ratings written")
        assert committed_total(stack_env, env["S3_SINK_GROUP_ID"], names[0]) == 5
    finally:
        assert service.stop() == 0
    assert [t.num_rows for t in lake.objects().values()] == [3, 2]


def test_bad_records_become_dead_letters_while_the_others_land(
    stack_env: StackEnv,
    topics: Callable[..., tuple[str, str]],
    sink_env: Callable[..., dict[str, str]],
    lake: Lake,
    tmp_path: Path,
) -> None:
    names = topics(2)
    good = ratings(20)
    missing_id = {k: v for k, v in enriched_record(900).items() if k != "rating_id"}
    bad = [(b"k", b"not json {"), as_kafka(missing_id), as_kafka(enriched_record(901, stars=9))]
    produce(stack_env, names[0], [*map(as_kafka, good[:10]), *bad, *map(as_kafka, good[10:])])
    env = sink_env(names)
    service = ServiceProcess("services.s3_sink", "S3_SINK_", env, tmp_path).start()
    try:
        service.wait_for(
            lambda m: m["written"] == 20 and m["dead_letters"] == 3, "20 written, 3 dead letters"
        )
        assert committed_total(stack_env, env["S3_SINK_GROUP_ID"], names[0]) == 23
    finally:
        assert service.stop() == 0
    dead = {m.value(): dict(m.headers()) for m in read_topic(stack_env, names[1], min_records=3)}
    assert set(dead) == {value for _, value in bad}
    reasons = {value: headers["dlq.reason"].decode() for value, headers in dead.items()}
    assert "Invalid value" in reasons[bad[0][1]]
    assert reasons[bad[1][1]] == "rating_id: field required"
    assert reasons[bad[2][1]] == "stars: must be 1..5, got 9"
    assert all(h["dlq.stage"] == b"s3-sink" and h["dlq.topic"] == names[0].encode() for h in dead.values())
    assert sorted(r["rating_id"] for r in lake.rows()) == list(range(20))


def test_a_wrong_secret_key_or_bucket_stops_the_service_at_start_naming_the_setting(
    topics: Callable[..., tuple[str, str]], sink_env: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    names = topics(1)
    for override, setting in (
        ({"secret_key": "wrong"}, "S3_SINK_SECRET_KEY"),
        ({"bucket": "no-such-bucket-x"}, "S3_SINK_BUCKET"),
    ):
        service = ServiceProcess(
            "services.s3_sink", "S3_SINK_", sink_env(names, **override), tmp_path
        ).start()
        assert service.wait_exit() == 2
        assert setting in service.tail()
