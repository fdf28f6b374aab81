"""Settings every service shares: Kafka, batching, retries, metrics. Each service subclasses
`ServiceSettings` with its own prefix (SLACK_, ES_SINK_, S3_SINK_) and adds its sink's settings.

Read once at start from the environment, or from the file named by <PREFIX>ENV_FILE (lines
NAME=value, the same names). `load_settings` turns a bad value into a ConfigError naming the
variable.
"""

from pathlib import Path

from pydantic import Field

from foundation.kafka_record import prefetch_config
from foundation.settings import Settings

__all__ = ["ServiceSettings"]


class ServiceSettings(Settings):
    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str = Field("", description="consumer group; each service has its own default")
    input_topics: tuple[str, ...] = ()
    dlq_topic: str = ""
    kafka_extra: dict[str, str] = Field(
        default_factory=dict, description="extra librdkafka settings (JSON), e.g. security.protocol"
    )
    batch_max_records: int = Field(1000, gt=0, description="hand the sink a batch at this many records")
    batch_max_bytes: int = Field(
        16 * 1024 * 1024,
        gt=0,
        description="... or at this many bytes of keys and values (a bigger record goes alone)",
    )
    fetch_queue_bytes: int = Field(
        8_000_000,
        ge=1024,
        description="records fetched ahead of the batch at hand, at most this many bytes (librdkafka's"
        " queued.max.messages.kbytes, overshot by one fetch; its own default holds up to 64 MiB)",
    )
    batch_max_wait_ms: int = Field(1000, gt=0, description="... or when the oldest record waited this long")
    retry_initial_ms: int = Field(500, gt=0, description="first pause after the downstream failed")
    retry_max_ms: int = Field(30_000, gt=0, description="longest pause between retries (capped backoff)")
    rejoin_timeout_s: float = Field(
        120.0,
        gt=0,
        description="a consumer left without a group assignment this long is replaced by a new one",
    )
    session_timeout_ms: int = Field(
        10_000,
        ge=6_000,
        le=300_000,
        description="a member of the consumer group not heard from this long loses its partitions to"
        " the others (a killed instance's partitions resume this soon); heartbeats every third of it",
    )
    stall_timeout_s: float = Field(
        300.0,
        gt=0,
        description="a consumer loop that has not come back from a call this long ends the service"
        " with exit code 1, for its supervisor to restart it (like max.poll.interval.ms)",
    )
    metrics_file: Path | None = Field(None, description="JSON file with the service's figures, rewritten")
    metrics_interval_s: float = Field(10.0, gt=0, description="log a progress line this often")
    metrics_port: int = Field(
        0, ge=0, le=65535, description="serve Prometheus metrics at http://<host>:<port>/metrics (0: off)"
    )
    metrics_host: str = Field("127.0.0.1", description="address of the Prometheus endpoint")
    log_level: str = "INFO"

    def consumer_config(self) -> dict[str, str | int | bool]:
        """librdkafka settings of the input consumer: committed data only, manual commits."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "max.poll.interval.ms": 300_000,
            "session.timeout.ms": self.session_timeout_ms,
            "heartbeat.interval.ms": self.session_timeout_ms // 3,
            **prefetch_config(self.fetch_queue_bytes),
            **self.kafka_extra,
        }

    def producer_config(self) -> dict[str, str | int | bool]:
        """librdkafka settings of the dead-letter producer: idempotent, every replica confirms."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            **self.kafka_extra,
        }
