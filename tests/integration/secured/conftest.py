"""The secured stack's tests run against a stack started with STACK_KAFKA_SECURITY=scram
(`make test-secured` starts one in its own state folder). Against any other they fail."""

import pytest

from infra.stack.secrets import read_env_file
from infra.stack.settings import StackSettings
from infra.stack.stack import stack_env_path

StackEnv = dict[str, str]


@pytest.fixture(scope="session")
def stack_env() -> StackEnv:
    path = stack_env_path(StackSettings())
    if not path.exists():
        pytest.fail(f"the secured stack is not up ({path} is missing): run `make test-secured`")
    env = read_env_file(path)
    if env.get("KAFKA_SECURITY") != "scram":
        pytest.fail(f"the stack of {path} is not the secured one: run `make test-secured`")
    return env
