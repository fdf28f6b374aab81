from collections.abc import Iterator

import pytest
from support.views_api import Views

StackEnv = dict[str, str]


@pytest.fixture
def views(stack_env: StackEnv) -> Iterator[Views]:
    """A views job's topics, new for the test, written the way the job writes them."""
    views = Views(stack_env)
    views.create()
    yield views
    views.drop()
