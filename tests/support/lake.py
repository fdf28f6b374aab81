"""The S3 data lake as the S3 sink's tests see it: the objects under one prefix, read back with
pyarrow, and emptied afterwards."""

import io
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
