"""The writer: a batch of enriched ratings becomes Parquet objects in S3, each PUT whole (S3 PUTs
are atomic), named after the offsets they hold. Written again from any offset (a replay after a
crash, an offset reset, a rebalance), the rows land once: an object's older siblings whose
offsets it also holds are deleted, or rewritten without those rows."""

import io
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from services.core.errors import ConfigError, FatalSinkError
from services.core.records import Incoming, Rejected
from services.s3_sink.config import S3SinkSettings
from services.s3_sink.layout import LakeObject, offsets_of, overlapping, split_into_objects
from services.s3_sink.rows import parse_values
from services.s3_sink.s3_errors import classify
from services.s3_sink.schema import to_lake_table

log = logging.getLogger(__name__)


def s3_client(settings: S3SinkSettings) -> Any:
    """One attempt per call (the consumer loop retries), short timeouts, path-style if asked."""
    secret = settings.secret_key.get_secret_value() if settings.secret_key else None
    return boto3.session.Session().client(
        "s3",
        endpoint_url=settings.endpoint_url or None,
        region_name=settings.region,
        aws_access_key_id=settings.access_key.get_secret_value() if settings.access_key else None,
        aws_secret_access_key=secret,
        config=Config(
            retries={"max_attempts": 1, "mode": "standard"},
            connect_timeout=settings.connect_timeout_s,
            read_timeout=settings.read_timeout_s,
            max_pool_connections=settings.upload_threads,
            s3={"addressing_style": "path" if settings.path_style else "auto"},
        ),
    )


def parquet_bytes(table: pa.Table, compression: str) -> bytes:
    out = pa.BufferOutputStream()
    pq.write_table(table, out, compression=compression, use_dictionary=True, write_statistics=True)
    return bytes(out.getvalue())


class S3Sink:
    def __init__(self, settings: S3SinkSettings, client: Any) -> None:
        self.settings, self.client = settings, client
        self.prefix = settings.key_prefix
        self._pool = ThreadPoolExecutor(settings.upload_threads, thread_name_prefix="s3-put")
        self.objects_written = 0

    @classmethod
    def from_settings(cls, settings: S3SinkSettings) -> "S3Sink":
        sink = cls(settings, s3_client(settings))
        sink.check_bucket()
        return sink

    def check_bucket(self) -> None:
        """Stop at start (exit 2) on wrong credentials or bucket; only warn if S3 is unreachable."""
        try:
            self.client.head_bucket(Bucket=self.settings.bucket)
        except (BotoCoreError, ClientError) as err:
            problem = classify(err, f"s3://{self.settings.bucket}")
            if isinstance(problem, FatalSinkError):
                raise ConfigError(str(problem)) from None
            log.warning("S3 not reachable yet, records wait for it: %s", problem)

    def write(self, records: list[Incoming[bytes]]) -> list[Rejected]:
        # 1. read the batch into Arrow rows (the unreadable and invalid ones are rejected)
        parsed = parse_values([r.value for r in records])
        kept = [records[i].message for i in parsed.kept]
        coordinates = (
            [str(m.topic()) for m in kept],
            [int(m.partition() or 0) for m in kept],
            [int(m.offset() or 0) for m in kept],
        )
        # 2. the lake table, split into one object per topic, partition and hour
        objects = split_into_objects(to_lake_table(parsed.table, *coordinates))
        # 3. every object written before the loop commits; the first failure decides
        futures = [self._pool.submit(self._put, target, rows) for target, rows in objects]
        errors = [e for e in (f.exception() for f in futures) if e is not None]
        if errors:
            raise next((e for e in errors if isinstance(e, FatalSinkError)), errors[0])
        self.objects_written += len(objects)
        log.info("wrote %d rows in %d objects", parsed.table.num_rows, len(objects))
        return [Rejected(records[i].message, reason) for i, reason in parsed.rejected]

    def _put(self, target: LakeObject, rows: pa.Table) -> None:
        key = target.key(self.prefix)
        body = parquet_bytes(rows, self.settings.compression)
        self._s3(key, self.client.put_object, Key=key, Body=body)
        log.debug("wrote s3://%s/%s: %d rows, %d bytes", self.settings.bucket, key, rows.num_rows, len(body))
        self._settle(target, key)

    def _settle(self, target: LakeObject, key: str) -> None:
        """Siblings (same topic, partition and hour) holding offsets `target` holds lose those
        rows: deleted when all their rows are in `target`, otherwise rewritten with the rest
        (one object per side of `target`'s range), then deleted. Done after `target` is written,
        so a crash in between leaves rows twice until the replay settles again, never lost."""
        for other in list(self._siblings(target)):  # listed before any change to the folder
            span = offsets_of(other)
            if other == key or span is None or overlapping(target, *span) == "keep":
                continue
            kept = 0
            if overlapping(target, *span) == "trim":
                got = self._s3(other, self.client.get_object, Key=other)
                rows = pq.read_table(io.BytesIO(got["Body"].read()))
                offsets = rows.column("kafka_offset")
                for side in (pc.less(offsets, target.first_offset), pc.greater(offsets, target.last_offset)):
                    piece = rows.filter(side)
                    if piece.num_rows:
                        first, last = (
                            pc.min(piece.column("kafka_offset")),
                            pc.max(piece.column("kafka_offset")),
                        )
                        part = target.with_offsets(int(first.as_py()), int(last.as_py())).key(self.prefix)
                        body = parquet_bytes(piece, self.settings.compression)
                        self._s3(part, self.client.put_object, Key=part, Body=body)
                        kept += piece.num_rows
            self._s3(other, self.client.delete_object, Key=other)
            log.info(
                "s3://%s/%s held offsets of %s (written again from another offset): replaced, %d of its "
                "rows kept in objects of their own",
                self.settings.bucket,
                other,
                key.rsplit("/", 1)[-1],
                kept,
            )

    def _siblings(self, target: LakeObject) -> Iterator[str]:
        prefix, token = target.siblings(self.prefix), None
        while True:
            extra: dict[str, str] = {"ContinuationToken": token} if token else {}
            page = self._s3(prefix, self.client.list_objects_v2, Prefix=prefix, **extra)
            yield from (item["Key"] for item in page.get("Contents", []))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def _s3(self, key: str, call: Callable[..., Any], **kwargs: Any) -> Any:
        """One S3 request on the bucket, its failure classified for the loop."""
        try:
            return call(Bucket=self.settings.bucket, **kwargs)
        except (BotoCoreError, ClientError) as err:
            raise classify(err, f"s3://{self.settings.bucket}/{key}") from err

    def close(self) -> None:
        self._pool.shutdown(wait=True)
