"""CustomerTable on a Spark session with the staged Delta jars: versions join the in-memory
store at once, reach Delta in the background, and a restart reads them back."""

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.kafka import StackEnv

from enrichment_job import table as table_module
from enrichment_job.app import build_session
from enrichment_job.schemas import VERSION_FIELDS
from enrichment_job.settings import JobSettings
from enrichment_job.table import CdcState, CustomerTable, DeltaLog
from enrichment_job.versions import VersionStore

# py4j leaves its gateway sockets to the garbage collector; that is py4j's, not a leak of ours.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")
def spark(stack_env: StackEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    os.environ["JAVA_HOME"] = stack_env["JAVA_HOME"]
    settings = JobSettings(
        spark_jars=stack_env["SPARK_JARS"],
        master="local[1]",
        ui_enabled=False,
        state_dir=tmp_path_factory.mktemp("state"),
    )
    session = build_session(settings)
    yield session
    session.stop()


def _versions(spark: Any, ids: list[int]) -> pa.Table:
    rows = [{"id": i, "club_status": "gold", "valid_from": 1_000 + i, "deleted": False} for i in ids]
    return spark.createDataFrame(rows, VERSION_FIELDS).toArrow()


def _ids(store: VersionStore) -> list[int]:
    return sorted(store.table().column("id").to_pylist())


@pytest.fixture
def table(spark: Any, tmp_path: Path) -> Iterator[CustomerTable]:
    customers = CustomerTable(
        DeltaLog(spark, str(tmp_path / "customer_versions"), "test", commit_interval_s=0)
    )
    yield customers
    customers.close()


def _wait_for_batch(customers: CustomerTable, batch_id: int) -> None:
    deadline = time.monotonic() + 60
    while customers.delta_batch != batch_id:
        assert time.monotonic() < deadline, f"batch {batch_id} not appended to Delta within 60 s"
        time.sleep(0.2)


def test_versions_added_are_joined_at_once_and_a_restart_reads_them_back_from_delta(
    spark: Any, table: CustomerTable, tmp_path: Path
) -> None:
    assert len(table.versions()) == 0, "a new table is empty"
    assert not (tmp_path / "customer_versions").exists(), "and not written until its first commit"
    for batch_id, ids in enumerate(([1], [], [2, 3], [4]), start=1):  # a batch may bring none
        versions = _versions(spark, ids)
        table.add(versions)
        table.commit(batch_id, versions, CdcState(1_000 + batch_id, None, {0: batch_id}))
    assert _ids(table.versions()) == [1, 2, 3, 4]
    _wait_for_batch(table, 4)
    again = CustomerTable(DeltaLog(spark, table.path, "test"))
    try:
        assert _ids(again.versions()) == [1, 2, 3, 4]
        assert again.delta_state == CdcState(1_004, None, {0: 4})
        picks = again.versions().pick(pa.array([3], pa.int32()), pa.array([2_000], pa.int64()), 0)
        assert picks.index.to_pylist() == [2]
    finally:
        again.close()


def test_a_large_append_is_staged_as_parquet_in_the_state_folder_and_is_one_commit(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A direct append's rows travel through the driver's JVM inside the tasks; on a cluster a
    fresh start's whole history would exceed Spark's RPC message limit and the driver's heap."""
    monkeypatch.setattr(table_module, "STAGED_ROWS", 4)
    staged: list[int] = []
    write_table = pq.write_table

    def counted(part: pa.Table, *args: Any, **kwargs: Any) -> None:
        staged.append(len(part))
        write_table(part, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", counted)
    state = JobSettings(state_dir=tmp_path).state
    (tmp_path / "staging" / "left-by-a-kill").mkdir(parents=True)
    log = DeltaLog(spark, state.child("customer_versions"), "staged", staging=state)
    try:
        assert not (tmp_path / "staging").exists(), "what a killed append left is removed at start"
        log.append(1, _versions(spark, list(range(10))), CdcState(1_010, None, {0: 10}))
        history = spark.sql(f"DESCRIBE HISTORY delta.`{log.path}`").collect()
        assert len(history) == 1, "one commit"
        assert staged == [4, 4, 2], "10 rows, staged 4 a file"
        assert list((tmp_path / "staging").iterdir()) == [], "the staged files are gone"
        log.append(2, _versions(spark, [10, 11]), CdcState(1_012, None, {0: 12}))
        assert staged == [4, 4, 2], "a small append goes direct"
        again = CustomerTable(DeltaLog(spark, log.path, "staged"))
        assert _ids(again.versions()) == list(range(12))
        assert again.delta_state == CdcState(1_012, None, {0: 12})
        again.close()
    finally:
        log.close()


def _stage_pools(spark: Any) -> dict[int, str]:
    """stage id -> the scheduler pool it ran in, from Spark's status store (kept without the UI)."""
    gateway = spark.sparkContext._gateway
    empty = gateway.jvm.java.util.ArrayList()  # no filter by stage or task status
    quantiles = gateway.new_array(gateway.jvm.double, 0)
    stages = spark.sparkContext._jsc.sc().statusStore().stageList(empty, False, False, quantiles, empty)
    return {
        int(stages.apply(i).stageId()): str(stages.apply(i).schedulingPool()) for i in range(stages.size())
    }


def test_background_delta_appends_yield_to_batches(spark: Any, tmp_path: Path) -> None:
    """The Delta writer's Spark jobs run in the fair scheduler's background pool, so the Spark
    jobs of a micro-batch (default pool) get each free task slot first."""
    before = set(_stage_pools(spark))
    customers = CustomerTable(
        DeltaLog(spark, str(tmp_path / "customer_versions"), "pools", commit_interval_s=0)
    )
    try:
        versions = _versions(spark, [1, 2])
        customers.add(versions)
        customers.commit(1, versions, CdcState(1_000, None, {0: 2}))
        _wait_for_batch(customers, 1)
    finally:
        customers.close()
    pools = {stage: pool for stage, pool in _stage_pools(spark).items() if stage not in before}
    assert "background" in pools.values(), pools
    spark.range(3).count()  # a job of the main thread, as a micro-batch's would be
    main = {stage: pool for stage, pool in _stage_pools(spark).items() if stage not in before | set(pools)}
    assert main and set(main.values()) == {"default"}, main


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)  # Linux: a thread id names that one thread


def _jvm_threads(spark: Any, name: str) -> list[int]:
    tasks = Path(f"/proc/{spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()}/task")
    return [int(t.name) for t in tasks.iterdir() if (t / "comm").read_text().strip() == name]


def test_the_delta_writer_runs_at_a_lower_cpu_priority(spark: Any, tmp_path: Path) -> None:
    """With writer_nice the writer's Python thread and the driver JVM thread that runs its
    calls get that much more nice; the appends still land, and the caller's threads keep theirs."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    customers = CustomerTable(
        DeltaLog(spark, str(tmp_path / "customer_versions"), "nice", commit_interval_s=0, writer_nice=7)
    )
    try:
        versions = _versions(spark, [1, 2])
        customers.add(versions)
        customers.commit(1, versions, CdcState(1_000, None, {0: 2}))
        _wait_for_batch(customers, 1)
        writer = customers.log._writer  # type: ignore[attr-defined]
        assert writer.native_id is not None
        assert _nice(writer.native_id) == min(19, base + 7)
        found = _jvm_threads(spark, table_module.WRITER_THREAD)
        assert len(found) == 1, found
        assert _nice(found[0]) == min(19, base + 7)
    finally:
        customers.close()
    assert _nice(threading.get_native_id()) == base  # the calling thread keeps its own
    assert spark.read.format("delta").load(str(tmp_path / "customer_versions")).count() == 2
