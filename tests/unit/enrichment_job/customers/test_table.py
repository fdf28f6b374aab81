"""The customer table apart from Delta: versions join at once, reach the log only once their
batch is committed, a restart's catch-up is logged before it is joined, and a failed log stops
the next batch. The Delta log itself runs against Spark with the Delta jars in
tests/integration/enrichment_job/customers/test_table.py."""

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest

from enrichment_job.customers.table import CdcState, CustomerTable, lacks
from tests.support.change_events import sample_versions

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@dataclass
class FakeLog:
    """A log that keeps what it is given, in order."""

    stored: pa.Table | None = None
    path: str = "memory://customers"
    batch: int | None = None
    state: CdcState = field(default_factory=CdcState)
    calls: list[tuple[str, int | None, int]] = field(default_factory=list)
    failure: Exception | None = None
    closed: bool = False

    def read_all(self) -> pa.Table | None:
        return self.stored

    def queue(self, batch_id: int, versions: pa.Table, state: CdcState) -> None:
        self.calls.append(("queue", batch_id, versions.num_rows))

    def append(self, batch_id: int | None, versions: pa.Table, state: CdcState) -> None:
        self.calls.append(("append", batch_id, versions.num_rows))
        self.batch, self.state = batch_id, state

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise RuntimeError("the customer table's Delta writer failed") from self.failure

    def close(self, timeout_s: float = 120) -> None:
        self.closed = True


def test_a_start_reads_the_log_back_and_added_versions_join_before_the_log_has_them(spark: Any) -> None:
    versions = sample_versions(spark)
    log = FakeLog(stored=versions.slice(0, 2), batch=4, state=CdcState(2_000, None, {0: 20}))
    table = CustomerTable(log)
    assert len(table.versions()) == 2 and table.delta_batch == 4 and table.delta_state.cdc_to == {0: 20}
    table.add(versions.slice(2))
    assert len(table.versions()) == 5
    assert log.calls == [], "nothing reaches the log before the batch is committed"
    table.commit(5, versions.slice(2), CdcState(10_000, None, {0: 50}))
    assert log.calls == [("queue", 5, 3)]
    table.close()
    assert log.closed


def test_a_catch_up_is_in_the_log_before_the_join_sees_it(spark: Any) -> None:
    log = FakeLog()
    table = CustomerTable(log)
    table.catch_up(None, sample_versions(spark), CdcState(10_000, None, {0: 50}))
    assert log.calls == [("append", None, 5)] and log.state.cdc_to == {0: 50}
    assert len(table.versions()) == 5


def test_a_failed_log_stops_the_next_batch_that_adds_versions(spark: Any) -> None:
    log = FakeLog(failure=OSError("disk full"))
    table = CustomerTable(log)
    with pytest.raises(RuntimeError, match="Delta writer failed"):
        table.add(sample_versions(spark))
    assert len(table.versions()) == 0


def test_a_table_behind_the_last_commit_lacks_what_it_covered_and_one_level_with_it_nothing() -> None:
    commit = CdcState(5_000, None, {0: 900, 1: 40})
    assert lacks(CdcState(4_000, None, {0: 700}), commit)
    assert lacks(CdcState(4_000, None, {0: 900}), commit), "a partition the table never read"
    assert not lacks(commit, commit)
    assert not lacks(CdcState(), CdcState())  # a first run: nothing committed yet
