from collections.abc import Iterator

import pytest
from support.views import ViewTopics

StackEnv = dict[str, str]


@pytest.fixture
def topics(stack_env: StackEnv, unique: str) -> Iterator[ViewTopics]:
    """The views job's topics, new for the test; dropped after it with those its job made."""
    topics = ViewTopics(unique)
    topics.create(stack_env)
    yield topics
    topics.drop(stack_env)
