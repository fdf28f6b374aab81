"""What the S3 sink's integration tests share: their own topics, a prefix of the real lake bucket
(emptied afterwards), the service's environment, and reading the lake back with pyarrow."""

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.kafka import drop_topics, make_topics
from support.lake import Lake
from support.services import unique_name

StackEnv = dict[str, str]


@pytest.fixture
def lake(stack_env: StackEnv, s3: Any) -> Iterator[Lake]:
    lake = Lake(s3, stack_env["S3_BUCKET"], unique_name("s3-sink"))
    yield lake
    lake.empty()


@pytest.fixture
def topics(stack_env: StackEnv) -> Iterator[Callable[[int], tuple[str, str]]]:
    """make(partitions) -> (input topic, dead-letter topic); every topic made is dropped after."""
    made: list[str] = []

    def make(partitions: int = 2) -> tuple[str, str]:
        names = (unique_name("s3in"), unique_name("s3dlq"))
        make_topics(stack_env, list(names), partitions)
        made.extend(names)
        return names

    yield make
    if made:
        drop_topics(stack_env, made)


@pytest.fixture
def sink_env(stack_env: StackEnv, lake: Lake) -> Callable[..., dict[str, str]]:
    """The service's S3_SINK_* environment for the given topics; keyword arguments override."""

    def env(names: tuple[str, str], **overrides: Any) -> dict[str, str]:
        values = {
            "BOOTSTRAP_SERVERS": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
            "GROUP_ID": unique_name("s3-sink"),
            "INPUT_TOPICS": f'["{names[0]}"]',
            "DLQ_TOPIC": names[1],
            "ENDPOINT_URL": stack_env["S3_ENDPOINT_URL"],
            "REGION": stack_env["S3_REGION"],
            "ACCESS_KEY": stack_env["S3_ACCESS_KEY"],
            "SECRET_KEY": stack_env["S3_SECRET_KEY"],
            "BUCKET": lake.bucket,
            "PREFIX": lake.prefix,
            "BATCH_MAX_RECORDS": 1000,
            "BATCH_MAX_WAIT_MS": 300,
            "RETRY_INITIAL_MS": 200,
            "RETRY_MAX_MS": 1000,
        } | {k.upper(): v for k, v in overrides.items()}
        return {f"S3_SINK_{k}": str(v) for k, v in values.items()}

    return env
