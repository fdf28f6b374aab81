"""Arrow tables on their way into Spark."""

from typing import Any

import pyarrow as pa
import pytest

from enrichment_job.kafka.batches import concat

# py4j leaves its gateway sockets to the garbage collector; that is py4j's, not a leak of ours.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def _ids(values: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def test_concat_keeps_every_row_through_create_data_frame_with_empty_tables_between(spark: Any) -> None:
    tables = [_ids([1, 2]), _ids([]), _ids([3, 4, 5]), _ids([])]
    joined = concat(tables)
    assert joined.column("id").num_chunks == 1
    assert sorted(r["id"] for r in spark.createDataFrame(joined).collect()) == [1, 2, 3, 4, 5]


def test_concat_of_empty_tables_is_empty(spark: Any) -> None:
    assert spark.createDataFrame(concat([_ids([]), _ids([])]), "id long").count() == 0
