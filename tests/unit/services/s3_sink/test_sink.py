"""The writer with a client that keeps objects in a dict (or fails like S3 would): one Parquet
object per partition and hour, rejected records returned with their reason, failures classified,
and the same records written again from any offset landing once."""

import io
import json
import random
from typing import Any

import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from confluent_kafka import Message
from support.lake import Interleaved
from support.services import enriched_record

from foundation.errors import ConfigError, FatalSinkError, SinkUnavailable
from services.core.records import Incoming
from services.s3_sink.config import S3SinkSettings
from services.s3_sink.rows import decode_value
from services.s3_sink.schema import LAKE_SCHEMA
from services.s3_sink.sink import S3Sink


class RecordingClient:
    def __init__(self, fail_with: Exception | None = None) -> None:
        self.objects: dict[str, bytes] = {}
        self.fail_with = fail_with

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.objects[f"{Bucket}/{Key}"] = Body

    def head_bucket(self, Bucket: str) -> None:
        if self.fail_with is not None:
            raise self.fail_with

    def list_objects_v2(self, Bucket: str, Prefix: str, **_page: str) -> dict[str, Any]:
        keys = [k.split("/", 1)[1] for k in sorted(self.objects) if k.startswith(f"{Bucket}/{Prefix}")]
        return {"Contents": [{"Key": k} for k in keys], "IsTruncated": False}

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        return {"Body": io.BytesIO(self.objects[f"{Bucket}/{Key}"])}

    def delete_object(self, Bucket: str, Key: str) -> None:
        self.objects.pop(f"{Bucket}/{Key}", None)


def incoming(partition: int, offset: int, value: bytes) -> Incoming[bytes]:
    message = Message(topic="enriched", partition=partition, offset=offset, value=value)
    return Incoming(decode_value(message), message)


def sink(client: RecordingClient) -> S3Sink:
    return S3Sink(S3SinkSettings(prefix="/lake/", bucket="bkt"), client)


def test_a_batch_becomes_one_parquet_object_per_partition_and_hour() -> None:
    client = RecordingClient()
    hour = 1_795_000_000_000 // 3_600_000 * 3_600_000
    records = [
        incoming(0, 10, json.dumps(enriched_record(1, rating_time=hour + 5)).encode()),
        incoming(1, 20, json.dumps(enriched_record(2, rating_time=hour + 6)).encode()),
        incoming(0, 11, b"not json"),
        incoming(0, 12, json.dumps(enriched_record(3, rating_time=hour + 3_600_000)).encode()),
        incoming(0, 13, json.dumps(enriched_record(4, rating_time=hour + 7)).encode()),
    ]
    rejected = sink(client).write(records)
    assert [(r.message.offset(), r.reason) for r in rejected] == [(11, "Invalid value. in row 0")]
    folder = "bkt/lake/dt=2026-11-18"
    assert sorted(client.objects) == [
        f"{folder}/hour=11/enriched+0+00000000000000000010+00000000000000000013.parquet",
        f"{folder}/hour=11/enriched+1+00000000000000000020+00000000000000000020.parquet",
        f"{folder}/hour=12/enriched+0+00000000000000000012+00000000000000000012.parquet",
    ]
    first = pq.read_table(
        io.BytesIO(
            client.objects[f"{folder}/hour=11/enriched+0+00000000000000000010+00000000000000000013.parquet"]
        )
    )
    assert first.schema.remove_metadata() == LAKE_SCHEMA
    assert first.column("rating_id").to_pylist() == [1, 4]
    assert (
        pq.read_metadata(io.BytesIO(client.objects[sorted(client.objects)[0]]))
        .row_group(0)
        .column(0)
        .compression
        == "ZSTD"
    )


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), SinkUnavailable),
        (
            ClientError(
                {"Error": {"Code": "NoSuchBucket"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, "Put"
            ),
            FatalSinkError,
        ),
    ],
)
def test_a_failed_put_raises_what_the_loop_needs(err: Exception, kind: type[Exception]) -> None:
    records = [incoming(0, 1, json.dumps(enriched_record(1)).encode())]
    with pytest.raises(kind):
        sink(RecordingClient(err)).write(records)


def test_wrong_bucket_or_credentials_stop_at_start_but_an_outage_does_not() -> None:
    missing = ClientError(
        {"Error": {"Code": "404"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, "HeadBucket"
    )
    with pytest.raises(ConfigError, match="S3_SINK_BUCKET"):
        sink(RecordingClient(missing)).check_bucket()
    sink(RecordingClient(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))).check_bucket()


def test_a_batch_of_only_bad_records_writes_nothing() -> None:
    client = RecordingClient()
    rejected = sink(client).write([incoming(0, 1, b"[]"), incoming(0, 2, b"{}")])
    assert len(rejected) == 2
    assert client.objects == {}


def lake_offsets(client: RecordingClient) -> list[tuple[int, int]]:
    """(partition, offset) of every row in every object."""
    rows = [pq.read_table(io.BytesIO(body)) for body in client.objects.values()]
    return sorted(
        (p, o)
        for t in rows
        for p, o in zip(
            t.column("kafka_partition").to_pylist(), t.column("kafka_offset").to_pylist(), strict=True
        )
    )


def test_records_written_again_from_any_offset_land_once() -> None:
    """A crash before the commit, a replay with other batch bounds, an offset reset into the
    middle of an object, a late batch of a member that lost its partitions: every row once."""
    hour = 1_795_000_000_000 // 3_600_000 * 3_600_000
    stream = [
        incoming(
            p,
            o,
            json.dumps(enriched_record(p * 1000 + o, rating_time=hour + (o % 3) * 3_600_000)).encode(),
        )
        for p in (0, 1)
        for o in range(60)
    ]
    by_partition = {p: [r for r in stream if r.message.partition() == p] for p in (0, 1)}
    client = RecordingClient()
    writer = sink(client)
    shuffle = random.Random(7)
    for _ in range(40):  # batches of random bounds from random starting offsets, per partition
        p = shuffle.choice((0, 1))
        first = shuffle.randrange(60)
        last = shuffle.randrange(first, min(first + 25, 60))
        writer.write(by_partition[p][first : last + 1])
    for p in (0, 1):  # finally every offset at least once
        writer.write(by_partition[p])
        writer.write(by_partition[p][10:20])
    assert lake_offsets(client) == [(p, o) for p in (0, 1) for o in range(60)]


@pytest.mark.parametrize("at", ["put", "settle"])
@pytest.mark.parametrize(("mine", "theirs"), [(100, 150), (150, 100), (100, 100)])
def test_two_writers_of_one_folder_at_the_same_time_leave_every_row_once(
    mine: int, theirs: int, at: str
) -> None:
    """A member that lost its partition without noticing, and the new owner: both write from the
    committed offset, with other batch bounds, one inside the other's write. Before, each
    trimmed or deleted the other's object, and rows of both were lost."""
    hour = 1_795_000_000_000 // 3_600_000 * 3_600_000
    stream = [
        incoming(0, o, json.dumps(enriched_record(o, rating_time=hour + o)).encode()) for o in range(200)
    ]
    shared = RecordingClient()
    other = sink(shared)
    writer = S3Sink(other.settings, Interleaved(shared, lambda: other.write(stream[:theirs]), at))
    writer.write(stream[:mine])
    writer.write(stream[mine:])  # the next batches of both go on from where each left off
    other.write(stream[theirs:])
    assert lake_offsets(shared) == [(0, o) for o in range(200)]
