"""Is each component usable, not merely started? One check per component.

Each check returns a short detail on success and raises (any exception) when not usable.
"""

import base64
import json
import urllib.request
from collections.abc import Callable
from typing import Any

import boto3
import pymysql
from botocore.config import Config
from confluent_kafka.admin import AdminClient

from foundation import customer_db
from infra.stack import es_security
from infra.stack.components import spark_ports
from infra.stack.kafka_security import admin_config
from infra.stack.secrets import CONNECT_REST_USER, CONNECT_SECRET
from infra.stack.settings import StackSettings


def http_json(
    method: str, url: str, body: Any = None, timeout: float = 5.0, auth: tuple[str, str] | None = None
) -> Any:
    """A JSON request; `auth`: HTTP basic credentials (user, password)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310 - http URLs from settings
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - http URLs from settings
        raw = resp.read()
    return json.loads(raw) if raw else None


def s3_client(settings: StackSettings, secrets: dict[str, str]) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        aws_access_key_id=secrets["S3_ACCESS_KEY"],
        aws_secret_access_key=secrets["S3_SECRET_KEY"],
        region_name=settings.s3_region,
        config=Config(connect_timeout=3, read_timeout=5, retries={"max_attempts": 1}),
    )


def check_kafka(settings: StackSettings, secrets: dict[str, str]) -> str:
    # log_level 2: a broker that is still starting is this check's answer, not an error to print.
    admin = AdminClient({**admin_config(settings, secrets), "log_level": 2})
    meta = admin.list_topics(timeout=5)
    if not meta.brokers:
        raise RuntimeError("no broker in metadata")
    return f"{len(meta.brokers)} broker, {len(meta.topics)} topics"


def check_mariadb(settings: StackSettings, secrets: dict[str, str]) -> str:
    conn = pymysql.connect(
        host="127.0.0.1",
        port=settings.mariadb_port,
        user="ratings_app",
        password=secrets["APP_DB_PASSWORD"],
        database="demo",
        connect_timeout=3,
    )
    with conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM customers")
        (count,) = cur.fetchone() or (0,)
    return f"demo.customers has {count} rows"


def check_postgres(settings: StackSettings, secrets: dict[str, str]) -> str:
    conn = customer_db.connect(
        "postgres", "127.0.0.1", settings.postgres_port, "ratings_app", secrets["APP_DB_PASSWORD"], "demo", 3
    )
    with conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM customers")
        (count,) = cur.fetchone() or (0,)
    return f"customers has {count} rows"


def check_connect(settings: StackSettings, secrets: dict[str, str]) -> str:
    status = http_json(
        "GET",
        f"{settings.connect_url}/connectors/{settings.connector_name}/status",
        auth=(CONNECT_REST_USER, secrets[CONNECT_SECRET]),
    )
    states = [status["connector"]["state"], *(t["state"] for t in status["tasks"])]
    if not status["tasks"] or any(s != "RUNNING" for s in states):
        trace = next((t.get("trace", "") for t in status["tasks"] if t["state"] == "FAILED"), "")
        raise RuntimeError(f"connector {settings.connector_name}: {states} {trace[:400]}")
    return f"connector {settings.connector_name} RUNNING, {len(status['tasks'])} task(s)"


def check_elasticsearch(settings: StackSettings, secrets: dict[str, str]) -> str:
    secured = settings.kafka_security == "scram"
    auth = es_security.admin_auth(secrets) if secured else None
    health = http_json("GET", f"{settings.elasticsearch_url}/_cluster/health", auth=auth)
    if health["status"] not in {"green", "yellow"}:
        raise RuntimeError(f"cluster health {health['status']}")
    return f"cluster {health['status']}"


def check_s3(settings: StackSettings, secrets: dict[str, str]) -> str:
    names = [b["Name"] for b in s3_client(settings, secrets).list_buckets()["Buckets"]]
    wanted = [settings.s3_bucket, settings.s3_state_bucket]
    missing = [bucket for bucket in wanted if bucket not in names]
    if missing:
        raise RuntimeError(f"bucket {', '.join(missing)} missing (buckets: {names})")
    return f"buckets {', '.join(wanted)}"


def spark_ui_url(settings: StackSettings, port: int | None = None) -> str:
    return f"http://127.0.0.1:{port or settings.spark_ui_port}/json/"


def check_spark_master(settings: StackSettings, secrets: dict[str, str]) -> str:
    state = http_json("GET", spark_ui_url(settings))
    alive = state.get("aliveworkers", 0)
    if state.get("status") != "ALIVE" or alive < settings.spark_workers:
        raise RuntimeError(f"master {state.get('status')}, {alive} of {settings.spark_workers} workers alive")
    return f"{alive} workers, {state.get('cores', 0)} cores"


def check_spark_worker(settings: StackSettings, name: str) -> str:
    state = http_json("GET", spark_ui_url(settings, spark_ports(settings)[name]["ui"]))
    if not state.get("masterurl"):
        raise RuntimeError("not registered with the master")
    return f"{state.get('cores', 0)} cores, {len(state.get('executors', []))} executors"


def _worker_check(name: str) -> Callable[[StackSettings, dict[str, str]], str]:
    def check(settings: StackSettings, secrets: dict[str, str]) -> str:
        return check_spark_worker(settings, name)

    return check


CHECKS: dict[str, Callable[[StackSettings, dict[str, str]], str]] = {
    "mariadb": check_mariadb,
    "postgres": check_postgres,
    "kafka": check_kafka,
    "s3": check_s3,
    "elasticsearch": check_elasticsearch,
    "connect": check_connect,
    "spark-master": check_spark_master,
    **{f"spark-worker-{i}": _worker_check(f"spark-worker-{i}") for i in range(1, 9)},
}
