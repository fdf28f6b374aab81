"""PostgreSQL's own cases run against a stack started with STACK_SOURCE=postgres (`make
test-postgres` starts one in its own state folder). Against any other they fail."""

import pytest
from support.stack import running_stack_env

StackEnv = dict[str, str]


@pytest.fixture(scope="session")
def stack_env() -> StackEnv:
    return running_stack_env("the stack on PostgreSQL", "make test-postgres", ("CUSTOMER_DB", "postgres"))
