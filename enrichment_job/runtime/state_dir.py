"""Where a job keeps its state: a local folder, or a folder in an object store.

ENRICH_STATE_DIR (VIEWS_JOB_STATE_DIR) is a local path, a file:// URI, or an s3a:// URI (a
bucket and a prefix), the way Hadoop names them: Spark writes the checkpoints and the state
stores through Hadoop's file systems, the customer table's Delta writer (delta-rs) through its
own object store client, and the job's own few small files (its run id, the query's starting
offsets) are read and written here through Arrow's, all with the same endpoint and keys. On a
cluster every executor must reach the state: an object store or a shared file system, not one
machine's disk.

S3 credentials: the *_S3_ACCESS_KEY / *_S3_SECRET_KEY settings, else the AWS default chain
(environment variables, profile, instance role) for each client.
"""

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from posixpath import join as join_path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

import pyarrow.fs as pafs
from pydantic import BaseModel, Field, SecretStr

__all__ = ["SCHEMES", "ObjectStoreSettings", "StateDir", "check_uri", "metrics_path"]

SCHEMES = ("file", "s3a")


class ObjectStoreSettings(BaseModel):
    """Fields of a job's settings for state in S3 (the prefix is the job's: ENRICH_S3_ENDPOINT)."""

    s3_endpoint: str = Field(
        "", description="the S3 endpoint of s3a:// state, e.g. http://127.0.0.1:9000 (empty: AWS)"
    )
    s3_region: str = Field("", description="the S3 region of s3a:// state (empty: the SDK's default)")
    s3_path_style: bool = Field(
        True, description="bucket in the path, not the host name (S3 servers other than AWS need it)"
    )
    s3_access_key: SecretStr | None = Field(None, description="empty: the AWS default credential chain")
    s3_secret_key: SecretStr | None = None


def check_uri(value: str) -> str:
    """`value` as the state's location: a URI of a known scheme kept as given, a local path
    made absolute (relative to the working folder) and written as a file:// URI. ValueError
    (the settings name the variable) for another scheme or an s3a:// URI with no bucket."""
    parts = urlsplit(value)
    if len(parts.scheme) <= 1:  # no scheme (or a Windows drive letter): a local path
        return Path(value).expanduser().absolute().as_uri()
    if parts.scheme not in SCHEMES:
        raise ValueError(f"scheme {parts.scheme!r} of {value!r} is not one of {', '.join(SCHEMES)}")
    if parts.scheme == "s3a" and not parts.netloc:
        raise ValueError(f"{value!r} names no bucket (s3a://<bucket>/<prefix>)")
    return value.rstrip("/")


def metrics_path(setting: Path | None, state: "StateDir") -> Path | None:
    """Where a job writes its metrics file: the setting, else metrics.json in a local state."""
    if setting is not None:
        return setting
    return Path(state.local_path) / "metrics.json" if state.is_local else None


@dataclass(frozen=True)
class StateDir:
    """A state folder at `uri`, and how to reach it from Python and from Spark."""

    uri: str
    store: ObjectStoreSettings

    @property
    def scheme(self) -> str:
        return urlsplit(self.uri).scheme

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def local_path(self) -> str:
        """The folder on this machine (local state only)."""
        if not self.is_local:
            raise ValueError(f"{self.uri} is not a local folder")
        return url2pathname(urlsplit(self.uri).path)

    def child(self, *parts: str) -> str:
        """The URI of a file or folder inside, as Spark takes it."""
        return "/".join([self.uri, *parts])

    @cached_property
    def _fs(self) -> tuple[pafs.FileSystem, str]:
        """Arrow's file system of the state, made once (an S3 client is not made per file), and
        the folder's path in it."""
        parts = urlsplit(self.uri)
        if self.is_local:
            return pafs.LocalFileSystem(), self.local_path
        store = self.store
        endpoint = urlsplit(store.s3_endpoint) if store.s3_endpoint else None
        options: dict[str, Any] = {
            "force_virtual_addressing": not store.s3_path_style,
        }
        if endpoint is not None:
            options |= {"endpoint_override": endpoint.netloc, "scheme": endpoint.scheme or "https"}
        if store.s3_region:
            options["region"] = store.s3_region
        if store.s3_access_key is not None and store.s3_secret_key is not None:
            options |= {
                "access_key": store.s3_access_key.get_secret_value(),
                "secret_key": store.s3_secret_key.get_secret_value(),
            }
        return pafs.S3FileSystem(**options), f"{parts.netloc}{parts.path}"

    def locate(self, relative: str) -> tuple[pafs.FileSystem, str]:
        """The file system (Arrow's) and the path in it of a file or folder inside."""
        fs, root = self._fs
        return fs, join_path(root, relative) if relative else root

    def exists(self, relative: str) -> bool:
        fs, path = self.locate(relative)
        return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)

    def read_text(self, relative: str) -> str | None:
        """The file's text; None when there is no such file."""
        data = self.read_bytes(relative)
        return None if data is None else data.decode()

    def write_text(self, relative: str, text: str) -> None:
        self.write_bytes(relative, text.encode())

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Writes (or overwrites) a file inside, making its folders."""
        fs, path = self.locate(relative)
        fs.create_dir(path.rpartition("/")[0], recursive=True)
        with fs.open_output_stream(path) as f:
            f.write(data)

    def read_bytes(self, relative: str) -> bytes | None:
        """The file's bytes; None when there is no such file."""
        fs, path = self.locate(relative)
        try:
            with fs.open_input_stream(path) as f:
                return bytes(f.read())
        except FileNotFoundError:
            return None

    def remove(self, relative: str) -> None:
        """Deletes a file, or a folder and all in it; nothing when there is neither."""
        fs, path = self.locate(relative)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            fs.delete_dir(path)
        elif info.type != pafs.FileType.NotFound:
            fs.delete_file(path)

    def table_location(self, relative: str) -> tuple[str, dict[str, str]]:
        """Where delta-rs (the `deltalake` package) finds a table inside: a local path or an
        s3:// URI, and its storage options (the endpoint, region and keys of s3a:// state)."""
        if self.is_local:
            return join_path(self.local_path, relative), {}
        parts, store = urlsplit(self.uri), self.store
        options = {"AWS_VIRTUAL_HOSTED_STYLE_REQUEST": str(not store.s3_path_style).lower()}
        if store.s3_endpoint:
            options["AWS_ENDPOINT_URL"] = store.s3_endpoint
            options["AWS_ALLOW_HTTP"] = str(store.s3_endpoint.startswith("http:")).lower()
        if store.s3_region:
            options["AWS_REGION"] = store.s3_region
        if store.s3_access_key is not None and store.s3_secret_key is not None:
            options["AWS_ACCESS_KEY_ID"] = store.s3_access_key.get_secret_value()
            options["AWS_SECRET_ACCESS_KEY"] = store.s3_secret_key.get_secret_value()
        return f"s3://{parts.netloc}{parts.path}/{relative}", options

    def spark_conf(self) -> dict[str, str]:
        """Hadoop's settings for this state, as Spark configuration (none for local state)."""
        if self.scheme != "s3a":
            return {}
        store, prefix = self.store, "spark.hadoop.fs.s3a."
        conf = {f"{prefix}path.style.access": str(store.s3_path_style).lower()}
        if store.s3_endpoint:
            conf[f"{prefix}endpoint"] = store.s3_endpoint
            conf[f"{prefix}connection.ssl.enabled"] = str(store.s3_endpoint.startswith("https")).lower()
        if store.s3_region:
            conf[f"{prefix}endpoint.region"] = store.s3_region
        if store.s3_access_key is not None and store.s3_secret_key is not None:
            conf[f"{prefix}access.key"] = store.s3_access_key.get_secret_value()
            conf[f"{prefix}secret.key"] = store.s3_secret_key.get_secret_value()
        return conf
