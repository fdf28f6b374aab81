"""The secured stack's tests run against a stack started with STACK_KAFKA_SECURITY=scram
(`make test-secured` starts one in its own state folder). Against any other they fail."""

import pytest
from support.stack import running_stack_env

StackEnv = dict[str, str]


@pytest.fixture(scope="session")
def stack_env() -> StackEnv:
    return running_stack_env("the secured stack", "make test-secured", ("KAFKA_SECURITY", "scram"))
