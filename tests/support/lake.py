"""The S3 data lake as the S3 sink's tests see it: the objects under one prefix, read back with
pyarrow, and emptied afterwards."""

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


@dataclass
class Lake:
    s3: Any
    bucket: str
    prefix: str

    def keys(self) -> list[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/"
        )
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def objects(self) -> dict[str, pa.Table]:
        """Every object's rows, by key relative to the prefix."""
        out = {}
        for key in self.keys():
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            out[key.removeprefix(f"{self.prefix}/")] = pq.read_table(io.BytesIO(body))
        return out

    def rows(self) -> list[dict[str, Any]]:
        return [row for table in self.objects().values() for row in table.to_pylist()]

    def empty(self) -> None:
        for key in self.keys():
            self.s3.delete_object(Bucket=self.bucket, Key=key)


class Interleaved:
    """An S3 client (any: boto3's or a test's) that runs `other` once, the whole write of another
    writer of the same folder: at this writer's first PUT (`at="put"`: between its listing and
    its write) or at its first listing after a PUT (`at="settle"`: between its write and its
    settling). Every call goes to `client`."""

    def __init__(self, client: Any, other: Callable[[], Any], at: str) -> None:
        self._client, self._other, self._at, self._put = client, other, at, False

    def _run_other(self) -> None:
        if self._other is not None:
            run, self._other = self._other, None
            run()

    def put_object(self, **kwargs: Any) -> Any:
        if self._at == "put":
            self._run_other()
        got = self._client.put_object(**kwargs)
        self._put = True
        return got

    def list_objects_v2(self, **kwargs: Any) -> Any:
        if self._at == "settle" and self._put:
            self._run_other()
        return self._client.list_objects_v2(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
