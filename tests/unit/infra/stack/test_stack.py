"""Failure is explained: a taken port names port and component; a dying process fails `up`
with the tail of its log. These run a real supervisord with tiny programs, no stack needed."""

import configparser
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from supervisor.datatypes import dict_of_key_value_pairs

from infra.stack.components import Component
from infra.stack.errors import ComponentFailed, PortInUse
from infra.stack.settings import StackSettings
from infra.stack.stack import _source_mode, _wait, check_ports, exclusive, private_state
from infra.stack.supervise import Supervisor, render_config


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_taken_port_names_the_port_the_component_and_the_setting(tmp_path: Path) -> None:
    port_fields = [name for name in StackSettings.model_fields if name.endswith("_port")]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ports = {name: _free_port() for name in port_fields} | {"elasticsearch_port": taken}
        settings = StackSettings(state_dir=tmp_path, **ports)
        with pytest.raises(PortInUse, match=rf"port {taken} \(elasticsearch http\)") as err:
            check_ports(settings, Supervisor(settings))
    assert "STACK_ELASTICSEARCH_PORT" in err.value.hint


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[tuple[StackSettings, Supervisor]]:
    settings = StackSettings(state_dir=tmp_path / "state", start_timeout_s=20)
    sup = Supervisor(settings)
    programs = [
        Component(
            name="doomed",
            ports={},
            command=["/bin/sh", "-c", "echo disk is on fire; exit 3"],
            directory=tmp_path,
        ),
        Component(
            name="sleeper",
            ports={},
            command=["/bin/sleep", "300"],
            directory=tmp_path,
            environment={"SECRET_TOKEN": "abc"},
        ),
    ]
    sup.start_daemon(render_config(settings, programs))
    yield settings, sup
    sup.shutdown()


def test_a_component_that_dies_during_start_fails_with_its_log(
    supervisor: tuple[StackSettings, Supervisor],
) -> None:
    settings, sup = supervisor
    sup.start("doomed")
    with pytest.raises(ComponentFailed, match=r"doomed died during start(.|\n)*disk is on fire"):
        _wait(settings, sup, "doomed", lambda: 1 / 0)


def test_a_running_component_is_waited_for_until_its_probe_passes(
    supervisor: tuple[StackSettings, Supervisor],
) -> None:
    settings, sup = supervisor
    sup.start("sleeper")
    attempts = []

    def probe() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionRefusedError("not yet")

    _wait(settings, sup, "sleeper", probe)
    assert len(attempts) == 3
    assert sup.state("sleeper") in {"STARTING", "RUNNING"}
    sup.stop("sleeper")
    assert sup.state("sleeper") == "STOPPED"


def test_the_supervisor_config_is_private_because_it_holds_credentials(
    supervisor: tuple[StackSettings, Supervisor],
) -> None:
    settings, _ = supervisor
    conf = settings.state_dir / "supervisor" / "supervisord.conf"
    assert 'SECRET_TOKEN="abc"' in conf.read_text()
    assert conf.stat().st_mode & 0o077 == 0


def test_a_stale_socket_left_by_a_machine_restart_does_not_stop_the_start(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path / "state", start_timeout_s=20)
    stale = settings.state_dir / "supervisor" / "supervisor.sock"
    stale.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as dead:  # bound, never listening: what a crash leaves
        dead.bind(str(stale))
    sup = Supervisor(settings)
    sleeper = Component(name="sleeper", ports={}, command=["/bin/sleep", "300"], directory=tmp_path)
    sup.start_daemon(render_config(settings, [sleeper]))
    try:
        assert sup.running()
    finally:
        sup.shutdown()
    assert not sup.running()


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The stack as `make up` runs it as root, its service folders under a temporary root."""
    monkeypatch.setattr("infra.stack.settings.os.geteuid", lambda: 0)
    root = tmp_path / "services"
    monkeypatch.setattr("infra.stack.stack.SERVICE_ROOT", root)
    return root


def test_as_root_the_state_folder_is_private_and_the_service_user_has_its_own(
    as_root: Path, tmp_path: Path
) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir(mode=0o700)
    settings = StackSettings(state_dir=checkout / ".state", service_dir=as_root / "abc")
    private_state(settings)
    assert settings.state_dir.stat().st_mode & 0o777 == 0o700
    assert checkout.stat().st_mode & 0o777 == 0o700  # no folder above it is opened
    assert settings.service_state_dir == as_root / "abc"
    assert (as_root / "abc").stat().st_mode & 0o777 == 0o711
    assert as_root.stat().st_mode & 0o777 == 0o711
    assert (as_root / "abc" / "state-folder").read_text().strip() == str(settings.state_dir.resolve())


def test_service_folders_of_gone_or_wiped_state_folders_are_removed(as_root: Path, tmp_path: Path) -> None:
    kept, gone = tmp_path / "kept", tmp_path / "gone"
    kept.mkdir()
    for name, owner in (("kept", kept), ("gone", gone)):
        (as_root / name / "mariadb").mkdir(parents=True)
        (as_root / name / "state-folder").write_text(f"{owner}\n")
    mine = as_root / "mine"
    (mine / "mariadb").mkdir(parents=True)  # left by an earlier state folder at the same path
    private_state(StackSettings(state_dir=tmp_path / "fresh", service_dir=mine))
    assert (as_root / "kept" / "mariadb").exists()
    assert not (as_root / "gone").exists()
    assert not (mine / "mariadb").exists()


def test_the_data_of_a_stack_from_before_the_service_folder_moves_over(as_root: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "mariadb" / "data").mkdir(parents=True)
    (state / "elasticsearch" / "data").mkdir(parents=True)
    (state / "kafka" / "data").mkdir(parents=True)
    (state / "s3" / "data").mkdir(parents=True)
    (state / "spark" / "conf").mkdir(parents=True)
    (state / "spark" / "spark-worker-1" / "work").mkdir(parents=True)
    settings = StackSettings(state_dir=state, service_dir=as_root / "abc")
    private_state(settings)
    for name in ("mariadb", "elasticsearch", "kafka", "s3"):
        assert (as_root / "abc" / name / "data").is_dir()
        assert not (state / name).exists()
    # the jobs' copy of the cluster's secret stays; the folders of a cluster run as root go
    assert [p.name for p in (state / "spark").iterdir()] == ["conf"]


def test_environment_values_with_quotes_and_commas_reach_supervisord_intact(tmp_path: Path) -> None:
    jaas = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="connect" password="p-1";'
    )
    program = Component(
        name="env", ports={}, command=["/bin/true"], directory=tmp_path, environment={"J": jaas, "L": "a,b"}
    )
    section = configparser.ConfigParser(interpolation=None)
    section.read_string(render_config(StackSettings(state_dir=tmp_path), [program]))
    assert dict_of_key_value_pairs(section["program:env"]["environment"]) == {"J": jaas, "L": "a,b"}


def test_a_state_folder_keeps_the_database_it_was_made_with(tmp_path: Path) -> None:
    _source_mode(StackSettings(state_dir=tmp_path, source="postgres"))
    assert (tmp_path / "source").read_text() == "postgres\n"
    _source_mode(StackSettings(state_dir=tmp_path, source="postgres"))  # the same again: fine
    with pytest.raises(ComponentFailed, match="made with STACK_SOURCE=postgres, not mariadb") as err:
        _source_mode(StackSettings(state_dir=tmp_path, source="mariadb"))
    assert "STACK_STATE_DIR" in (err.value.hint or "")


def test_a_stack_made_before_the_source_was_a_setting_is_mariadb_s(tmp_path: Path) -> None:
    (tmp_path / "kafka" / "data").mkdir(parents=True)
    (tmp_path / "kafka" / "data" / "meta.properties").write_text("cluster.id=x\n")
    with pytest.raises(ComponentFailed, match="made with STACK_SOURCE=mariadb, not postgres"):
        _source_mode(StackSettings(state_dir=tmp_path, service_dir=tmp_path, source="postgres"))


def test_a_second_start_of_the_same_stack_waits_for_the_first_and_another_stack_does_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = StackSettings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    other = StackSettings(state_dir=tmp_path / "state-secured", cache_dir=tmp_path / "cache")
    entered = threading.Event()

    def second() -> None:
        with exclusive(settings):
            entered.set()

    caplog.set_level(logging.INFO, logger="stack")
    with exclusive(settings):
        thread = threading.Thread(target=second)
        thread.start()
        assert not entered.wait(0.5)  # held by the first
        with exclusive(other):  # another state folder's stack is not held up
            pass
        assert not (tmp_path / "state").exists()  # not in the state folder, which clean removes
    assert entered.wait(10)
    thread.join(10)
    assert "another start or stop of the stack" in caplog.text and str(tmp_path / "state") in caplog.text
