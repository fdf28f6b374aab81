"""Integration tests run against the real local stack (`make up`). Without it they fail, with
the command to run; they never skip."""

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.services import kill_leftovers
from support.stack import running_stack_env

from infra.stack.clients import app_db
from infra.stack.health import s3_client
from infra.stack.settings import StackSettings

StackEnv = dict[str, str]


@pytest.fixture(scope="session")
def stack_env() -> StackEnv:
    return running_stack_env("the local stack", "make up")


@pytest.fixture(autouse=True)
def _no_service_outlives_its_test() -> Iterator[None]:
    yield
    kill_leftovers()


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture
def admin(stack_env: StackEnv) -> AdminClient:
    return AdminClient({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})


@pytest.fixture
def new_topic(admin: AdminClient, unique: str) -> Iterator[str]:
    """A fresh topic (auto creation is off), deleted afterwards."""
    name = f"test-{unique}"
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)
    yield name
    admin.delete_topics([name])[name].result(30)


@pytest.fixture
def db(stack_env: StackEnv) -> Iterator[Any]:
    """A connection as the application's least-privilege user, autocommit on."""
    conn = app_db(stack_env)
    yield conn
    conn.close()


@pytest.fixture
def s3(stack_env: StackEnv) -> Any:
    secrets = {"S3_ACCESS_KEY": stack_env["S3_ACCESS_KEY"], "S3_SECRET_KEY": stack_env["S3_SECRET_KEY"]}
    return s3_client(StackSettings(), secrets)
