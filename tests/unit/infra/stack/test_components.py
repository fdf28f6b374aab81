import base64
import re
import uuid
from pathlib import Path

import pytest

from infra.stack import components, executor_python
from infra.stack.artifacts import Installed
from infra.stack.components import component_ports, kafka_cluster_id, render_properties
from infra.stack.settings import INFRA_DIR, StackSettings


def test_overrides_are_appended_so_they_win(tmp_path: Path) -> None:
    base = tmp_path / "base.properties"
    base.write_text("a=1\nlisteners=shared\n")
    text = render_properties(base, {"listeners": "PLAINTEXT://127.0.0.1:1"})
    lines = [line for line in text.splitlines() if line.startswith("listeners=")]
    assert lines == ["listeners=shared", "listeners=PLAINTEXT://127.0.0.1:1"]


def test_every_port_is_distinct_and_settable(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path, kafka_port=19092)
    ports = [port for by_purpose in component_ports(settings).values() for port in by_purpose.values()]
    assert len(ports) == len(set(ports))
    assert component_ports(settings)["kafka"]["broker"] == 19092
    spark = ["spark-master", "spark-worker-1", "spark-worker-2"]
    assert list(component_ports(settings)) == ["mariadb", "kafka", "s3", "elasticsearch", "connect", *spark]
    off = StackSettings(state_dir=tmp_path, spark_cluster=False, spark_ui_port=18090)
    assert list(component_ports(off)) == ["mariadb", "kafka", "s3", "elasticsearch", "connect"]
    assert component_ports(StackSettings(state_dir=tmp_path, spark_ui_port=18090))["spark-worker-2"] == {
        "ui": 18092
    }


def test_a_kafka_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # The storage tool reads "-..." as an option. The first UUID here encodes to "-..."; the
    # second does not, and is the one returned.
    dashed, plain = uuid.UUID(bytes=b"\xfb" + bytes(15)), uuid.UUID(bytes=bytes(16))
    assert base64.urlsafe_b64encode(dashed.bytes).decode().startswith("-")
    draws = iter([dashed, plain])
    monkeypatch.setattr(components.uuid, "uuid4", lambda: next(draws))
    cluster_id = kafka_cluster_id()
    assert cluster_id == base64.urlsafe_b64encode(plain.bytes).decode().rstrip("=")
    assert len(cluster_id) == 22


def test_connect_resolves_only_the_environment_variables_the_connector_configs_name() -> None:
    repo = Path(__file__).resolve().parents[4]
    worker = (repo / "infra" / "connect" / "connect-distributed.properties").read_text()
    (pattern,) = re.findall(r"^config\.providers\.env\.param\.allowlist\.pattern=(.+)$", worker, re.M)
    configs = [f.read_text() for f in (repo / "connect").glob("*.json")]
    named = {name for text in configs for name in re.findall(r"\$\{env:(\w+)\}", text)}
    assert named, "the connector configs name their hosts and secrets as ${env:NAME}"
    assert {n for n in named if re.fullmatch(pattern, n)} == named
    for other in ("HOME", "PATH", "S3_SECRET_KEY", "APP_DB_PASSWORD", "MARIADB_HOST_X"):
        assert not re.fullmatch(pattern, other), other


def test_postgres_takes_mariadb_s_place_and_each_database_has_its_connector_and_state_folder() -> None:
    maria, pg = StackSettings(), StackSettings(source="postgres")
    assert list(component_ports(pg))[:5] == ["postgres", "kafka", "s3", "elasticsearch", "connect"]
    assert component_ports(pg)["postgres"] == {"sql": 5432}
    assert (maria.connector_name, pg.connector_name) == ("mariadb-customers", "postgres-customers")
    assert (maria.state_dir.name, pg.state_dir.name) == (".state", ".state-postgres")
    assert StackSettings(source="postgres", connector_name="mine").connector_name == "mine"
    assert pg.database_port == 5432 and maria.database_port == 3306


def test_postgres_runs_with_logical_decoding_on_loopback_and_its_admin_only_over_the_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = StackSettings(source="postgres", state_dir=tmp_path / "state", service_dir=tmp_path / "svc")
    data = components.postgres_socket_dir(settings) / "data"
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("15\n")  # initialised already: no initdb
    monkeypatch.setattr(components, "_chown_tree", lambda path, user: None)
    installed = Installed(Path("/jdk"), Path("k"), Path("s"), Path("j"), Path("p"), Path("e.zip"))
    component = components.postgres(settings, installed)
    command = " ".join(component.command)
    assert component.command[0] == str(installed.postgres_bin / "postgres")
    assert "listen_addresses=127.0.0.1" in command and "port=5432" in command
    assert component.stop_signal == "INT"
    folder = components.postgres_socket_dir(settings)
    conf = (folder / "postgresql.conf").read_text()
    assert re.search(r"^wal_level = logical$", conf, re.M)
    hba = [line.split() for line in (folder / "pg_hba.conf").read_text().splitlines() if line[:1] not in "#"]
    assert ["local", "all", "all", "peer", "map=admin"] in hba
    assert all(row[0] == "local" or (row[3] == "127.0.0.1/32" and row[4] == "scram-sha-256") for row in hba)
    ident = (folder / "pg_ident.conf").read_text()
    assert re.search(rf"^admin\s+{components.os_user()}\s+postgres$", ident, re.M)


def test_the_spark_daemons_authenticate_with_a_secret_on_no_command_line(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path)
    daemons = components.spark_daemons(settings, Path("/jdk"), "s3cr3t-value")
    defaults = components.spark_conf_dir(settings) / "spark-defaults.conf"
    assert defaults.stat().st_mode & 0o777 == 0o600
    assert defaults.parent.stat().st_mode & 0o777 == 0o700
    lines = defaults.read_text().splitlines()
    assert "spark.authenticate true" in lines and "spark.authenticate.secret s3cr3t-value" in lines
    assert [d.name for d in daemons] == ["spark-master", "spark-worker-1", "spark-worker-2"]
    for daemon in daemons:
        assert daemon.command[daemon.command.index("--properties-file") + 1] == str(defaults)
        assert not any("s3cr3t" in part for part in daemon.command)
        assert not any("s3cr3t" in value for value in daemon.environment.values())


def test_as_root_the_spark_daemons_run_as_the_service_user_from_its_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = StackSettings(state_dir=tmp_path / "state", service_dir=tmp_path / "svc")
    owned: list[tuple[Path, str | None]] = []
    monkeypatch.setattr(components, "_chown_tree", lambda path, user: owned.append((path, user)))
    daemons = components.spark_daemons(settings, Path("/jdk"), "s3cr3t-value", "svc-user")
    state = settings.service_state_dir / "spark"
    assert owned == [(state, "svc-user")]  # its folders, logs of executors and scratch are the user's
    home = settings.service_state_dir / "lib" / executor_python.spark_home_name()
    theirs = state / "conf" / "spark-defaults.conf"  # the user's copy of the secret, 0600
    assert theirs.stat().st_mode & 0o777 == 0o600
    assert theirs.read_text() == (components.spark_conf_dir(settings) / "spark-defaults.conf").read_text()
    for daemon in daemons:
        assert daemon.user == "svc-user"
        assert daemon.directory == state / daemon.name
        assert daemon.environment["SPARK_HOME"] == str(home)
        assert daemon.environment["SPARK_LOCAL_DIRS"] == str(state / "tmp")
        assert daemon.command[daemon.command.index("-cp") + 1] == f"{home}/jars/*"
        assert daemon.command[daemon.command.index("--properties-file") + 1] == str(theirs)
        assert str(settings.state_dir) not in " ".join(daemon.command)
    assert components.spark_daemons(settings, Path("/jdk"), "s3cr3t-value")[0].user is None  # not as root


def test_as_root_kafka_connect_and_s3_run_as_the_service_user_from_files_it_can_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = StackSettings(state_dir=tmp_path / "state", service_dir=tmp_path / "svc")
    cache = tmp_path / "home" / ".cache"
    libs = {name: cache / f"{name}-1.0" / "lib" for name in ("kafka", "s3proxy")}
    libs["plugins"] = cache / "debezium-1.0" / "plugins"
    for name, folder in libs.items():
        folder.mkdir(parents=True)
        (folder / f"{name}.jar").write_bytes(b"PK")
    installed = Installed(
        Path("/jdk"), libs["kafka"], libs["s3proxy"], Path("j"), libs["plugins"], Path("e.zip")
    )
    owned: list[tuple[Path, str | None]] = []
    monkeypatch.setattr(components, "_service_user", lambda s: "svc-user")
    monkeypatch.setattr(components, "_chown_tree", lambda path, user: owned.append((path, user)))
    kafka_data = settings.service_state_dir / "kafka" / "data"
    kafka_data.mkdir(parents=True)
    (kafka_data / "meta.properties").write_text("node.id=1\n")  # formatted already
    (settings.service_state_dir / "kafka" / "security").write_text("plaintext\n")
    secrets = {
        "DEBEZIUM_DB_PASSWORD": "d",
        "S3_ACCESS_KEY": "a",
        "S3_SECRET_KEY": "s",
        "CONNECT_REST_PASSWORD": "r",
    }
    made = [
        components.kafka(settings, installed, secrets),
        components.connect(settings, installed, secrets),
        components.s3(settings, installed, secrets),
    ]
    for component in made:
        assert component.user == "svc-user"
        assert component.directory == settings.service_state_dir / component.name
        assert (component.directory, "svc-user") in owned  # its folder, configs and data are the user's
        command = " ".join(component.command)
        assert str(cache) not in command and str(settings.state_dir) not in command
        assert str(INFRA_DIR) not in command  # the checkout may be closed to the service user
    lib = settings.service_state_dir / "lib"
    assert sorted(p.name for p in lib.iterdir()) == [
        "debezium-1.0-plugins",
        "kafka-1.0-lib",
        "s3proxy-1.0-lib",
    ]
    assert (lib / "kafka-1.0-lib" / "kafka.jar").read_bytes() == b"PK"
    assert f"{lib / 'kafka-1.0-lib'}/*" in made[0].command
    worker = (settings.service_state_dir / "connect" / "worker.properties").read_text()
    assert f"plugin.path={lib / 'debezium-1.0-plugins'}" in worker
    assert not settings.state_dir.exists() or not any(settings.state_dir.iterdir())


def test_copies_of_versions_no_component_uses_are_removed_from_the_service_folder(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path / "state", service_dir=tmp_path / "svc")
    cache = tmp_path / "cache"
    installed = Installed(
        Path("/jdk"),
        cache / "kafka-2.0" / "lib",
        cache / "s3proxy-1.0" / "lib",
        Path("j"),
        cache / "debezium-1.0" / "plugins",
        Path("e.zip"),
    )
    lib = settings.service_state_dir / "lib"
    for name in (
        "kafka-1.0-lib",
        "kafka-2.0-lib",
        "s3proxy-1.0-lib",
        "debezium-1.0-plugins",
        "kafka-2.0-lib.copying",
        "executor-python",  # the Spark cluster's, as long as there is one
        executor_python.spark_home_name(),
        "pyspark-0.9.0",
    ):
        (lib / name).mkdir(parents=True)
        (lib / name / "a.jar").write_bytes(b"PK")
    assert components.prune_copies(settings, installed) == [
        "kafka-1.0-lib",
        "kafka-2.0-lib.copying",
        "pyspark-0.9.0",
    ]
    assert sorted(p.name for p in lib.iterdir()) == sorted(
        [
            "debezium-1.0-plugins",
            "executor-python",
            "kafka-2.0-lib",
            "s3proxy-1.0-lib",
            executor_python.spark_home_name(),
        ]
    )
    no_cluster = StackSettings(
        state_dir=tmp_path / "state", service_dir=tmp_path / "svc", spark_cluster=False
    )
    assert components.prune_copies(no_cluster, installed) == [
        "executor-python",
        executor_python.spark_home_name(),
    ]
    assert (
        components.prune_copies(
            StackSettings(state_dir=tmp_path / "s2", service_dir=tmp_path / "none"), installed
        )
        == []
    )
