"""The es_sink against the real Kafka and Elasticsearch: unique topics, group, indices, aliases
and templates per test, all removed afterwards."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch
from support.es_sink import EsSinkCase
from support.kafka import drop_topics, make_topics
from support.services import unique_name

StackEnv = dict[str, str]


@pytest.fixture
def es(stack_env: StackEnv) -> Iterator[Elasticsearch]:
    client = Elasticsearch(stack_env["ELASTICSEARCH_URL"], request_timeout=30)
    yield client
    client.close()


@pytest.fixture
def case(stack_env: StackEnv, es: Elasticsearch, tmp_path: Path) -> Iterator[EsSinkCase]:
    topics = [unique_name("es-ratings"), unique_name("es-alerts"), unique_name("es-dlq")]
    make_topics(stack_env, topics, partitions=2)
    test_case = EsSinkCase(stack_env, es, tmp_path, *topics, unique_name("es-group"), unique_name("es") + "-")
    yield test_case
    drop_topics(stack_env, topics)
    # action.destructive_requires_name: indices are deleted by their names, not by a wildcard
    names = list(es.indices.get(index=f"{test_case.prefix}*", expand_wildcards="all"))
    if names:
        es.indices.delete(index=",".join(names))
    for template in (test_case.ratings_alias, test_case.alerts_alias):
        if es.indices.exists_index_template(name=template):
            es.indices.delete_index_template(name=template)
