import os
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from infra.stack import components, kafka_security
from infra.stack.artifacts import Installed
from infra.stack.bootstrap import connector_config
from infra.stack.errors import ComponentFailed
from infra.stack.settings import StackSettings

SECRETS = {name: f"pw-{name.lower()}" for name in kafka_security.SECRET_NAMES} | {
    "DEBEZIUM_DB_PASSWORD": "db",
    "S3_ACCESS_KEY": "a",
    "S3_SECRET_KEY": "s",
    "APP_DB_PASSWORD": "app",
    "CONNECT_REST_PASSWORD": "rest",
}


@pytest.fixture(autouse=True)
def _not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user other than root: each component's folder is in the state folder."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


def _properties(text: str) -> dict[str, str]:
    """Later keys win, as Kafka reads them."""
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def _installed(tmp_path: Path) -> Installed:
    return Installed(*(tmp_path / name for name in ("jdk", "kafka", "s3proxy", "spark", "plugins", "es.zip")))


def _formatted(settings: StackSettings, mode: str) -> None:
    """A Kafka data folder as a first `up` leaves it (formatted in `mode`)."""
    data = settings.state_dir / "kafka" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text("node.id=1\n")
    (settings.state_dir / "kafka" / "security").write_text(mode + "\n")


def test_the_secured_node_takes_scram_clients_and_authorizes_every_request(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path, kafka_security="scram")
    _formatted(settings, "scram")
    components.kafka(settings, _installed(tmp_path), SECRETS)
    props = _properties((tmp_path / "kafka" / "server.properties").read_text())
    assert props["listeners"].startswith("SASL://127.0.0.1:9092,")
    assert props["listener.security.protocol.map"] == "CONTROLLER:SASL_PLAINTEXT,SASL:SASL_PLAINTEXT"
    assert props["inter.broker.listener.name"] == "SASL"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["super.users"] == "User:admin;User:controller"
    assert 'password="pw-kafka_password_admin"' in props["listener.name.sasl.scram-sha-512.sasl.jaas.config"]
    assert (tmp_path / "kafka" / "server.properties").stat().st_mode & 0o077 == 0


def test_the_plaintext_node_has_no_authorizer(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path)
    _formatted(settings, "plaintext")
    components.kafka(settings, _installed(tmp_path), SECRETS)
    props = _properties((tmp_path / "kafka" / "server.properties").read_text())
    assert props["listeners"].startswith("PLAINTEXT://") and "authorizer.class.name" not in props


def test_a_state_folder_keeps_the_mode_it_was_made_with(tmp_path: Path) -> None:
    _formatted(StackSettings(state_dir=tmp_path), "plaintext")
    with pytest.raises(ComponentFailed, match="STACK_KAFKA_SECURITY=plaintext, not scram") as raised:
        components.kafka(
            StackSettings(state_dir=tmp_path, kafka_security="scram"), _installed(tmp_path), SECRETS
        )
    assert raised.value.hint is not None and "STACK_STATE_DIR" in raised.value.hint


def test_the_admin_credential_goes_into_the_first_metadata() -> None:
    assert kafka_security.format_arguments(SECRETS) == [
        "--add-scram",
        "SCRAM-SHA-512=[name=admin,password=pw-kafka_password_admin]",
    ]


def test_connect_and_its_clients_sign_in_as_connect(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path, kafka_security="scram")
    component = components.connect(settings, _installed(tmp_path), SECRETS)
    props = _properties((tmp_path / "connect" / "worker.properties").read_text())
    for prefix in ("", "producer.", "consumer.", "admin."):
        assert props[prefix + "security.protocol"] == "SASL_PLAINTEXT"
        assert 'username="connect" password="pw-kafka_password_connect"' in props[prefix + "sasl.jaas.config"]
    assert component.environment["KAFKA_SASL_JAAS_CONFIG"] == props["sasl.jaas.config"]
    # The connector names the line, never the password: the REST API and _connect-configs show configs.
    config = connector_config(settings.connector_name, settings)
    assert config["schema.history.internal.producer.sasl.jaas.config"] == "${env:KAFKA_SASL_JAAS_CONFIG}"
    assert config["schema.history.internal.consumer.security.protocol"] == "SASL_PLAINTEXT"
    assert "pw-" not in str(config)
    assert "KAFKA_SASL_JAAS_CONFIG" in props["config.providers.env.param.allowlist.pattern"]


def test_in_plaintext_mode_nothing_signs_in(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path)
    component = components.connect(settings, _installed(tmp_path), SECRETS)
    props = _properties((tmp_path / "connect" / "worker.properties").read_text())
    assert "security.protocol" not in props
    assert "KAFKA_SASL_JAAS_CONFIG" not in props["config.providers.env.param.allowlist.pattern"]
    assert "KAFKA_SASL_JAAS_CONFIG" not in component.environment
    assert not any(
        k.startswith("schema.history.internal.producer.")
        for k in connector_config("mariadb-customers", settings)
    )
    assert kafka_security.admin_config(settings, SECRETS) == {"bootstrap.servers": "127.0.0.1:9092"}


def test_each_principal_has_grants_and_none_is_a_wildcard() -> None:
    assert set(kafka_security.PRINCIPALS) == {
        "connect",
        "enrichment",
        "views",
        "views-api",
        "slack-notifier",
        "es-sink",
        "s3-sink",
        "loadgen",
    }
    for user, grants in kafka_security.PRINCIPALS.items():
        assert grants, user
        for grant in grants:
            assert grant.name, f"{user}: an empty name or prefix would match every resource"
            assert grant.kind in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
    bindings = kafka_security.bindings("loadgen", kafka_security.PRINCIPALS["loadgen"])
    assert {(b.name, b.operation, b.resource_pattern_type) for b in bindings} == {
        ("ratings", AclOperation.WRITE, ResourcePatternType.LITERAL),
        ("ratings", AclOperation.DESCRIBE, ResourcePatternType.LITERAL),
    }
    assert all(b.principal == "User:loadgen" for b in bindings)


def test_stack_env_gets_every_client_password_but_the_controllers() -> None:
    names = kafka_security.client_secret_names()
    assert "KAFKA_PASSWORD_ADMIN" in names and "KAFKA_PASSWORD_ES_SINK" in names
    assert "KAFKA_PASSWORD_CONTROLLER" not in names


def test_connect_s_rest_api_takes_one_user_s_basic_credentials_in_both_modes(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path)
    component = components.connect(settings, _installed(tmp_path), SECRETS)
    props = _properties((tmp_path / "connect" / "worker.properties").read_text())
    assert props["rest.extension.classes"].endswith(".BasicAuthSecurityRestExtension")
    jaas = tmp_path / "connect" / "rest-jaas.conf"
    assert f"-Djava.security.auth.login.config={jaas}" in component.command
    users = tmp_path / "connect" / "rest-users.properties"
    assert users.read_text() == "stack: rest\n"
    assert f'file="{users}"' in jaas.read_text() and "PropertyFileLoginModule required" in jaas.read_text()
    assert all(path.stat().st_mode & 0o077 == 0 for path in (users, jaas))
    assert not any("rest" == part or ": rest" in part for part in component.command)
