"""PostgreSQL's own cases run against a stack started with STACK_SOURCE=postgres (`make
test-postgres` starts one in its own state folder). Against any other they fail."""

import pytest

from infra.stack.secrets import read_env_file
from infra.stack.settings import StackSettings
from infra.stack.stack import stack_env_path

StackEnv = dict[str, str]


@pytest.fixture(scope="session")
def stack_env() -> StackEnv:
    path = stack_env_path(StackSettings())
    if not path.exists():
        pytest.fail(f"the PostgreSQL stack is not up ({path} is missing): run `make test-postgres`")
    env = read_env_file(path)
    if env.get("CUSTOMER_DB") != "postgres":
        pytest.fail(f"the stack of {path} does not run on PostgreSQL: run `make test-postgres`")
    return env
