import base64
import re
import uuid
from pathlib import Path

import pytest

from infra.stack import components
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
    assert list(component_ports(settings)) == ["mariadb", "kafka", "s3", "elasticsearch", "connect"]


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
