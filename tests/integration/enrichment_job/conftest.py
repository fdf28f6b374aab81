"""Fixtures of the enrichment job's integration tests: topics of their own, a database link."""

from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from support.enrichment import StackEnv, Topics, create_topics, delete_topics


@pytest.fixture(scope="module")
def topics(stack_env: StackEnv) -> Iterator[Topics]:
    topics = Topics()
    names = create_topics(stack_env, topics)
    yield topics
    delete_topics(stack_env, names)


@pytest.fixture(scope="module")
def db(stack_env: StackEnv) -> Iterator[Any]:
    conn = pymysql.connect(
        host=stack_env["MARIADB_HOST"],
        port=int(stack_env["MARIADB_PORT"]),
        user=stack_env["APP_DB_USER"],
        password=stack_env["APP_DB_PASSWORD"],
        database=stack_env["MARIADB_DATABASE"],
        autocommit=True,
    )
    yield conn
    conn.close()
