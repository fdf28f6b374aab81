"""docker-compose.yml describes the local stack for Docker users: same topology, ports and config.

There is no Docker engine here, so these tests read the YAML, compare it with what infra.stack
uses, and run infra/kafka/create-topics.sh against a stub kafka-topics.sh.
"""

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.stack.bootstrap import TopicSpec, read_topics
from infra.stack.components import component_ports
from infra.stack.secrets import SECRET_NAMES
from infra.stack.settings import REPO_ROOT, StackSettings
from infra.stack.versions import load_versions

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
CREATE_TOPICS = REPO_ROOT / "infra" / "kafka" / "create-topics.sh"
CONNECT_WORKER = REPO_ROOT / "infra" / "connect" / "connect-distributed.properties"
CONNECTORS = [REPO_ROOT / "connect" / f"{name}-customers.json" for name in ("mariadb", "postgres")]

Service = dict[str, Any]

# Every config file the local stack reads -> (service, where that service's container reads it).
SHARED_FILES = {
    "infra/kafka/server.properties": ("kafka", "/mnt/shared/config/server.properties"),
    "infra/kafka/topics.txt": ("kafka-init", "/opt/ratings/topics.txt"),
    "infra/mariadb/my.cnf": ("mariadb", "/etc/mysql/conf.d/ratings.cnf"),
    "infra/mariadb/init": ("mariadb", "/docker-entrypoint-initdb.d"),
    "infra/elasticsearch/elasticsearch.yml": (
        "elasticsearch",
        "/usr/share/elasticsearch/config/elasticsearch.yml",
    ),
    "infra/s3proxy/s3proxy.properties": ("s3", "/etc/s3proxy/s3proxy.properties"),
    "connect/mariadb-customers.json": ("connect-init", "/opt/ratings/mariadb-customers.json"),
    "infra/postgres/postgresql.conf": ("postgres", "/etc/postgresql/ratings.conf"),
    "infra/postgres/init": ("postgres", "/docker-entrypoint-initdb.d"),
    "connect/postgres-customers.json": ("connect-init-postgres", "/opt/ratings/postgres-customers.json"),
}
# Files not read by the image itself but by the service's own command.
READ_BY_COMMAND = {
    "infra/kafka/server.properties",
    "infra/s3proxy/s3proxy.properties",
    "connect/mariadb-customers.json",
    "infra/postgres/postgresql.conf",
    "connect/postgres-customers.json",
}

# Ports the local stack has but nothing outside the container needs.
UNPUBLISHED = {("kafka", "controller")}

# Worker settings the Debezium image takes under its own names; it overwrites CONNECT_<KEY> for
# these with its defaults (GROUP_ID=1 ...), so they must not be given as CONNECT_<KEY>.
CONNECT_IMAGE_NAMES = {
    "group.id": "GROUP_ID",
    "config.storage.topic": "CONFIG_STORAGE_TOPIC",
    "offset.storage.topic": "OFFSET_STORAGE_TOPIC",
    "status.storage.topic": "STATUS_STORAGE_TOPIC",
    "offset.flush.interval.ms": "OFFSET_FLUSH_INTERVAL_MS",
    "key.converter": "KEY_CONVERTER",
    "value.converter": "VALUE_CONVERTER",
}

SECRET_NAME = re.compile(r"PASSWORD|SECRET|CREDENTIAL|TOKEN|(^|_)KEY$")
REQUIRED_REFERENCE = re.compile(r"\$\{(?P<name>[A-Z][A-Z0-9_]*):\?[^}]+\}")


@pytest.fixture(scope="module")
def services() -> dict[str, Service]:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    return dict(compose["services"])


def image_tag(image: str) -> str:
    name, _, tag = image.rpartition(":")
    return tag if name and "/" not in tag else ""


def environment(service: Service) -> dict[str, str]:
    """The service's environment as its container sees it (Compose turns `$$` into `$`)."""
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value).replace("$$", "$") for key, value in env.items()}


def bind_mounts(service: Service) -> dict[str, str]:
    """Repo-relative host path -> container path, for every bind mount of a service."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") != "bind":
                continue
            source, target = volume["source"], volume["target"]
        else:
            source, target = volume.split(":")[:2]
            if not source.startswith((".", "/")):
                continue  # a named volume
        host = (COMPOSE_FILE.parent / source).resolve()
        mounts[host.relative_to(REPO_ROOT).as_posix()] = target
    return mounts


def published_ports(service: Service) -> set[int]:
    ports = set()
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            ports.add(int(entry["published"]))
        else:
            ports.add(int(str(entry).split(":")[-2]))
    return ports


def command_text(service: Service) -> str:
    parts: list[str] = []
    for key in ("entrypoint", "command"):
        value = service.get(key, [])
        parts.extend([value] if isinstance(value, str) else value)
    return "\n".join(parts)


def read_properties(path: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    return {key.strip(): value.strip() for key, value in pairs}


def test_every_service_runs_a_pinned_image(services: dict[str, Service]) -> None:
    for name, service in services.items():
        assert "build" not in service, name
        tag = image_tag(service["image"])
        assert tag and tag != "latest", f"{name}: {service['image']} has no pinned tag"


def test_image_versions_mirror_versions_toml(services: dict[str, Service]) -> None:
    v = load_versions()
    expected = {
        "kafka": f"apache/kafka:{v.kafka}",
        "kafka-init": f"apache/kafka:{v.kafka}",
        "connect": f"quay.io/debezium/connect:{v.debezium}",
        "mariadb": f"mariadb:{v.mariadb_line}",
        "postgres": f"postgres:{v.postgres_major}",
        "elasticsearch": f"docker.elastic.co/elasticsearch/elasticsearch:{v.elasticsearch}",
        "kibana": f"docker.elastic.co/kibana/kibana:{v.elasticsearch}",
        "kibana-setup": f"docker.elastic.co/kibana/kibana:{v.elasticsearch}",
        "s3": f"andrewgaul/s3proxy:s3proxy-{v.s3proxy}",
    }
    assert {name: services[name]["image"] for name in expected} == expected


def run_create_topics(
    tmp_path: Path, topics_file: Path, stub_exit: int = 0
) -> subprocess.CompletedProcess[str]:
    """create-topics.sh with a kafka-topics.sh on PATH that records its arguments to calls.txt."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "kafka-topics.sh"
    stub.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" "<end>" >> "$CALLS_FILE"\nexit {stub_exit}\n')
    stub.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key != "KAFKA_BIN"}
    env |= {
        "PATH": f"{bin_dir}:{env['PATH']}",
        "KAFKA_BOOTSTRAP_SERVERS": "kafka:9092",
        "CALLS_FILE": str(tmp_path / "calls.txt"),
    }
    return subprocess.run(
        ["sh", str(CREATE_TOPICS), str(topics_file)], env=env, capture_output=True, text=True, check=False
    )


def recorded_calls(tmp_path: Path) -> list[list[str]]:
    calls_file = tmp_path / "calls.txt"
    if not calls_file.exists():
        return []
    calls: list[list[str]] = [[]]
    for arg in calls_file.read_text().splitlines():
        if arg == "<end>":
            calls.append([])
        else:
            calls[-1].append(arg)
    return calls[:-1]


def as_topic_spec(args: list[str]) -> TopicSpec:
    flags = {"--create", "--if-not-exists"}
    assert flags <= set(args)
    values = [arg for arg in args if arg not in flags]
    options = list(zip(values[::2], values[1::2], strict=True))
    single = {key: value for key, value in options if key != "--config"}
    assert single["--bootstrap-server"] == "kafka:9092"
    assert single["--replication-factor"] == "1"
    config = dict(value.split("=", 1) for key, value in options if key == "--config")
    return TopicSpec(single["--topic"], int(single["--partitions"]), config)


def test_create_topics_creates_every_listed_topic_with_its_partitions_and_config(tmp_path: Path) -> None:
    result = run_create_topics(tmp_path, REPO_ROOT / "infra" / "kafka" / "topics.txt")
    assert result.returncode == 0, result.stderr
    assert [as_topic_spec(call) for call in recorded_calls(tmp_path)] == read_topics()


def test_create_topics_stops_at_a_malformed_line(tmp_path: Path) -> None:
    topics = tmp_path / "topics.txt"
    topics.write_text("good 1 -\nbroken 3\nnever 1 -\n")
    result = run_create_topics(tmp_path, topics)
    assert result.returncode != 0
    assert "topics.txt:2" in result.stderr
    assert [call[call.index("--topic") + 1] for call in recorded_calls(tmp_path)] == ["good"]


def test_create_topics_fails_when_kafka_topics_fails(tmp_path: Path) -> None:
    topics = tmp_path / "topics.txt"
    topics.write_text("first 1 -\nsecond 1 -\n")
    result = run_create_topics(tmp_path, topics, stub_exit=1)
    assert result.returncode != 0
    assert len(recorded_calls(tmp_path)) == 1


def test_kafka_init_runs_the_script_on_the_shared_topic_list(services: dict[str, Service]) -> None:
    init = services["kafka-init"]
    mounts = bind_mounts(init)
    script, topics = mounts["infra/kafka/create-topics.sh"], mounts["infra/kafka/topics.txt"]
    assert init["command"] == ["sh", script, topics]
    assert environment(init)["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"


def test_published_ports_equal_the_local_stack_ports(
    services: dict[str, Service], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [key for key in os.environ if key.upper().startswith("STACK_")]:
        monkeypatch.delenv(key)
    for source in ("mariadb", "postgres"):
        # The compose file has no Spark cluster (the README says so): the jobs run local[2] there.
        for component, ports in component_ports(StackSettings(source=source, spark_cluster=False)).items():
            expected = {port for purpose, port in ports.items() if (component, purpose) not in UNPUBLISHED}
            assert published_ports(services[component]) == expected, component


def test_ports_are_published_on_loopback_only(services: dict[str, Service]) -> None:
    for name, service in services.items():
        for entry in service.get("ports", []):
            assert str(entry).startswith("127.0.0.1:"), f"{name}: {entry}"


def test_every_shared_config_file_is_mounted_where_its_service_reads_it(
    services: dict[str, Service],
) -> None:
    for host_path, (service, target) in SHARED_FILES.items():
        assert bind_mounts(services[service]).get(host_path) == target, host_path


def test_command_overrides_read_the_mounted_file(services: dict[str, Service]) -> None:
    for host_path in READ_BY_COMMAND:
        service, target = SHARED_FILES[host_path]
        assert target in command_text(services[service]), host_path


def test_every_mounted_host_path_exists(services: dict[str, Service]) -> None:
    for name, service in services.items():
        for host_path in bind_mounts(service):
            assert (REPO_ROOT / host_path).exists(), f"{name} mounts missing {host_path}"


def test_connect_environment_carries_every_worker_setting(services: dict[str, Service]) -> None:
    worker = read_properties(CONNECT_WORKER)
    assert {
        "group.id",
        "config.storage.topic",
        "offset.storage.topic",
        "status.storage.topic",
    } <= worker.keys()
    env = environment(services["connect"])
    for key, value in worker.items():
        name = CONNECT_IMAGE_NAMES.get(key, "CONNECT_" + key.upper().replace(".", "_"))
        assert env.get(name) == value, f"{key}: {name}={env.get(name)!r}, file has {value!r}"
    for key in CONNECT_IMAGE_NAMES:
        assert "CONNECT_" + key.upper().replace(".", "_") not in env, key


def test_connect_environment_has_every_variable_the_connector_resolves(services: dict[str, Service]) -> None:
    for connector in CONNECTORS:
        names = set(re.findall(r"\$\{env:([A-Za-z0-9_]+)\}", connector.read_text()))
        assert names
        assert names <= environment(services["connect"]).keys()
        json.loads(connector.read_text())


def test_secrets_come_only_from_required_variables(services: dict[str, Service]) -> None:
    referenced = set()
    for name, service in services.items():
        for key, value in environment(service).items():
            if SECRET_NAME.search(key):
                match = REQUIRED_REFERENCE.fullmatch(value)
                assert match, f"{name}: {key} must be ${{VAR:?message}}, is {value!r}"
                referenced.add(match["name"])
    assert {*SECRET_NAMES, "MARIADB_ROOT_PASSWORD", "POSTGRES_PASSWORD"} <= referenced


def test_services_wait_for_what_they_need(services: dict[str, Service]) -> None:
    for name, service in services.items():
        for dependency, spec in service.get("depends_on", {}).items():
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[dependency], f"{name} waits on {dependency}'s health"
            else:
                assert condition == "service_completed_successfully", f"{name} -> {dependency}"
                assert services[dependency].get("restart") == "no", dependency
    assert services["connect"]["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"
    assert services["connect"]["depends_on"]["mariadb"]["condition"] == "service_healthy"
    assert services["connect-init"]["depends_on"]["connect"]["condition"] == "service_healthy"
    pg_init = services["connect-init-postgres"]
    assert pg_init["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert {pg_init["profiles"][0], services["postgres"]["profiles"][0]} == {"postgres"}
