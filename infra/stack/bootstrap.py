"""What makes a started component usable by the product: schema and users, topics, the
connector, the bucket. Every step is idempotent, so `up` runs them every time."""

import json
import logging
import os
import pwd
import string
import subprocess
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from infra.stack.components import mariadb_socket
from infra.stack.errors import ComponentFailed
from infra.stack.health import http_json, s3_client
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


def create_topics(settings: StackSettings) -> None:
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    existing = set(admin.list_topics(timeout=10).topics)
    wanted = [t for t in read_topics() if t.name not in existing]
    if not wanted:
        return
    futures = admin.create_topics(
        [NewTopic(t.name, num_partitions=t.partitions, replication_factor=1, config=t.config) for t in wanted]
    )
    for name, future in futures.items():
        future.result(timeout=30)
        log.info("created topic %s", name)


def os_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


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


def check_mariadb_socket(settings: StackSettings) -> None:
    """Raises until the local admin can run a query over the server's socket."""
    proc = subprocess.run(
        ["mariadb", f"--socket={mariadb_socket(settings)}", "-u", os_user(), "-e", "SELECT 1"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or "mariadb client failed")


def connector_config(name: str) -> dict[str, str]:
    return dict(json.loads((REPO_ROOT / "connect" / f"{name}.json").read_text()))


def register_connector(settings: StackSettings) -> None:
    """PUT /connectors/<name>/config creates or updates: safe to repeat."""
    http_json(
        "PUT",
        f"{settings.connect_url}/connectors/{settings.connector_name}/config",
        connector_config(settings.connector_name),
        timeout=30,
    )


def ensure_bucket(settings: StackSettings, secrets: dict[str, str]) -> None:
    client = s3_client(settings, secrets)
    if settings.s3_bucket not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=settings.s3_bucket)
        log.info("created bucket %s", settings.s3_bucket)
