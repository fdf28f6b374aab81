"""The writer: a batch of enriched ratings becomes Parquet objects in S3, each PUT whole (S3 PUTs
are atomic), named after the offsets they hold. Written again from any offset (a replay after a
crash, an offset reset, a rebalance), the rows land once: the rows whose offsets an object of the
folder holds already are not written again, and an object that another writer wrote at the same
time inside a larger one is deleted by its own writer."""

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from foundation.errors import ConfigError, FatalSinkError
from services.core.records import Incoming, Rejected
from services.s3_sink.config import S3SinkSettings
from services.s3_sink.layout import LakeObject, contains, meets, offsets_of, split_into_objects, uncovered
from services.s3_sink.rows import parse_values
from services.s3_sink.s3_errors import classify
from services.s3_sink.schema import to_lake_table

__all__ = ["S3Sink", "parquet_bytes", "s3_client"]

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
        """The rows of `target` that no sibling holds yet, written; then its siblings settled."""
        before = self._ranges(target)
        pieces = uncovered(target, rows, before.values())
        if (held := rows.num_rows - sum(part.num_rows for _, part in pieces)) > 0:
            log.info(
                "%d rows of %s are in the lake already (written from another offset): not written again",
                held,
                target.key(self.prefix).rsplit("/", 1)[-1],
            )
        for piece, part in pieces:
            key = piece.key(self.prefix)
            body = parquet_bytes(part, self.settings.compression)
            self._s3(key, self.client.put_object, Key=key, Body=body)
            log.debug(
                "wrote s3://%s/%s: %d rows, %d bytes", self.settings.bucket, key, part.num_rows, len(body)
            )
        if pieces:
            self._settle(target, [piece for piece, _ in pieces])

    def _settle(self, target: LakeObject, written: list[LakeObject]) -> None:
        """Another writer of the same folder (a member of the group that lost the partition and
        has not noticed yet) may have written the same rows between this one's listing and its
        write. Both started from the offset the group committed, so one object's range holds the
        other's: the object held by a larger one is deleted, by whichever writer sees it first.
        An object is only ever deleted for one whose range is strictly larger, which is kept, so
        two writers can never each delete the rows the other relies on."""
        after = self._ranges(target)
        for key, span in after.items():
            holders = [k for k, other in after.items() if other != span and contains(other, span)]
            if holders:
                self._s3(key, self.client.delete_object, Key=key)
                log.info(
                    "s3://%s/%s: its rows were written at the same time by another writer, in %s: deleted",
                    self.settings.bucket,
                    key,
                    holders[0].rsplit("/", 1)[-1],
                )
        for piece in written:
            key, span = piece.key(self.prefix), (piece.first_offset, piece.last_offset)
            for other_key, other in after.items():
                if meets(other, span) and not (contains(span, other) or contains(other, span)):
                    log.warning(
                        "s3://%s/%s and %s both hold offsets %d..%d of their partition and hour: two "
                        "writers wrote them at the same time from different offsets; readers that "
                        "de-duplicate on (kafka_partition, kafka_offset) see them once",
                        self.settings.bucket,
                        key,
                        other_key.rsplit("/", 1)[-1],
                        max(span[0], other[0]),
                        min(span[1], other[1]),
                    )

    def _ranges(self, target: LakeObject) -> dict[str, tuple[int, int]]:
        """The offset range of each object of `target`'s topic, partition and hour, by key."""
        return {key: span for key in self._siblings(target) if (span := offsets_of(key)) is not None}

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
