"""CustomerTable's in-memory versions, on a Spark session with the staged Delta jars: new
versions arriving a few at a time are one local relation in the join's plan, and they are
folded into the base once there are enough of them."""

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.kafka import StackEnv

from enrichment_job import table as table_module
from enrichment_job.app import build_session
from enrichment_job.schemas import VERSION_FIELDS
from enrichment_job.settings import JobSettings
from enrichment_job.table import CustomerTable

# py4j leaves its gateway sockets to the garbage collector; that is py4j's, not a leak of ours.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")
def spark(stack_env: StackEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    os.environ["JAVA_HOME"] = stack_env["JAVA_HOME"]
    settings = JobSettings(
        spark_jars=stack_env["SPARK_JARS"],
        master="local[1]",
        shuffle_partitions=1,
        ui_enabled=False,
        state_dir=tmp_path_factory.mktemp("state"),
    )
    session = build_session(settings)
    yield session
    session.stop()


def _versions(spark: Any, ids: list[int]) -> pa.Table:
    rows = [{"id": i, "club_status": "gold", "valid_from": 1_000 + i, "deleted": False} for i in ids]
    return spark.createDataFrame(rows, VERSION_FIELDS).toArrow()


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _ids(df: Any) -> list[int]:
    return sorted(r["id"] for r in df.select("id").collect())


@pytest.fixture
def table(spark: Any, tmp_path: Path) -> Iterator[CustomerTable]:
    customers = CustomerTable(spark, str(tmp_path / "customer_versions"), "test", partitions=1)
    yield customers
    customers.close()


def test_versions_added_a_few_at_a_time_are_one_local_relation(spark: Any, table: CustomerTable) -> None:
    base, recent = table.versions()
    assert recent is None, "a new table has no recent versions"
    assert base.count() == 0
    for ids in ([1], [], [2, 3], [4]):  # a batch may bring no versions
        table.add(_versions(spark, ids))
    base, recent = table.versions()
    assert recent is not None
    assert _ids(recent) == [1, 2, 3, 4]
    plan = _plan(recent)
    assert plan.count("LocalTableScan") == 1, plan
    assert "Union" not in plan, "one relation, not one per batch with changes"


def test_many_small_versions_are_folded_into_the_base(
    spark: Any, table: CustomerTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_module, "LOCAL_ROWS", 4)
    table.add(_versions(spark, [1, 2]))
    assert table.versions()[1] is not None, "below the limit nothing is folded"
    table.add(_versions(spark, [3, 4]))  # 4 small rows: folded in the background
    deadline = time.monotonic() + 60
    while table.versions()[1] is not None:
        assert time.monotonic() < deadline, "the small versions were not folded within 60 s"
        time.sleep(0.2)
    base, _ = table.versions()
    assert _ids(base) == [1, 2, 3, 4]


def test_a_large_piece_is_materialized_beside_the_small_ones(
    spark: Any, table: CustomerTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_module, "LOCAL_PIECE_ROWS", 2)
    table.add(_versions(spark, [1]))
    table.add(_versions(spark, [10, 11, 12]))  # more than LOCAL_PIECE_ROWS
    table.add(_versions(spark, [2]))
    _, recent = table.versions()
    assert recent is not None
    assert _ids(recent) == [1, 2, 10, 11, 12]
    plan = _plan(recent)
    assert plan.count("LocalTableScan") == 1, "the two small pieces: one relation"
    assert plan.count("Scan ExistingRDD") == 1, "the large piece: materialized, read as an RDD"


def _stage_pools(spark: Any) -> dict[int, str]:
    """stage id -> the scheduler pool it ran in, from Spark's status store (kept without the UI)."""
    gateway = spark.sparkContext._gateway
    empty = gateway.jvm.java.util.ArrayList()  # no filter by stage or task status
    quantiles = gateway.new_array(gateway.jvm.double, 0)
    stages = spark.sparkContext._jsc.sc().statusStore().stageList(empty, False, False, quantiles, empty)
    return {
        int(stages.apply(i).stageId()): str(stages.apply(i).schedulingPool()) for i in range(stages.size())
    }


def test_background_delta_appends_and_folds_yield_to_batches(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Delta writer's and the folds' Spark jobs run in the fair scheduler's background pool,
    so a micro-batch's tasks (default pool) get each free task slot first."""
    monkeypatch.setattr(table_module, "LOCAL_ROWS", 2)
    before = set(_stage_pools(spark))
    customers = CustomerTable(
        spark, str(tmp_path / "customer_versions"), "pools", partitions=1, commit_interval_s=0
    )
    try:
        versions = _versions(spark, [1, 2])
        customers.add(versions)  # two small rows: a fold starts
        customers.commit(1, versions, table_module.CdcState(1_000, None, {0: 2}))
        deadline = time.monotonic() + 60
        while customers.delta_batch != 1 or customers.versions()[1] is not None:
            assert time.monotonic() < deadline, "no Delta append and fold within 60 s"
            time.sleep(0.2)
    finally:
        customers.close()
    assert _ids(customers.versions()[0]) == [1, 2]
    pools = {stage: pool for stage, pool in _stage_pools(spark).items() if stage not in before}
    assert "background" in pools.values(), pools
    spark.range(3).count()  # a job of the main thread, as a micro-batch's would be
    main = {stage: pool for stage, pool in _stage_pools(spark).items() if stage not in before | set(pools)}
    assert main and set(main.values()) == {"default"}, main
