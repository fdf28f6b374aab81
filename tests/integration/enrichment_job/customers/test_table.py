"""CustomerTable and its Delta log, written with delta-rs: versions join the in-memory store at
once, reach Delta in the background, a restart reads them back, and Spark with the staged
Delta jars reads the same table (and wrote tables the log goes on with)."""

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.delta import commits, live_rows, user_metadata
from support.kafka import StackEnv
from support.spark import delta_session

from enrichment_job.customers.table import CdcState, CustomerTable, DeltaLog
from enrichment_job.customers.versions import VERSIONS, VersionStore
from enrichment_job.records.schemas import VERSION_FIELDS

# py4j leaves its gateway sockets to the garbage collector; that is py4j's, not a leak of ours.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")
def spark(stack_env: StackEnv) -> Iterator[Any]:
    """Spark as a user of the table runs it: the staged jars, Delta's SQL extension."""
    session = delta_session(stack_env, "customer-table-test")
    yield session
    session.stop()


def _versions(ids: list[int], status: str = "gold") -> pa.Table:
    columns = {
        "id": ids,
        "club_status": [status] * len(ids),
        "valid_from": [1_000 + i for i in ids],
        "deleted": [False] * len(ids),
    }
    return pa.table({f.name: pa.array(columns.get(f.name, [None] * len(ids)), f.type) for f in VERSIONS})


def _ids(store: VersionStore) -> list[int]:
    return sorted(store.table().column("id").to_pylist())


@pytest.fixture
def table(tmp_path: Path) -> Iterator[CustomerTable]:
    customers = CustomerTable(DeltaLog(str(tmp_path / "customer_versions"), "test", commit_interval_s=0))
    yield customers
    customers.close()


def _wait_for_batch(customers: CustomerTable, batch_id: int) -> None:
    deadline = time.monotonic() + 60
    while customers.delta_batch != batch_id:
        assert time.monotonic() < deadline, f"batch {batch_id} not appended to Delta within 60 s"
        time.sleep(0.05)


def test_versions_added_are_joined_at_once_and_a_restart_reads_them_back_from_delta(
    table: CustomerTable, tmp_path: Path
) -> None:
    assert len(table.versions()) == 0, "a new table is empty"
    assert not (tmp_path / "customer_versions").exists(), "and not written until its first commit"
    for batch_id, ids in enumerate(([1], [], [2, 3], [4]), start=1):  # a batch may bring none
        versions = _versions(ids)
        table.add(versions)
        table.commit(batch_id, versions, CdcState(1_000 + batch_id, None, {0: batch_id}))
    assert _ids(table.versions()) == [1, 2, 3, 4]
    _wait_for_batch(table, 4)
    again = CustomerTable(DeltaLog(table.path, "test"))
    try:
        assert _ids(again.versions()) == [1, 2, 3, 4]
        assert again.delta_state == CdcState(1_004, None, {0: 4})
        assert again.delta_batch == 4
        picks = again.versions().pick(pa.array([3], pa.int32()), pa.array([2_000], pa.int64()), 0)
        assert picks.index.to_pylist() == [2]
    finally:
        again.close()


def test_an_append_is_one_commit_that_carries_its_batch_and_cdc_state_and_spark_reads_it(
    spark: Any, tmp_path: Path
) -> None:
    log = DeltaLog(str(tmp_path / "customer_versions"), "run-a", commit_interval_s=0)
    try:
        log.append(1, _versions([1, 2]), CdcState(1_001, (7, 1, 400, 0), {0: 3, 1: 5}))
        log.append(2, _versions([]), CdcState(1_002, (7, 1, 500, 0), {0: 4, 1: 5}))  # state only
    finally:
        log.close()
    table = tmp_path / "customer_versions"
    assert len(commits(table)) == 2, "one commit an append, the empty one too"
    assert [m["batch_id"] for m in user_metadata(table)] == [1, 2]
    assert user_metadata(table)[1]["cdc_to"] == {"0": 4, "1": 5}
    assert user_metadata(table)[1]["position"] == [7, 1, 500, 0]
    # What a user's Spark sees: the rows with the job's schema, and the commits' metadata.
    frame = spark.read.format("delta").load(str(table))
    assert frame.schema == VERSION_FIELDS
    assert sorted(r["id"] for r in frame.collect()) == [1, 2]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
    assert [json.loads(h["userMetadata"])["batch_id"] for h in history] == [1, 2]


def test_a_batch_appended_before_is_not_appended_again_but_another_runs_is(tmp_path: Path) -> None:
    """Idempotent per batch: the app transaction (the run's id, the batch id) is in the table."""
    path = str(tmp_path / "customer_versions")
    log = DeltaLog(path, "run-a", commit_interval_s=0)
    try:
        log.append(1, _versions([1]), CdcState(1_001, None, {0: 1}))
        log.append(2, _versions([2]), CdcState(1_002, None, {0: 2}))
        log.append(2, _versions([2]), CdcState(1_002, None, {0: 2}))  # a re-run of batch 2
        log.append(1, _versions([1]), CdcState(1_001, None, {0: 1}))
    finally:
        log.close()
    assert sorted(live_rows(tmp_path / "customer_versions").column("id").to_pylist()) == [1, 2]
    again = DeltaLog(path, "run-a")  # the same run after a restart
    other = DeltaLog(path, "run-b")  # a later run, whose batch ids start again
    try:
        again.append(2, _versions([2]), CdcState(1_002, None, {0: 2}))
        other.append(1, _versions([3]), CdcState(1_003, None, {0: 3}))
        other.append(None, _versions([4]), CdcState(1_004, None, {0: 4}))  # a catch-up: no batch id
    finally:
        again.close()
        other.close()
    assert sorted(live_rows(tmp_path / "customer_versions").column("id").to_pylist()) == [1, 2, 3, 4]
    assert DeltaLog(path, "run-c").state == CdcState(1_004, None, {0: 4})


def test_a_batch_appended_before_is_appended_again_when_its_cdc_offsets_went_further(tmp_path: Path) -> None:
    """A batch's second transaction (the release of its waiting ratings) moves its CDC offsets
    after the log took the batch; a restart re-reads what it added and appends that, though
    the batch id is taken. Later batches still append once each."""
    path = str(tmp_path / "customer_versions")
    log = DeltaLog(path, "run-a", commit_interval_s=0)
    try:
        log.append(1, _versions([1]), CdcState(1_001, None, {0: 1}))
    finally:
        log.close()
    again = DeltaLog(path, "run-a")  # the restart's catch-up, to the release's offsets
    try:
        again.append(1, _versions([2]), CdcState(1_002, None, {0: 3}))
        again.append(1, _versions([2]), CdcState(1_002, None, {0: 3}))  # and a re-run of it: skipped
        again.append(2, _versions([3]), CdcState(1_003, None, {0: 4}))
        again.append(2, _versions([3]), CdcState(1_003, None, {0: 4}))
    finally:
        again.close()
    assert sorted(live_rows(tmp_path / "customer_versions").column("id").to_pylist()) == [1, 2, 3]
    assert DeltaLog(path, "run-a").state == CdcState(1_003, None, {0: 4})


def test_a_table_spark_wrote_is_read_back_and_continued(spark: Any, tmp_path: Path) -> None:
    """Tables written by Spark's Delta (the job wrote them that way before) go on as they are:
    the last commit's state, its transaction, its rows."""
    path = str(tmp_path / "customer_versions")
    meta = {"batch_id": 5, **CdcState(1_005, None, {0: 5}).as_json()}
    (
        spark.createDataFrame(_versions([1, 2]), schema=VERSION_FIELDS)
        .write.format("delta")
        .mode("append")
        .option("userMetadata", json.dumps(meta))
        .option("txnAppId", "run-a")
        .option("txnVersion", 5)
        .save(path)
    )
    log = DeltaLog(path, "run-a", commit_interval_s=0)
    try:
        assert (log.batch, log.state) == (5, CdcState(1_005, None, {0: 5}))
        existing = log.read_all()
        assert existing is not None and sorted(existing.column("id").to_pylist()) == [1, 2]
        log.append(5, _versions([9]), CdcState(1_005, None, {0: 5}))  # Spark's transaction counts
        log.append(6, _versions([3]), CdcState(1_006, None, {0: 6}))
    finally:
        log.close()
    assert sorted(r["id"] for r in spark.read.format("delta").load(path).collect()) == [1, 2, 3]


def test_maintenance_compacts_the_files_and_keeps_every_row(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "customer_versions")
    log = DeltaLog(path, "run-a", commit_interval_s=0, maintain_every=3)
    customers = CustomerTable(log)
    try:
        for batch_id in range(1, 7):
            versions = _versions([batch_id])
            customers.add(versions)
            customers.commit(batch_id, versions, CdcState(1_000 + batch_id, None, {0: batch_id}))
            _wait_for_batch(customers, batch_id)  # one append each: maintenance after the 3rd, 6th
    finally:
        customers.close()
    operations = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()]
    assert operations.count("OPTIMIZE") == 2, operations
    live: set[str] = set()
    for actions in commits(Path(path)):
        live |= {a["add"]["path"] for a in actions if "add" in a}
        live -= {a["remove"]["path"] for a in actions if "remove" in a}
    assert len(live) == 1, f"six appends' files compacted into one: {live}"
    assert sorted(r["id"] for r in spark.read.format("delta").load(path).collect()) == list(range(1, 7))
    again = DeltaLog(path, "run-a")
    try:
        assert again.state == CdcState(1_006, None, {0: 6}), "the state comes from the last append"
    finally:
        again.close()


def test_a_failed_append_stops_the_next_batch_with_the_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "customer_versions"
    customers = CustomerTable(DeltaLog(str(blocker), "run-a", commit_interval_s=0))
    blocker.write_text("a file where the table's folder goes")
    try:
        customers.commit(1, _versions([1]), CdcState(1_001, None, {0: 1}))
        deadline = time.monotonic() + 30
        while customers.log._failure is None:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the append did not fail"
            time.sleep(0.05)
        with pytest.raises(RuntimeError, match="Delta writer failed"):
            customers.add(_versions([2]))
    finally:
        customers.close()
