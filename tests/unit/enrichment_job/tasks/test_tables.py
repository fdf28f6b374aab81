"""The customer table on the executors: a worker's store brought up to a batch's table from a
broadcast base and the batches' new versions, each added once."""

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from enrichment_job.customers.versions import VersionStore
from enrichment_job.tasks import tables
from enrichment_job.tasks.plan import TablePlan
from enrichment_job.tasks.tables import TableShipper, from_ipc, to_ipc, worker_store
from tests.support.change_events import sample_versions

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@dataclass
class Sent:
    """A broadcast as a task sees it: its value."""

    value: bytes


def _ids(store: VersionStore) -> list[tuple[int, int]]:
    table = store.table()
    return sorted(zip(table.column("id").to_pylist(), table.column("cdc_offset").to_pylist(), strict=True))


def test_ipc_keeps_the_versions_as_they_were(spark: Any) -> None:
    versions = sample_versions(spark)
    assert from_ipc(to_ipc(versions)).equals(versions)


def test_a_worker_adds_each_batch_s_new_versions_once(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables, "_held", {})
    versions = sample_versions(spark)
    base, first, second = versions.slice(0, 3), versions.slice(3, 2), versions.slice(5)
    plan = TablePlan(0, Sent(to_ipc(base)), ())  # type: ignore[arg-type]
    assert _ids(worker_store("job", plan)) == _ids(VersionStore(base))
    plan = TablePlan(0, plan.base, ((0, Sent(to_ipc(first))),))  # type: ignore[arg-type]
    worker_store("job", plan)
    plan = TablePlan(0, plan.base, (*plan.deltas, (1, Sent(to_ipc(second)))))  # type: ignore[arg-type]
    store = worker_store("job", plan)
    assert _ids(store) == _ids(VersionStore(versions))  # the first delta was not added twice
    assert worker_store("job", plan) is store


def test_a_new_base_replaces_what_the_worker_held(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables, "_held", {})
    versions = sample_versions(spark)
    worker_store("job", TablePlan(0, Sent(to_ipc(versions.slice(0, 2))), ()))  # type: ignore[arg-type]
    store = worker_store("job", TablePlan(1, Sent(to_ipc(versions)), ()))  # type: ignore[arg-type]
    assert _ids(store) == _ids(VersionStore(versions))


def test_the_driver_broadcasts_a_base_then_only_new_versions(spark: Any) -> None:
    versions = sample_versions(spark)
    shipper = TableShipper(spark.sparkContext)
    store = VersionStore(versions.slice(0, 4))
    first = shipper.plan(store, None)
    assert first.deltas == () and from_ipc(first.base.value).num_rows == 4
    new = versions.slice(4)
    store.add(new)
    second = shipper.plan(store, new)
    assert second.base_id == first.base_id
    assert [from_ipc(d.value).num_rows for _, d in second.deltas] == [new.num_rows]
    shipper.close()


def test_the_driver_broadcasts_a_new_base_once_the_new_versions_add_up(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "REBASE_ROWS", 2)
    versions = sample_versions(spark)
    shipper = TableShipper(spark.sparkContext)
    store = VersionStore(versions.slice(0, 3))
    first = shipper.plan(store, None)
    new = versions.slice(3)
    assert new.num_rows >= 2
    store.add(new)
    rebased = shipper.plan(store, new)
    assert rebased.base_id == first.base_id + 1 and rebased.deltas == ()
    assert from_ipc(rebased.base.value).num_rows == versions.num_rows
    shipper.close()


def test_an_empty_table_ships(spark: Any) -> None:
    shipper = TableShipper(spark.sparkContext)
    plan = shipper.plan(VersionStore(), None)
    assert from_ipc(plan.base.value).num_rows == 0
    assert isinstance(from_ipc(plan.base.value), pa.Table)
    shipper.close()
