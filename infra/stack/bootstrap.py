"""What makes a started component usable by the product: schema and users, topics, the
connector, the bucket. Every step is idempotent, so `up` runs them every time."""

import json
import logging
import re
import string
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from infra.stack import kafka_security
from infra.stack.components import POSTGRES_ADMIN, mariadb_socket, os_user, postgres_socket_dir
from infra.stack.errors import ComponentFailed
from infra.stack.health import http_json, s3_client
from infra.stack.kafka_security import admin_config
from infra.stack.secrets import connect_rest_auth
from infra.stack.settings import INFRA_DIR, REPO_ROOT, StackSettings

log = logging.getLogger("stack")
TOPICS_FILE = INFRA_DIR / "kafka" / "topics.txt"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


def read_topics(path: Path = TOPICS_FILE) -> list[TopicSpec]:
    """infra/kafka/topics.txt: `name partitions key=value,...` per line (`-` for no config)."""
    specs = []
    for number, raw_line in enumerate(path.read_text().splitlines(), start=1):
        line = raw_line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3:
            raise ValueError(f"{path}:{number}: expected `name partitions config`, got {line!r}")
        name, partitions, raw = parts
        config = dict(kv.split("=", 1) for kv in raw.split(",")) if raw != "-" else {}
        specs.append(TopicSpec(name, int(partitions), config))
    return specs


def create_topics(settings: StackSettings, secrets: dict[str, str]) -> None:
    admin = AdminClient(admin_config(settings, secrets))
    existing = set(admin.list_topics(timeout=10).topics)
    topics = read_topics()
    _align_configs(admin, [t for t in topics if t.name in existing and t.config])
    wanted = [t for t in topics if t.name not in existing]
    if not wanted:
        return
    futures = admin.create_topics(
        [NewTopic(t.name, num_partitions=t.partitions, replication_factor=1, config=t.config) for t in wanted]
    )
    for name, future in futures.items():
        future.result(timeout=30)
        log.info("created topic %s", name)


def _align_configs(admin: AdminClient, topics: list[TopicSpec]) -> None:
    """Topics made by an earlier `make up` take the configs topics.txt gives them now (set, one
    key at a time: what the file does not name is left as it is)."""
    if not topics:
        return
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            t.name,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in t.config.items()
            ],
        )
        for t in topics
    ]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(timeout=30)


def bootstrap_mariadb(settings: StackSettings, secrets: dict[str, str]) -> None:
    """Schema and least-privilege users, applied as the database's local admin over its socket."""
    users = string.Template((INFRA_DIR / "mariadb" / "init" / "02-users.sql.tmpl").read_text())
    sql = (INFRA_DIR / "mariadb" / "init" / "01-schema.sql").read_text() + "\n" + users.substitute(secrets)
    proc = subprocess.run(
        ["mariadb", f"--socket={mariadb_socket(settings)}", "-u", os_user(), "--batch"],
        input=sql,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ComponentFailed(f"applying the MariaDB schema and users failed: {proc.stderr.strip()}")


def postgres_sql(settings: StackSettings, sql: str, database: str = "demo") -> str:
    """As PostgreSQL's administrator over its socket (peer authentication); the output, tuples
    only. Raises with the client's message when it fails."""
    proc = subprocess.run(
        [
            "psql",
            "-h",
            str(postgres_socket_dir(settings)),
            "-p",
            str(settings.postgres_port),
            "-U",
            POSTGRES_ADMIN,
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-X",
            "-q",
            "-t",
            "-A",
        ],
        input=sql,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or "psql failed")
    return proc.stdout


def bootstrap_postgres(settings: StackSettings, secrets: dict[str, str]) -> None:
    """The database, schema, publication and least-privilege users, as the administrator."""
    try:
        if not postgres_sql(settings, "SELECT 1 FROM pg_database WHERE datname = 'demo'", "postgres").strip():
            postgres_sql(settings, "CREATE DATABASE demo", "postgres")
        init = INFRA_DIR / "postgres" / "init"
        # ${NAME} placeholders only: the SQL's own dollar quotes stay as they are.
        users = re.sub(
            r"\$\{([A-Z_]+)\}", lambda m: secrets[m.group(1)], (init / "02-users.sql.tmpl").read_text()
        )
        postgres_sql(settings, (init / "01-schema.sql").read_text() + "\n" + users)
    except RuntimeError as err:
        raise ComponentFailed(f"applying the PostgreSQL schema and users failed: {err}") from err


def bootstrap_database(settings: StackSettings, secrets: dict[str, str]) -> None:
    if settings.source == "postgres":
        bootstrap_postgres(settings, secrets)
    else:
        bootstrap_mariadb(settings, secrets)


def check_database_socket(settings: StackSettings) -> None:
    """Raises until the local admin can run a query over the customer database's socket."""
    if settings.source == "postgres":
        postgres_sql(settings, "SELECT 1", "postgres")
    else:
        check_mariadb_socket(settings)


def check_mariadb_socket(settings: StackSettings) -> None:
    """Raises until the local admin can run a query over the server's socket."""
    admin_sql(settings, "SELECT 1")


def ensure_principals(settings: StackSettings, secrets: dict[str, str]) -> None:
    """The secured mode's per-program credentials and ACLs (nothing in plaintext mode)."""
    if settings.kafka_security == "scram":
        kafka_security.ensure_principals(AdminClient(admin_config(settings, secrets)), secrets)
        log.info("Kafka principals and ACLs: %s", ", ".join(kafka_security.PRINCIPALS))


def connector_config(name: str, settings: StackSettings | None = None) -> dict[str, str]:
    """connect/<name>.json; in the secured mode with the schema history's clients signed in too
    (Debezium gives them no worker settings), their JAAS line from the worker's environment."""
    config = dict(json.loads((REPO_ROOT / "connect" / f"{name}.json").read_text()))
    if settings is not None and settings.kafka_security == "scram":
        config |= kafka_security.schema_history_config()
    return config


def register_connector(settings: StackSettings) -> None:
    """PUT /connectors/<name>/config creates or updates: safe to repeat."""
    http_json(
        "PUT",
        f"{settings.connect_url}/connectors/{settings.connector_name}/config",
        connector_config(settings.connector_name, settings),
        timeout=30,
        auth=connect_rest_auth(settings.state_dir),
    )


def admin_sql(settings: StackSettings, sql: str) -> None:
    """As the database's local admin, over its socket (DDL and server statements); raises with
    the client's message when it fails."""
    proc = subprocess.run(
        ["mariadb", f"--socket={mariadb_socket(settings)}", "-u", os_user(), "-e", sql],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or "mariadb client failed")


def _connector(settings: StackSettings, method: str, action: str = "") -> Any:
    url = f"{settings.connect_url}/connectors/{settings.connector_name}{action}"
    return http_json(method, url, timeout=30, auth=connect_rest_auth(settings.state_dir))


def wait_connector(settings: StackSettings, state: str, timeout_s: float = 120) -> None:
    """Until the connector and all its tasks are in `state` (a running one has at least one)."""
    deadline, seen = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        status = _connector(settings, "GET", "/status")
        seen = status["connector"]["state"], [t["state"] for t in status.get("tasks", [])]
        if seen[0] == state and all(t == state for t in seen[1]) and (state == "STOPPED" or seen[1]):
            return
        time.sleep(0.5)
    raise ComponentFailed(f"connector {settings.connector_name} not {state} within {timeout_s} s: {seen}")


def start_binlog_over(settings: StackSettings) -> None:
    """The database's binlog starts over and the connector snapshots the table again into the
    same CDC topic: the connector stopped, RESET MASTER, its offsets deleted, the connector
    resumed (with no offsets, snapshot.mode=initial snapshots first). What a restore or a
    failover to a server with other binlog positions looks like downstream."""
    log.info("the binlog starts over: RESET MASTER and a new snapshot by %s", settings.connector_name)
    _connector(settings, "PUT", "/stop")
    wait_connector(settings, "STOPPED")
    admin_sql(settings, "RESET MASTER")
    _connector(settings, "DELETE", "/offsets")
    _connector(settings, "PUT", "/resume")
    wait_connector(settings, "RUNNING")


def ensure_bucket(settings: StackSettings, secrets: dict[str, str]) -> None:
    """The lake's bucket, and the bucket for the Spark jobs' state in S3 (s3a://)."""
    client = s3_client(settings, secrets)
    have = [b["Name"] for b in client.list_buckets()["Buckets"]]
    for bucket in (settings.s3_bucket, settings.s3_state_bucket):
        if bucket not in have:
            client.create_bucket(Bucket=bucket)
            log.info("created bucket %s", bucket)
