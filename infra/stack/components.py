"""The components of the local stack: how each is prepared, started and named.

Config files in infra/ and connect/ are shared with docker-compose.yml; what only the local
stack needs (paths under the state folder, loopback listeners, ports, credentials) is added
here when the file is rendered into <state>/<component>/.
"""

import base64
import logging
import os
import pwd
import shutil
import subprocess
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from infra.stack import es_security, executor_python, kafka_security
from infra.stack.artifacts import Installed
from infra.stack.errors import ComponentFailed
from infra.stack.secrets import CONNECT_REST_USER, CONNECT_SECRET, SPARK_SECRET
from infra.stack.settings import INFRA_DIR, StackSettings

log = logging.getLogger("stack")


@dataclass(frozen=True)
class Component:
    """One supervised process of the stack."""

    name: str
    ports: dict[str, int]
    command: list[str]
    directory: Path
    environment: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    stop_wait_s: int = 30
    stop_signal: str = "TERM"

    def log_file(self, settings: StackSettings) -> Path:
        return settings.logs_dir / f"{self.name}.log"


def component_ports(settings: StackSettings) -> dict[str, dict[str, int]]:
    """Every component's ports by purpose, in start order: Connect needs Kafka and the customer
    database (MariaDB, or PostgreSQL with STACK_SOURCE=postgres)."""
    database = {"postgres": {"sql": settings.postgres_port}} if settings.source == "postgres" else {}
    return {
        **(database or {"mariadb": {"sql": settings.mariadb_port}}),
        "kafka": {"broker": settings.kafka_port, "controller": settings.kafka_controller_port},
        "s3": {"s3": settings.s3_port},
        "elasticsearch": {
            "http": settings.elasticsearch_port,
            "transport": settings.elasticsearch_transport_port,
        },
        "connect": {"rest": settings.connect_port},
        **(spark_ports(settings) if settings.spark_cluster else {}),
    }


def spark_ports(settings: StackSettings) -> dict[str, dict[str, int]]:
    master = {"spark-master": {"spark": settings.spark_master_port, "ui": settings.spark_ui_port}}
    workers = {f"spark-worker-{i}": {"ui": settings.spark_ui_port + i} for i in spark_worker_ids(settings)}
    return master | workers


def spark_worker_ids(settings: StackSettings) -> range:
    return range(1, settings.spark_workers + 1)


def spark_master_url(settings: StackSettings) -> str:
    return f"spark://127.0.0.1:{settings.spark_master_port}"


def render_properties(base: Path, overrides: dict[str, str]) -> str:
    """A shared .properties file with the local stack's settings appended (later keys win)."""
    lines = [f"{key}={value}" for key, value in overrides.items()]
    return base.read_text() + "\n# --- local stack (infra.stack) ---\n" + "\n".join(lines) + "\n"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(text)


def os_user() -> str:
    """The OS user running the stack tool: the databases' local administrator."""
    return pwd.getpwuid(os.geteuid()).pw_name


def _service_user(settings: StackSettings) -> str | None:
    return settings.service_user if os.geteuid() == 0 else None


def _chown_tree(path: Path, user: str | None) -> None:
    """The component's folder to the service user, and to it alone."""
    if user is not None:
        subprocess.run(["chown", "-R", f"{user}:", str(path)], check=True)
        path.chmod(0o700)


def _readable(settings: StackSettings, source: Path, user: str | None) -> Path:
    """The installed folder `source` where `user` can read it. The download cache lives in the
    home of the user who runs `make up` (root's is closed to others), so for the service user
    its files are copied once into the service folder, under the cache folder's own name (it
    names the version); the cache itself is never handed to the service user."""
    if user is None:
        return source
    target = settings.service_state_dir / "lib" / _copy_name(source)
    if not target.exists():
        partial = target.with_name(target.name + ".copying")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(source, partial)
        for folder, _, files in os.walk(partial):  # the cache's own modes may be the owner's alone
            Path(folder).chmod(0o755)
            for name in files:
                Path(folder, name).chmod(0o644)
        partial.rename(target)
        target.parent.chmod(0o755)
    return target


def _copy_name(source: Path) -> str:
    return f"{source.parent.name}-{source.name}"


def prune_copies(settings: StackSettings, installed: Installed) -> list[str]:
    """Removes the service folder's copies of installed folders that the stack no longer uses
    (the versions before a version change, and copies cut short), and says which."""
    lib = settings.service_state_dir / "lib"
    if not lib.is_dir():
        return []
    used = {_copy_name(p) for p in (installed.kafka_lib, installed.connect_plugins, installed.s3proxy_lib)}
    if settings.spark_cluster:  # the cluster's SPARK_HOME and its executors' Python
        used |= {executor_python.spark_home_name(), executor_python.ENVIRONMENT}
    removed = sorted(entry.name for entry in lib.iterdir() if entry.name not in used)
    for name in removed:  # a running component keeps the jars it has open
        shutil.rmtree(lib / name, ignore_errors=True)
    return removed


def _own_copy(state: Path, shared: Path) -> Path:
    """A file of the checkout the component reads (its logging configuration), copied into its
    folder: the service user may not be able to enter the checkout."""
    copy = state / shared.name
    state.mkdir(parents=True, exist_ok=True)
    shutil.copy(shared, copy)
    return copy


def _jvm(installed: Installed, heap: str, *props: str) -> list[str]:
    return [str(installed.java), f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", *props]


def kafka_cluster_id() -> str:
    """A random cluster id as Kafka writes them (URL-safe base64 of a UUID), never starting with
    '-': the storage tool would read such an id as an option and refuse to format (about one
    fresh state in 64 failed `make up` that way). Kafka's own Uuid.randomUuid skips them too."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _kafka_mode(settings: StackSettings, state: Path) -> None:
    """A state folder keeps the security mode its Kafka was formatted with: the secured mode's
    admin credential is written at format time, and a plaintext node has none."""
    marker = state / "security"
    if (state / "data" / "meta.properties").exists():
        made = marker.read_text().strip() if marker.exists() else "plaintext"
        if made != settings.kafka_security:
            raise ComponentFailed(
                f"Kafka's data in {state} was made with STACK_KAFKA_SECURITY={made}, "
                f"not {settings.kafka_security}",
                hint="use another STACK_STATE_DIR for the other mode, or `make clean` to start over",
            )
    else:
        _write_private(marker, settings.kafka_security + "\n")


def kafka(settings: StackSettings, installed: Installed, secrets: dict[str, str]) -> Component:
    state = settings.service_state_dir / "kafka"
    user = _service_user(settings)
    config = state / "server.properties"
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{settings.kafka_port},"
        f"CONTROLLER://127.0.0.1:{settings.kafka_controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{settings.kafka_port}",
        "controller.quorum.voters": f"1@127.0.0.1:{settings.kafka_controller_port}",
        "log.dirs": str(state / "data"),
    }
    secured = settings.kafka_security == "scram"
    if secured:
        ports = (settings.kafka_port, settings.kafka_controller_port)
        overrides |= kafka_security.broker_properties(*ports, secrets)
    _kafka_mode(settings, state)
    _write_private(config, render_properties(INFRA_DIR / "kafka" / "server.properties", overrides))
    classpath = f"{_readable(settings, installed.kafka_lib, user)}/*"
    log4j = f"-Dlog4j2.configurationFile={_own_copy(state, INFRA_DIR / 'kafka' / 'log4j2.xml')}"
    if not (state / "data" / "meta.properties").exists():
        cluster_id = kafka_cluster_id()
        proc = subprocess.run(
            [
                str(installed.java),
                log4j,
                "-cp",
                classpath,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(config),
                *(kafka_security.format_arguments(secrets) if secured else []),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ComponentFailed(f"formatting Kafka's storage failed:\n{proc.stdout}{proc.stderr}")
    _chown_tree(state, user)
    return Component(
        name="kafka",
        ports=component_ports(settings)["kafka"],
        command=[*_jvm(installed, settings.kafka_heap, log4j), "-cp", classpath, "kafka.Kafka", str(config)],
        directory=state,
        user=user,
        stop_wait_s=60,
    )


ALLOWLIST = "config.providers.env.param.allowlist.pattern"


def _allowlist(properties: Path) -> str:
    """The environment variables Connect's env provider may resolve, as the shared file names them."""
    for line in properties.read_text().splitlines():
        if line.startswith(ALLOWLIST + "="):
            return line.split("=", 1)[1]
    raise ComponentFailed(f"{properties} has no {ALLOWLIST}")


BASIC_AUTH_EXTENSION = "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension"
PROPERTY_FILE_LOGIN = "org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule"


def connect(settings: StackSettings, installed: Installed, secrets: dict[str, str]) -> Component:
    state = settings.service_state_dir / "connect"
    user = _service_user(settings)
    shared = INFRA_DIR / "connect" / "connect-distributed.properties"
    config = state / "worker.properties"
    overrides = {
        "bootstrap.servers": settings.bootstrap_servers,
        "listeners": f"http://127.0.0.1:{settings.connect_port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(settings.connect_port),
        "plugin.path": str(_readable(settings, installed.connect_plugins, user)),
    }
    environment = {
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "MARIADB_HOST": "127.0.0.1",
        "MARIADB_PORT": str(settings.mariadb_port),
        "POSTGRES_HOST": "127.0.0.1",
        "POSTGRES_PORT": str(settings.postgres_port),
        "DEBEZIUM_DB_PASSWORD": secrets["DEBEZIUM_DB_PASSWORD"],
    }
    if settings.kafka_security == "scram":
        # The worker, and the producers, consumers and admin clients it makes for connectors,
        # sign in as `connect`; Debezium's schema history reads the same line from the environment.
        password = secrets[kafka_security.password_name("connect")]
        signed_in = kafka_security.java_client_config("connect", password)
        for prefix in ("", "producer.", "consumer.", "admin."):
            overrides |= {prefix + key: value for key, value in signed_in.items()}
        variable = kafka_security.CONNECT_JAAS_VARIABLE
        environment[variable] = signed_in["sasl.jaas.config"]
        overrides[ALLOWLIST] = _allowlist(shared).replace(")$", f"|{variable})$")
    # The REST API takes one user's HTTP basic credentials (Kafka's basic-auth extension): no
    # other local user can delete the connector, or register one that resolves the database
    # password from the worker's environment and sends it elsewhere.
    overrides["rest.extension.classes"] = BASIC_AUTH_EXTENSION
    users, jaas = state / "rest-users.properties", state / "rest-jaas.conf"
    _write_private(users, f"{CONNECT_REST_USER}: {secrets[CONNECT_SECRET]}\n")
    _write_private(jaas, f'KafkaConnect {{\n  {PROPERTY_FILE_LOGIN} required\n  file="{users}";\n}};\n')
    _write_private(config, render_properties(shared, overrides))
    log4j = f"-Dlog4j2.configurationFile={_own_copy(state, INFRA_DIR / 'kafka' / 'log4j2.xml')}"
    _chown_tree(state, user)
    return Component(
        name="connect",
        ports=component_ports(settings)["connect"],
        command=[
            *_jvm(installed, settings.connect_heap, log4j, f"-Djava.security.auth.login.config={jaas}"),
            "-cp",
            f"{_readable(settings, installed.kafka_lib, user)}/*",
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(config),
        ],
        directory=state,
        environment=environment,  # resolved by the worker's EnvVarConfigProvider in connect/*.json
        user=user,
        stop_wait_s=60,
    )


def mariadb(settings: StackSettings) -> Component:
    state = settings.service_state_dir / "mariadb"
    data = state / "data"
    user = _service_user(settings)
    if not (data / "mysql").exists():
        data.mkdir(parents=True, exist_ok=True)
        _chown_tree(state, user)
        cmd = [
            "mariadb-install-db",
            "--no-defaults",
            f"--datadir={data}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ]
        if user:
            cmd.append(f"--user={user}")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ComponentFailed(f"initialising MariaDB's data folder failed:\n{proc.stdout}{proc.stderr}")
    _chown_tree(state, user)
    command = [
        "/usr/sbin/mariadbd",
        f"--defaults-file={INFRA_DIR / 'mariadb' / 'my.cnf'}",
        f"--datadir={data}",
        f"--socket={mariadb_socket(settings)}",
        f"--pid-file={state / 'mariadb.pid'}",
        f"--port={settings.mariadb_port}",
        "--bind-address=127.0.0.1",
    ]
    if user:
        command.append(f"--user={user}")
    return Component(
        name="mariadb",
        ports=component_ports(settings)["mariadb"],
        command=command,
        directory=state,
        stop_wait_s=60,
    )


def mariadb_socket(settings: StackSettings) -> Path:
    return settings.service_state_dir / "mariadb" / "mariadb.sock"


POSTGRES_ADMIN = "postgres"  # the cluster's superuser, reached over the socket by peer authentication


def postgres_socket_dir(settings: StackSettings) -> Path:
    return settings.service_state_dir / "postgres"


def postgres(settings: StackSettings, installed: Installed) -> Component:
    """PostgreSQL with logical decoding, run as the service user (it refuses root). Its
    administrator is reached over the socket only, by the OS users `make up` runs as and the
    service user (peer authentication, pg_ident.conf); the application and Debezium sign in over
    loopback TCP with passwords (pg_hba.conf)."""
    state = postgres_socket_dir(settings)
    data = state / "data"
    user = _service_user(settings)
    bin_dir = installed.postgres_bin
    if not (data / "PG_VERSION").exists():
        shutil.rmtree(data, ignore_errors=True)
        state.mkdir(parents=True, exist_ok=True)
        _chown_tree(state, user)
        cmd = [
            str(bin_dir / "initdb"),
            f"--pgdata={data}",
            f"--username={POSTGRES_ADMIN}",
            "--auth-local=peer",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
        ]
        proc = subprocess.run(
            ["runuser", "-u", user, "--", *cmd] if user else cmd, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise ComponentFailed(
                f"initialising PostgreSQL's data folder failed:\n{proc.stdout}{proc.stderr}"
            )
    shutil.copy(INFRA_DIR / "postgres" / "postgresql.conf", state / "postgresql.conf")
    shutil.copy(INFRA_DIR / "postgres" / "pg_hba.conf", state / "pg_hba.conf")
    admins = sorted({os_user(), *([user] if user else [])})
    (state / "pg_ident.conf").write_text(
        "# admin map: these OS users may sign in over the socket as the cluster's superuser\n"
        + "".join(f"admin  {name}  {POSTGRES_ADMIN}\n" for name in admins)
    )
    _chown_tree(state, user)
    data.chmod(0o700)
    return Component(
        name="postgres",
        ports=component_ports(settings)["postgres"],
        command=[
            str(bin_dir / "postgres"),
            "-D",
            str(data),
            "-c",
            f"config_file={state / 'postgresql.conf'}",
            "-c",
            f"hba_file={state / 'pg_hba.conf'}",
            "-c",
            f"ident_file={state / 'pg_ident.conf'}",
            "-c",
            f"port={settings.postgres_port}",
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={state}",
        ],
        directory=state,
        user=user,
        stop_wait_s=60,
        stop_signal="INT",  # fast shutdown: TERM would wait for Debezium's connections to end
    )


def elasticsearch(settings: StackSettings, installed: Installed, secrets: dict[str, str]) -> Component:
    state = settings.service_state_dir / "elasticsearch"
    home = state / "home"
    if not (home / "bin" / "elasticsearch").exists():
        _unzip_single_root(installed.elasticsearch_zip, home)
    # Rendered afresh each start: nothing a previous start wrote (keystore, certificates) lingers.
    conf = state / "config"
    shutil.rmtree(conf, ignore_errors=True)
    shutil.copytree(home / "config", conf)
    shutil.copy(INFRA_DIR / "elasticsearch" / "elasticsearch.yml", conf / "elasticsearch.yml")
    heap = settings.elasticsearch_heap
    (conf / "jvm.options.d").mkdir(exist_ok=True)
    (conf / "jvm.options.d" / "heap.options").write_text(f"-Xms{heap}\n-Xmx{heap}\n")
    secured = settings.kafka_security == "scram"
    if secured:  # the secured mode: basic authentication, a least-privilege user for the sink
        es_security.render(conf, secrets)
    for sub in ("data", "logs"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    user = _service_user(settings)
    _chown_tree(state, user)
    return Component(
        name="elasticsearch",
        ports=component_ports(settings)["elasticsearch"],
        command=[
            str(home / "bin" / "elasticsearch"),
            "-E",
            f"path.data={state / 'data'}",
            "-E",
            f"path.logs={state / 'logs'}",
            "-E",
            "network.host=127.0.0.1",
            "-E",
            f"http.port={settings.elasticsearch_port}",
            "-E",
            f"transport.port={settings.elasticsearch_transport_port}",
            *(es_security.node_arguments() if secured else []),
        ],
        directory=state,
        environment={"ES_JAVA_HOME": str(installed.java_home), "ES_PATH_CONF": str(conf)},
        user=user,
        stop_wait_s=60,
    )


def _unzip_single_root(archive: Path, target: Path) -> None:
    """Unpack a zip whose entries sit under one top folder into target, keeping file modes."""
    tmp = target.with_name(target.name + ".unpacking")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(tmp)
        for info in zf.infolist():
            mode = info.external_attr >> 16
            if mode:
                (tmp / info.filename).chmod(mode & 0o7777)
    (root,) = list(tmp.iterdir())
    root.rename(target)
    tmp.rmdir()


def s3(settings: StackSettings, installed: Installed, secrets: dict[str, str]) -> Component:
    state = settings.service_state_dir / "s3"
    user = _service_user(settings)
    (state / "data").mkdir(parents=True, exist_ok=True)
    config = state / "s3proxy.properties"
    overrides = {
        "s3proxy.endpoint": settings.s3_endpoint_url,
        "s3proxy.identity": secrets["S3_ACCESS_KEY"],
        "s3proxy.credential": secrets["S3_SECRET_KEY"],
        "jclouds.filesystem.basedir": str(state / "data"),
        "jclouds.region": settings.s3_region,
    }
    _write_private(config, render_properties(INFRA_DIR / "s3proxy" / "s3proxy.properties", overrides))
    logback = f"-Dlogback.configurationFile={_own_copy(state, INFRA_DIR / 's3proxy' / 'logback.xml')}"
    _chown_tree(state, user)
    return Component(
        name="s3",
        ports=component_ports(settings)["s3"],
        command=[
            *_jvm(installed, settings.s3_heap, logback),
            "-cp",
            f"{_readable(settings, installed.s3proxy_lib, user)}/*",
            "org.gaul.s3proxy.Main",
            "--properties",
            str(config),
        ],
        directory=state,
        user=user,
    )


def spark_cluster(settings: StackSettings, spark_java: Path, secret: str) -> list[Component]:
    """A Spark standalone master and its workers, from the pyspark package's own jars (the same
    release as the jobs' driver), on the Spark jobs' JDK at `spark_java`, bound to the loopback.
    A worker starts each executor as a JVM of its own, with the package as SPARK_HOME. Run as
    root, they run as the service user, from copies it can read (`executor_python`), so that an
    application's code never runs as root on the executors. The scale benchmark starts a
    cluster of its own from these, on other ports."""
    user = _service_user(settings)
    if user is not None:
        executor_python.environment(settings, user)
    return spark_daemons(settings, spark_java, secret, user)


def executor_python_path(settings: StackSettings) -> str:
    """stack.env's SPARK_EXECUTOR_PYTHON: the interpreter a job on the cluster names for its
    executors' Python workers; empty where they run as the job's user (its own interpreter)."""
    if not settings.spark_cluster or _service_user(settings) is None:
        return ""
    return str(executor_python.environment_dir(settings) / "bin" / "python")


def spark_conf_dir(settings: StackSettings) -> Path:
    """The cluster's SPARK_CONF_DIR: its spark-defaults.conf holds the shared secret. A job
    started with it (stack.env's SPARK_CONF_DIR) authenticates to the cluster; others are refused."""
    return settings.state_dir / "spark" / "conf"


def write_spark_defaults(settings: StackSettings, secret: str) -> Path:
    """`spark_conf_dir`'s spark-defaults.conf (0600, in a 0700 folder): authentication on
    (`spark.authenticate`, the secret from the stack's secrets), and no application killed
    from the master's web UI (which takes no credentials)."""
    folder = spark_conf_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    path = folder / "spark-defaults.conf"
    _write_private(
        path,
        "# Written by infra.stack: the local cluster's shared secret. Do not commit.\n"
        "spark.authenticate true\n"
        f"spark.authenticate.secret {secret}\n"
        "spark.ui.killEnabled false\n",
    )
    return path


def spark_daemons(
    settings: StackSettings, spark_java: Path, secret: str, user: str | None = None
) -> list[Component]:
    """The master and workers of `spark_cluster` on the JDK at `spark_java`, authenticating with
    `secret`: the properties file of `write_spark_defaults`, so the secret is on no command line.
    With a `user`, they run as it, in its folder, with a copy of the properties file it alone
    reads."""
    from infra.stack.artifacts import pyspark_jars_dir  # noqa: PLC0415 - imports pyspark

    defaults = write_spark_defaults(settings, secret)
    if user is None:
        home = pyspark_jars_dir().parent
        state = settings.state_dir / "spark"
    else:
        home = executor_python.spark_home(settings)
        state = settings.service_state_dir / "spark"
        (state / "conf").mkdir(parents=True, exist_ok=True)
        defaults = Path(shutil.copy(defaults, state / "conf" / defaults.name))
    jars = home / "jars"
    java = str(spark_java / "bin" / "java")
    environment = {
        "SPARK_HOME": str(home),
        "JAVA_HOME": str(spark_java),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(state / "tmp"),
        # The launcher that builds an executor's command looks for a source build's folders
        # to learn the Scala version, unless it is told (the package's jars are Scala 2.13).
        "SPARK_SCALA_VERSION": "2.13",
    }
    ports = spark_ports(settings)

    def daemon(name: str, main: str, *args: str, props: tuple[str, ...] = ()) -> Component:
        (state / name).mkdir(parents=True, exist_ok=True)
        command = [java, f"-Xmx{settings.spark_daemon_heap}", *props, "-cp", f"{jars}/*", main, *args]
        return Component(
            name=name,
            ports=ports[name],
            command=command,
            directory=state / name,
            environment=environment,
            user=user,
        )

    master = daemon(
        "spark-master",
        "org.apache.spark.deploy.master.Master",
        "--properties-file",
        str(defaults),
        "--host",
        "127.0.0.1",
        "--port",
        str(settings.spark_master_port),
        "--webui-port",
        str(settings.spark_ui_port),
    )
    # Each application's executors get the jars it names copied into the worker's folder (35 MB
    # here): a finished application's folder is removed an hour after it ends.
    cleanup = [
        "-Dspark.worker.cleanup.enabled=true",
        "-Dspark.worker.cleanup.interval=600",
        "-Dspark.worker.cleanup.appDataTtl=3600",
    ]
    # Each worker, and so its executors, on a loopback address of its own (127.0.0.<i>): to
    # Spark they are hosts apart, as on a real cluster. A speculative copy of a task is only
    # ever launched on another host than the one that runs it, so with one address for all
    # there is no speculation. Their web UIs stay on 127.0.0.1 (SPARK_LOCAL_IP).
    workers = [
        daemon(
            f"spark-worker-{i}",
            "org.apache.spark.deploy.worker.Worker",
            "--properties-file",
            str(defaults),
            "--host",
            f"127.0.0.{i}",
            "--cores",
            str(settings.spark_worker_cores),
            "--memory",
            settings.spark_worker_memory,
            "--work-dir",
            str(state / f"spark-worker-{i}" / "work"),
            "--webui-port",
            str(ports[f"spark-worker-{i}"]["ui"]),
            spark_master_url(settings),
            props=tuple(cleanup),
        )
        for i in spark_worker_ids(settings)
    ]
    (state / "tmp").mkdir(parents=True, exist_ok=True)
    _chown_tree(state, user)
    return [master, *workers]


def prepare_components(
    settings: StackSettings, installed: Installed, secrets: dict[str, str]
) -> list[Component]:
    """Render configs and initialise data folders (first run only); the components in start order."""
    database = postgres(settings, installed) if settings.source == "postgres" else mariadb(settings)
    made = [
        database,
        kafka(settings, installed, secrets),
        s3(settings, installed, secrets),
        elasticsearch(settings, installed, secrets),
        connect(settings, installed, secrets),
        *(
            spark_cluster(settings, installed.spark_java, secrets[SPARK_SECRET])
            if settings.spark_cluster
            else []
        ),
    ]
    if _service_user(settings) is not None:  # copies are made for the service user alone
        for name in prune_copies(settings, installed):
            log.info("removed %s from the service folder: no component uses it now", name)
    return made
