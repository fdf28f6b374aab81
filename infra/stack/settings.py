"""Settings of the local stack: where state and caches live, ports, memory. Read once, frozen.

Every field can be set from the environment with the prefix STACK_ (STACK_KAFKA_PORT=19092 ...).
"""

import hashlib
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parents[2]
INFRA_DIR = REPO_ROOT / "infra"
SERVICE_ROOT = Path("/var/lib/ratings-stack")  # run as root: the service user's component folders


def _default_cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ratings-stack"


class StackSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STACK_", frozen=True, extra="forbid")

    state_dir: Path = Field(
        Path(),
        description="data, logs and rendered configs; default: .state in the checkout (.state-postgres"
        " with STACK_SOURCE=postgres, so that both databases' stacks stay on disk)",
    )
    cache_dir: Path = Field(default_factory=_default_cache_dir, description="staged jars, reused by clones")
    java_home: Path | None = Field(None, description="JDK for every JVM component; default: the java on PATH")
    spark_java_home: Path | None = Field(
        None,
        description="JDK for the Spark jobs (stack.env's JAVA_HOME); default: the newest JDK 25 in "
        "/usr/lib/jvm at the version infra/versions.toml names or later, else the components' JDK",
    )
    service_user: str = Field(
        "ratings-stack",
        description="unprivileged user that runs every component when run as root",
    )
    service_dir: Path | None = Field(
        None,
        description="run as root: where the service user's components keep their data and "
        "configurations (it cannot enter the state folder); default: "
        f"{SERVICE_ROOT}/<a hash of the state folder>",
    )

    source: Literal["mariadb", "postgres"] = Field(
        "mariadb",
        description="the customer database Debezium captures: MariaDB (binlog) or PostgreSQL (logical"
        " decoding); a state folder keeps the one it was made with",
    )

    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    connect_port: int = 8083
    mariadb_port: int = 3306
    postgres_port: int = 5432
    elasticsearch_port: int = 9200
    elasticsearch_transport_port: int = 9300
    s3_port: int = 9000
    spark_master_port: int = 7077
    spark_ui_port: int = Field(8090, description="the Spark master's web UI; the workers' follow it")

    spark_cluster: bool = Field(
        True,
        description="a Spark standalone master and STACK_SPARK_WORKERS workers (stack.env's "
        "SPARK_MASTER_URL), for the jobs with ENRICH_MASTER=spark://...; idle until a job comes",
    )
    spark_workers: int = Field(2, ge=1, le=8, description="workers of the Spark cluster")
    spark_worker_cores: int = Field(1, ge=1, description="cores each worker offers")
    spark_worker_memory: str = Field("1g", description="memory each worker offers its executors")

    kafka_security: Literal["plaintext", "scram"] = Field(
        "plaintext",
        description="scram: SASL/SCRAM-SHA-512 and ACLs, one principal per program (passwords in "
        "secrets.env); a state folder keeps the mode it was made with",
    )

    kafka_heap: str = "768m"
    connect_heap: str = "768m"
    elasticsearch_heap: str = "768m"
    s3_heap: str = "256m"
    spark_daemon_heap: str = Field("256m", description="heap of the Spark master and each worker")
    spark_python: Path | None = Field(
        None,
        description="run as root: the interpreter of the Python environment the stack builds for the "
        "cluster's executors (stack.env's SPARK_EXECUTOR_PYTHON), of the venv's minor version, one "
        "the service user can run; default: the venv's own base interpreter if it can, else "
        "/usr/bin/python3.<minor>",
    )

    s3_bucket: str = "ratings-lake"
    s3_state_bucket: str = Field(
        "ratings-state", description="bucket for the Spark jobs' state when it is in S3 (s3a://)"
    )
    s3_region: str = "us-east-1"
    connector_name: str = Field(
        "", description="the Debezium connector (connect/<name>.json); default: <source>-customers"
    )
    start_timeout_s: float = Field(240.0, description="how long `up` waits for one component")

    @model_validator(mode="after")
    def _defaults_of_source(self) -> "StackSettings":
        if not self.connector_name:
            object.__setattr__(self, "connector_name", f"{self.source}-customers")
        if self.state_dir == Path():
            folder = ".state-postgres" if self.source == "postgres" else ".state"
            object.__setattr__(self, "state_dir", REPO_ROOT / folder)
        return self

    @property
    def database_port(self) -> int:
        """The customer database's SQL port."""
        return self.postgres_port if self.source == "postgres" else self.mariadb_port

    @property
    def service_state_dir(self) -> Path:
        """The folder of the components the service user runs: the state folder itself when not
        run as root, else one of their own, so the state folder stays the owner's alone (0700)
        and no folder above it has to let other users through."""
        if os.geteuid() != 0:
            return self.state_dir
        if self.service_dir is not None:
            return self.service_dir
        digest = hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:16]
        return SERVICE_ROOT / digest

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def connect_url(self) -> str:
        return f"http://127.0.0.1:{self.connect_port}"

    @property
    def elasticsearch_url(self) -> str:
        return f"http://127.0.0.1:{self.elasticsearch_port}"

    @property
    def s3_endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"
