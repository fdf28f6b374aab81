from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A small local Spark: the transforms are pure, so no Kafka or Delta jars are needed."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - slow import, only for these tests

    session = (
        SparkSession.builder.master("local[1]")
        .appName("unit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    yield session
    session.stop()
