import base64
import re
import uuid
from pathlib import Path

import pytest

from infra.stack import components
from infra.stack.artifacts import Installed
from infra.stack.components import component_ports, kafka_cluster_id, render_properties
from infra.stack.settings import StackSettings


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
