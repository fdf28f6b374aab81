"""up, down, status, clean: the local stack's life cycle."""

import fcntl
import hashlib
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from infra.stack import bootstrap, es_security, kafka_security
from infra.stack.artifacts import Installed, install
from infra.stack.components import (
    component_ports,
    executor_python_path,
    prepare_components,
    spark_conf_dir,
    spark_master_url,
    spark_worker_ids,
)
from infra.stack.errors import ComponentFailed, PortInUse
from infra.stack.health import CHECKS, http_json, spark_ui_url
from infra.stack.secrets import (
    CONNECT_REST_USER,
    CONNECT_SECRET,
    SPARK_SECRET,
    ensure_secrets,
    read_env_file,
    write_env_file,
)
from infra.stack.settings import SERVICE_ROOT, StackSettings
from infra.stack.supervise import FAILED_STATES, Supervisor, render_config
from infra.stack.versions import load_versions

log = logging.getLogger("stack")
PORT_SETTING = {
    "sql": "STACK_MARIADB_PORT or STACK_POSTGRES_PORT",
    "broker": "STACK_KAFKA_PORT",
    "controller": "STACK_KAFKA_CONTROLLER_PORT",
    "s3": "STACK_S3_PORT",
    "http": "STACK_ELASTICSEARCH_PORT",
    "transport": "STACK_ELASTICSEARCH_TRANSPORT_PORT",
    "rest": "STACK_CONNECT_PORT",
    "spark": "STACK_SPARK_MASTER_PORT",
    "ui": "STACK_SPARK_UI_PORT",
}


def stack_env_path(settings: StackSettings) -> Path:
    return settings.state_dir / "stack.env"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def check_ports(settings: StackSettings, sup: Supervisor) -> None:
    """Every port of every component this `up` will start must be free."""
    daemon = sup.running()
    for name, ports in component_ports(settings).items():
        if daemon and sup.state(name) in {"RUNNING", "STARTING"}:
            continue
        for purpose, port in ports.items():
            if not _port_free(port):
                raise PortInUse(
                    f"port {port} ({name} {purpose}) is already in use by another process",
                    hint=f"find it with `ss -ltnp 'sport = :{port}'` and stop it, "
                    f"or choose another port with {PORT_SETTING[purpose]}=...",
                )


# What the service user runs when `make up` runs as root and an earlier state folder kept the
# folders of in itself: they move to the service folder. The Spark cluster, run by the service
# user too, is not moved: its old folders go, and the jobs' copy of its secret stays.
SERVICE_COMPONENTS = ("mariadb", "postgres", "elasticsearch", "kafka", "s3", "connect")


@contextmanager
def exclusive(settings: StackSettings) -> Iterator[None]:
    """One `up`, `down` or `clean` of a state folder at a time. Every `make` target that needs the
    stack runs `up` first, and two of them started together (`make views-job` and `make
    views-api` in two terminals) prepared the same components at once: one failed on the
    Elasticsearch configuration the other was writing. The second now waits for the first, then
    finds the stack up. The lock is a file in the cache folder named after the state folder, so
    that `clean` can remove the state folder while it holds it."""
    folder = settings.cache_dir / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(str(settings.state_dir.resolve()).encode()).hexdigest()[:16]
    with (folder / f"stack-{name}.lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(
                "another start or stop of the stack in %s is under way: waiting for it", settings.state_dir
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock goes with the file's closing


def private_state(settings: StackSettings) -> None:
    """Run as root: the state folder (secrets, logs, the Spark cluster's secret and folders) is
    root's alone, and the service user's components get a folder of their own that other users
    can pass through but not list. A service folder left from an earlier state folder at the
    same path is wiped with it, and one whose state folder is gone is removed."""
    fresh = not settings.state_dir.exists()
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    settings.state_dir.chmod(0o700)
    service = settings.service_state_dir
    if service == settings.state_dir:
        return
    if service.parent == SERVICE_ROOT:
        SERVICE_ROOT.mkdir(parents=True, exist_ok=True)
        SERVICE_ROOT.chmod(0o711)
        for other in SERVICE_ROOT.iterdir():
            owner = other / "state-folder"
            if other != service and owner.exists() and not Path(owner.read_text().strip()).exists():
                log.info("removing %s: its state folder %s is gone", other, owner.read_text().strip())
                shutil.rmtree(other, ignore_errors=True)
    if fresh and service.exists():
        log.info("removing %s: it belonged to an earlier state folder at %s", service, settings.state_dir)
        shutil.rmtree(service)
    service.mkdir(parents=True, exist_ok=True)
    service.chmod(0o711)
    (service / "state-folder").write_text(f"{settings.state_dir.resolve()}\n")
    if not Supervisor(settings).running():  # data of a stack from before this layout moves over
        for name in SERVICE_COMPONENTS:
            old = settings.state_dir / name
            if old.exists() and not (service / name).exists():
                log.info("moving %s to %s", old, service / name)
                shutil.move(old, service / name)
        # The Spark cluster ran as root from the state folder; its executors' folders are left.
        for old in sorted((settings.state_dir / "spark").glob("spark-*")):
            log.info("removing %s: the Spark cluster runs from %s now", old, service / "spark")
            shutil.rmtree(old, ignore_errors=True)


def log_tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _wait(
    settings: StackSettings, sup: Supervisor, name: str, probe: Callable[[], object], what: str = ""
) -> None:
    """Until probe() passes; fails at once when the process dies, with the tail of its log."""
    what = what or name
    started = time.monotonic()
    last_note = started
    last_error = ""
    log_file = settings.logs_dir / f"{name}.log"
    while True:
        state = sup.state(name)
        if state in FAILED_STATES:
            raise ComponentFailed(
                f"{name} died during start (supervisor state {state}); last lines of {log_file}:\n"
                + log_tail(log_file),
                hint=f"read {log_file}; `make status` shows every component",
            )
        try:
            probe()
            log.info("%s is ready (%.0f s)", what, time.monotonic() - started)
            return
        except Exception as exc:  # noqa: BLE001 - any failure of a probe means "not ready yet"
            last_error = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if now - started > settings.start_timeout_s:
            raise ComponentFailed(
                f"{name} did not become usable within {settings.start_timeout_s:.0f} s "
                f"({last_error}); last lines of {log_file}:\n{log_tail(log_file)}",
                hint="STACK_START_TIMEOUT_S raises the limit on a slow machine",
            )
        if now - last_note >= 10:
            log.info("waiting for %s (%.0f s): %s", what, now - started, last_error[:200])
            last_note = now
        time.sleep(1)


def _source_mode(settings: StackSettings) -> None:
    """A state folder keeps the customer database it was made with: its CDC topic, connector
    offsets and the jobs' state follow that database's history."""
    marker = settings.state_dir / "source"
    if not marker.exists():  # a new folder, or one made before the source was a setting (MariaDB)
        made_before = (settings.service_state_dir / "kafka" / "data" / "meta.properties").exists()
        marker.write_text(("mariadb" if made_before else settings.source) + "\n")
    made = marker.read_text().strip()
    if made != settings.source:
        raise ComponentFailed(
            f"the stack in {settings.state_dir} was made with STACK_SOURCE={made}, not {settings.source}",
            hint="use another STACK_STATE_DIR for the other database, or `make clean` to start over",
        )


def up(settings: StackSettings) -> None:
    started = time.monotonic()
    versions = load_versions()
    installed = install(settings, versions)
    if os.geteuid() == 0:
        private_state(settings)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    secured = settings.kafka_security == "scram"
    extra = (
        CONNECT_SECRET,
        *((*kafka_security.SECRET_NAMES, *es_security.SECRET_NAMES) if secured else ()),
        *((SPARK_SECRET,) if settings.spark_cluster else ()),
    )
    secrets = ensure_secrets(settings.state_dir, extra)
    _source_mode(settings)
    sup = Supervisor(settings)
    check_ports(settings, sup)
    components = prepare_components(settings, installed, secrets)
    sup.start_daemon(render_config(settings, components))

    def check(name: str) -> Callable[[], object]:
        return lambda: CHECKS[name](settings, secrets)

    # 1. Independent components start together.
    database = settings.source
    for name in (database, "kafka", "s3", "elasticsearch"):
        sup.start(name)
    # 2. The database: schema and users; Kafka: topics. Connect needs both.
    _wait(settings, sup, database, lambda: bootstrap.check_database_socket(settings))
    bootstrap.bootstrap_database(settings, secrets)
    _wait(settings, sup, "kafka", check("kafka"))
    bootstrap.create_topics(settings, secrets)
    bootstrap.ensure_principals(settings, secrets)
    # 3. Connect, then the connector, until it and its task are RUNNING.
    sup.start("connect")
    rest = f"{settings.connect_url}/connector-plugins"
    signed_in = (CONNECT_REST_USER, secrets[CONNECT_SECRET])
    _wait(
        settings,
        sup,
        "connect",
        lambda: http_json("GET", rest, auth=signed_in),
        what="Kafka Connect REST API",
    )
    bootstrap.register_connector(settings)
    _wait(settings, sup, "connect", check("connect"), what=f"connector {settings.connector_name}")
    # 4. The lake bucket, and Elasticsearch.
    _wait(settings, sup, "s3", lambda: bootstrap.ensure_bucket(settings, secrets))
    _wait(settings, sup, "elasticsearch", check("elasticsearch"))
    # 5. The Spark cluster: the master, then its workers, until every one has registered.
    if settings.spark_cluster:
        sup.start("spark-master")
        _wait(settings, sup, "spark-master", lambda: http_json("GET", spark_ui_url(settings)))
        for i in spark_worker_ids(settings):
            sup.start(f"spark-worker-{i}")
        _wait(settings, sup, "spark-master", check("spark-master"), what="the Spark workers")
    write_stack_env(settings, installed, secrets)
    log.info("stack is up in %.0f s; clients read %s", time.monotonic() - started, stack_env_path(settings))


def write_stack_env(settings: StackSettings, installed: Installed, secrets: dict[str, str]) -> None:
    """Everything a client (tests, jobs, services) needs to reach the stack, in one file."""
    values = {
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "CONNECT_URL": settings.connect_url,
        "CONNECT_USER": CONNECT_REST_USER,  # its REST API takes HTTP basic credentials
        "CONNECT_PASSWORD": secrets[CONNECT_SECRET],
        "CUSTOMER_DB": settings.source,
        "CUSTOMER_DB_HOST": "127.0.0.1",
        "CUSTOMER_DB_PORT": str(settings.database_port),
        "CUSTOMER_DB_NAME": "demo",
        "MARIADB_HOST": "127.0.0.1",
        "MARIADB_PORT": str(settings.mariadb_port),
        "MARIADB_DATABASE": "demo",
        "APP_DB_USER": "ratings_app",
        "APP_DB_PASSWORD": secrets["APP_DB_PASSWORD"],
        "ELASTICSEARCH_URL": settings.elasticsearch_url,
        "S3_ENDPOINT_URL": settings.s3_endpoint_url,
        "S3_BUCKET": settings.s3_bucket,
        "S3_STATE_BUCKET": settings.s3_state_bucket,
        "S3_REGION": settings.s3_region,
        "S3_ACCESS_KEY": secrets["S3_ACCESS_KEY"],
        "S3_SECRET_KEY": secrets["S3_SECRET_KEY"],
        "SPARK_JARS": ",".join(str(p) for p in installed.spark_jars()),
        "SPARK_MASTER_URL": spark_master_url(settings) if settings.spark_cluster else "",
        # A job on the cluster starts with it: spark-defaults.conf there holds the shared secret.
        "SPARK_CONF_DIR": str(spark_conf_dir(settings)) if settings.spark_cluster else "",
        "SPARK_MASTER_UI_URL": f"http://127.0.0.1:{settings.spark_ui_port}" if settings.spark_cluster else "",
        # Run as root, the cluster runs as the service user: its executors' Python workers run
        # this interpreter, which has the product and its packages (`executor_python`).
        "SPARK_EXECUTOR_PYTHON": executor_python_path(settings),
        "JAVA_HOME": str(installed.spark_java),  # who reads it starts a Spark job
        "KAFKA_SECURITY": settings.kafka_security,
    }
    if settings.kafka_security == "scram":  # each program's principal: kafka_security.PRINCIPALS
        values |= {name: secrets[name] for name in kafka_security.client_secret_names()}
        values |= {  # Elasticsearch's users: the stack's own tooling, and the sink's
            "ELASTICSEARCH_USER": es_security.ADMIN_USER,
            "ELASTICSEARCH_PASSWORD": secrets[es_security.ADMIN_SECRET],
            "ES_SINK_USERNAME": es_security.SINK_USER,
            "ES_SINK_PASSWORD": secrets[es_security.SINK_SECRET],
        }
    write_env_file(
        stack_env_path(settings), values, "Written by `make up`: how clients reach the local stack."
    )


def rss_kib(pid: int) -> int | None:
    """Resident memory of one process (not its children's); None once it is gone."""
    try:
        for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        total += rss_kib(current) or 0
    return total


def status(settings: StackSettings) -> bool:
    """Print one line per component; True when every component is healthy."""
    sup = Supervisor(settings)
    daemon = sup.running()
    secrets_file = settings.state_dir / "secrets.env"
    secrets = read_env_file(secrets_file) if secrets_file.exists() else {}
    rows = [("COMPONENT", "STATE", "HEALTH", "PORTS", "RSS", "LOG")]
    healthy = daemon
    for name, ports in component_ports(settings).items():
        info = sup.info(name) if daemon else None
        state = str(info["statename"]) if info else "STOPPED"
        detail, rss = "-", "-"
        if state == "RUNNING" and info:
            rss = f"{tree_rss_kib(int(info['pid'])) / 1024:.0f} MiB"
            try:
                detail = "ok: " + CHECKS[name](settings, secrets)
            except Exception as exc:  # noqa: BLE001 - shown to the user as the health
                detail = f"UNHEALTHY: {type(exc).__name__}: {str(exc)[:80]}"
                healthy = False
        else:
            healthy = False
        port_text = ",".join(f"{purpose}={port}" for purpose, port in ports.items())
        rows.append((name, state, detail, port_text, rss, str(settings.logs_dir / f"{name}.log")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1])
    if not daemon:
        print(f"supervisor: not running (state folder {settings.state_dir}); `make up` starts the stack")
    return healthy


def down(settings: StackSettings) -> None:
    sup = Supervisor(settings)
    if not sup.running():
        log.info("stack is not running")
        return
    for name in reversed(list(component_ports(settings))):
        if sup.info(name):
            log.info("stopping %s ...", name)
            sup.stop(name)
    sup.shutdown()
    log.info("stack stopped; data kept in %s", settings.state_dir)


def clean(settings: StackSettings) -> None:
    down(settings)
    service = settings.service_state_dir
    if service != settings.state_dir and service.exists():
        shutil.rmtree(service)
        log.info("removed %s", service)
    if settings.state_dir.exists():
        shutil.rmtree(settings.state_dir)
        log.info("removed %s (downloads stay cached in %s)", settings.state_dir, settings.cache_dir)
