"""A Spark session reads Kafka and writes Delta with only the locally staged jars."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from support.spark import delta_session

StackEnv = dict[str, str]
# py4j leaves its gateway sockets to the garbage collector; that is py4j's, not a leak of ours.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")
def spark(stack_env: StackEnv) -> Iterator[Any]:
    session = delta_session(stack_env, "stack-test")
    yield session
    session.stop()


def test_spark_reads_a_kafka_topic_with_the_staged_connector(
    stack_env: StackEnv, spark: Any, new_topic: str
) -> None:
    servers = stack_env["KAFKA_BOOTSTRAP_SERVERS"]
    producer = Producer({"bootstrap.servers": servers})
    for i in range(3):
        producer.produce(new_topic, key=str(i).encode(), value=f'{{"stars": {i + 1}}}'.encode())
    assert producer.flush(30) == 0

    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", new_topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "get_json_object(CAST(value AS STRING), '$.stars') AS stars")
        .orderBy("k")
        .collect()
    )
    assert [(r.k, r.stars) for r in rows] == [("0", "1"), ("1", "2"), ("2", "3")]


def test_spark_writes_and_reads_a_delta_table(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "customers")
    spark.createDataFrame([(1, "gold"), (2, "platinum")], "id INT, club_status STRING").write.format(
        "delta"
    ).save(path)
    spark.createDataFrame([(3, "silver")], "id INT, club_status STRING").write.format("delta").mode(
        "append"
    ).save(path)
    rows = spark.read.format("delta").load(path).orderBy("id").collect()
    assert [(r.id, r.club_status) for r in rows] == [(1, "gold"), (2, "platinum"), (3, "silver")]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert len(history) == 2
