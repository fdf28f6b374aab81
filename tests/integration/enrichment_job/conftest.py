"""Fixtures of the enrichment job's integration tests: topics of their own, a database link."""

from collections.abc import Iterator
from typing import Any

import pytest
from support.enrichment import StackEnv, Topics, create_topics, delete_topics

from infra.stack.clients import app_db


@pytest.fixture(scope="module")
def enrichment_topics(stack_env: StackEnv) -> Iterator[Topics]:
    """The enrichment job's topics, for the module (`topics` too, where no folder names its own)."""
    topics = Topics()
    names = create_topics(stack_env, topics)
    yield topics
    delete_topics(stack_env, names)


@pytest.fixture(scope="module")
def topics(enrichment_topics: Topics) -> Topics:
    return enrichment_topics


@pytest.fixture(scope="module")
def db(stack_env: StackEnv) -> Iterator[Any]:
    conn = app_db(stack_env)
    yield conn
    conn.close()
