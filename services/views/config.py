"""The query service's settings (prefix VIEWS_): where the changelog topics are, where to listen,
where to keep the local copy of the store."""

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from foundation.kafka_record import prefetch_config
from foundation.settings import Settings
from services.views.pgwire import PgSettings
from services.views.protocol import Access, Bounds
from services.views.store import WRITER_CACHE_KIB

__all__ = ["ViewsApiSettings"]


class ViewsApiSettings(Settings):
    model_config = SettingsConfigDict(env_prefix="VIEWS_")

    bootstrap_servers: str = "127.0.0.1:9092"
    kafka_extra: dict[str, str] = Field(
        default_factory=dict, description="extra librdkafka settings (JSON), e.g. security.protocol"
    )
    changelog_topics: tuple[str, ...] = Field(
        ("view.customer_ratings", "view.segment_hourly"),
        description="the views' changelog topics (JSON list); a view's name is the part after the last dot",
    )
    commits_topic: str = Field("views-commits", description="the views job's markers: columns and freshness")
    topic_prefix: str = Field(
        "view.",
        description="a view declared in SQL is read from this prefix + its name, from the marker that"
        " first names it on; a dropped one is forgotten",
    )
    fetch_queue_bytes: int = Field(
        8_000_000,
        ge=1024,
        description="changelog records fetched ahead of the store's writer, at most this many bytes"
        " (librdkafka's queued.max.messages.kbytes, overshot by one fetch; its own default holds up"
        " to 64 MiB while the service catches up)",
    )
    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8087, gt=0, lt=65536)
    state_dir: Path = Field(
        Path(".state/views-api"),
        validate_default=True,
        description="the local copy of the store (SQLite), for fast restarts (relative: to the working"
        " directory at start)",
    )
    store_cache_bytes: int = Field(
        WRITER_CACHE_KIB * 1024,
        ge=1_048_576,
        description="the page cache of the store's writer (SQLite, bytes), in the changelog process; the"
        " operating system caches the file too, so a larger one saves little time a change and holds"
        " that much more memory once the store is larger than it",
    )
    scan_limit: int = Field(100, gt=0, description="rows a filtered scan returns without ?limit=")
    scan_limit_max: int = Field(1000, gt=0, description="the largest ?limit= accepted")
    scan_max_bytes: int = Field(
        8_388_608,
        ge=1_000_000,
        description="a scan's page holds at most this many bytes of rows (JSON), whatever its limit; a"
        " page cut short says where the next one starts (`next`), as a full one does. A row keeps"
        " what its view keeps (a last message of up to 1 MB): 1,000 of them would be 1 GB",
    )
    subscriber_queue: int = Field(
        10_000, gt=0, description="changes a slow SSE subscriber may fall behind before it is cut off"
    )
    subscriber_queue_bytes: int = Field(
        16_000_000,
        gt=0,
        description="the memory (bytes) the changes a slow SSE subscriber falls behind may hold before "
        "it is cut off, whichever of this and VIEWS_SUBSCRIBER_QUEUE comes first (a change's string is "
        "shared by the subscribers of its view: this bounds each one's share from above)",
    )
    heartbeat_s: float = Field(15, gt=0, description="SSE comment line this often while nothing changes")
    snapshot_timeout_s: float = Field(
        30,
        gt=0,
        description="an SSE subscriber that has not read its snapshot this long after it began is cut off"
        " (the snapshot is read from the store as the client takes it, in one read transaction)",
    )
    max_subscribers: int = Field(100, gt=0, description="SSE subscribers at once; one more gets 503")
    max_connections: int = Field(
        1000, gt=0, description="open connections and requests in progress at once; past it, 503 (uvicorn's)"
    )
    allowed_hosts: tuple[str, ...] = Field(
        ("127.0.0.1", "localhost", "[::1]"),
        description='the names a request\'s Host header may give (JSON list; ["*"]: any): a page in a'
        " browser cannot reach the service through a name that resolves to it (DNS rebinding)",
    )
    token: SecretStr | None = Field(
        None, description="when set, every request but /health needs Authorization: Bearer <token>"
    )
    max_url_bytes: int = Field(8_192, ge=256, description="a longer request target is refused (414)")
    max_header_bytes: int = Field(16_384, ge=1_024, description="longer request headers are refused (431)")
    request_head_timeout_s: float = Field(
        10,
        gt=0,
        description="a connection that has not sent a whole request head this long after it opened, or"
        " after its last answer, is refused (408) and closed",
    )
    pg_port: int = Field(
        6875,
        ge=0,
        lt=65536,
        description="the PostgreSQL wire protocol's port, read only (psql -h <host> -p <port>); 0: off",
    )
    pg_max_rows: int = Field(
        10_000,
        gt=0,
        description="a query over PostgreSQL's protocol that gives more rows is refused (COPY TO STDOUT"
        " and a cursor's FETCHes are not capped: their rows are written as they are read)",
    )
    pg_max_bytes: int = Field(
        33_554_432,
        ge=1_000_000,
        description="a query over PostgreSQL's protocol whose rows weigh more (their values as text) is"
        " refused as VIEWS_PG_MAX_ROWS refuses, whatever their number (COPY and cursors: not capped)",
    )
    pg_timeout_s: float = Field(
        5, gt=0, description="a query over PostgreSQL's protocol that runs longer is ended"
    )
    pg_stream_timeout_s: float = Field(
        300,
        gt=0,
        description="a COPY ... TO STDOUT or a cursor over a query reads its rows from one snapshot of the"
        " store, as the client takes them, with no cap on their number; one still open this long is"
        " ended (57014): the store's log is not checkpointed past an open snapshot",
    )
    pg_max_connections: int = Field(100, gt=0, description="PostgreSQL clients at once; one more is refused")
    log_level: str = "INFO"

    @field_validator("state_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.absolute()

    def store_cache_kib(self) -> int:
        return -(-self.store_cache_bytes // 1024)

    def bounds(self) -> Bounds:
        return Bounds(self.max_url_bytes, self.max_header_bytes, self.request_head_timeout_s)

    def access(self) -> Access:
        hosts = (
            None if "*" in self.allowed_hosts else frozenset(h.lower().encode() for h in self.allowed_hosts)
        )
        token = self.token.get_secret_value().encode() if self.token is not None else None
        return Access(hosts, token)

    def pg(self) -> PgSettings:
        token = self.token.get_secret_value().encode() if self.token is not None else None
        return PgSettings(
            self.host,
            self.pg_port,
            self.pg_max_connections,
            self.request_head_timeout_s,
            token,
            self.pg_stream_timeout_s,
        )

    def consumer_config(self) -> dict[str, str | int | bool]:
        """Committed records only: the views job writes rows and markers in transactions."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": "views-api",  # offsets are never committed: the store keeps its own
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **prefetch_config(self.fetch_queue_bytes),
            **self.kafka_extra,
        }

    @staticmethod
    def view_name(topic: str) -> str:
        return topic.rsplit(".", 1)[-1]
