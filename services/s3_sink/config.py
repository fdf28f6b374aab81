"""Settings of the S3 sink (env prefix S3_SINK_): the shared consumer settings with this service's
defaults, plus where and how the lake is written."""

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from services.core.settings import ServiceSettings

__all__ = ["S3SinkSettings"]


class S3SinkSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="S3_SINK_")

    group_id: str = "s3-sink"
    input_topics: tuple[str, ...] = ("ratings-with-customer-data",)
    dlq_topic: str = "s3-sink-dlq"
    # A batch is a set of files: it closes at this many records or this long after its first one.
    batch_max_records: int = Field(50_000, gt=0, description="close the batch (and its files) at this many")
    batch_max_bytes: int = Field(
        128 * 1024 * 1024, gt=0, description="... or at this many bytes of records (a bigger one goes alone)"
    )
    batch_max_wait_ms: int = Field(60_000, gt=0, description="... or this long after its first record")

    endpoint_url: str | None = Field(
        "http://127.0.0.1:9000", description="S3 API endpoint; empty for AWS itself"
    )
    region: str = "us-east-1"
    access_key: SecretStr | None = Field(None, description="None: boto3's default credential chain")
    secret_key: SecretStr | None = None
    bucket: str = Field("ratings-lake", min_length=3)
    prefix: str = Field("ratings-with-customer-data", description="key prefix of every object")
    compression: Literal["zstd", "snappy", "gzip", "none"] = "zstd"
    path_style: bool = Field(True, description="path-style addressing, as S3-compatible servers want")
    connect_timeout_s: float = Field(3.0, gt=0)
    read_timeout_s: float = Field(30.0, gt=0)
    upload_threads: int = Field(4, gt=0, le=64, description="objects encoded and uploaded in parallel")

    @property
    def key_prefix(self) -> str:
        """The prefix without surrounding slashes ('' for the bucket's root)."""
        return self.prefix.strip("/")
