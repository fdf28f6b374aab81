"""Arrow tables on their way into Spark, and a batch's rows out of it a bounded number of bytes at a time."""

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from enrichment_job.kafka.batches import Slices, concat

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


def _rows(spark: Any, sizes: dict[str, int]) -> Any:
    """A DataFrame of rows keyed `key`, each value `size` bytes, with an `n` column to sort by."""
    keys = list(sizes)
    return spark.createDataFrame(
        [(k, "v" * sizes[k], i) for i, k in enumerate(keys)], "key string, value string, n long"
    )


def _pairs(tables: list[Any]) -> list[tuple[bytes, bytes]]:
    return [(k, v) for t in tables for k, v in zip(t["key"].to_pylist(), t["value"].to_pylist(), strict=True)]


def test_rows_over_the_bound_come_in_slices_each_within_it_every_row_once_each_in_order(spark: Any) -> None:
    sizes = {f"user-{i}": 100_000 + i for i in range(40)}  # 4 MB of values, 1 MB a collect at most
    with Slices(_rows(spark, sizes), 1_000_000, 40, order_by=("n",)) as slices:
        # the longer rows' slices are collected on entering (before a transaction opens), to files
        spilled = sorted(Path(tempfile.gettempdir()).glob("batch-slices-*/*.arrow"))
        tables = list(slices)
    assert len(spilled) == len(slices.plan) and not any(p.exists() for p in spilled), "removed on exit"
    assert sorted(slices.extras["n"].to_pylist()) == list(range(40)), "every row's extra columns at once"
    assert slices.rows == 40 and slices.bytes == sum(sizes.values()) + sum(len(k) for k in sizes)
    # 25,000 bytes a row would fit the first collect: none does, so it took their sizes alone
    assert tables[0].num_rows == 0 and len(tables) == 1 + len(slices.plan) >= 5, slices.describe()
    weights = [sum(len(k) + len(v) for k, v in _pairs([t])) for t in tables]
    assert max(weights) == slices.largest <= 1_000_000, weights
    pairs = _pairs(tables)
    assert sorted(k.decode() for k, _ in pairs) == sorted(sizes), "every row once"
    assert all(len(v) == sizes[k.decode()] for k, v in pairs)
    assert all(t["n"].to_pylist() == sorted(t["n"].to_pylist()) for t in tables), "each slice in order"
    assert "40 rows of" in slices.describe() and "the bound 1000000" in slices.describe()


def test_rows_within_the_bound_a_row_come_whole_in_one_collect_and_the_longer_after_it(spark: Any) -> None:
    with Slices(_rows(spark, {"a": 10, "b": 20}), 1_000_000, 2) as slices:
        tables = list(slices)
    assert slices.plan == [] and len(tables) == 1  # one Spark job, as a single collect
    assert sorted(tables[0]["key"].to_pylist()) == [b"a", b"b"] and slices.largest == slices.bytes == 32
    sizes = {"small": 10, "big": 3_000_000, "other": 20}  # 333,333 bytes a row in the first collect
    with Slices(_rows(spark, sizes), 1_000_000, 3) as slices:
        tables = list(slices)
    assert sorted(tables[0]["key"].to_pylist()) == [b"other", b"small"]
    assert [t["key"].to_pylist() for t in tables[1:]] == [
        [b"big"]
    ]  # alone over the bound: a slice of its own
    assert len(tables[1]["value"][0].as_py()) == 3_000_000 and slices.largest == 3_000_003


def test_without_a_bound_on_the_rows_every_row_comes_in_slices_and_an_empty_batch_is_one_empty_table(
    spark: Any,
) -> None:
    with Slices(_rows(spark, {"a": 10, "b": 20}), 1_000_000, None) as slices:
        tables = list(slices)
    assert tables[0].num_rows == 0 and sorted(k for k, _ in _pairs(tables)) == [b"a", b"b"]
    with Slices(spark.createDataFrame([], "key string, value string"), 1_000_000, 0) as empty:
        assert [t.num_rows for t in empty] == [0] and empty.rows == empty.bytes == 0


def test_the_bound_a_row_is_a_power_of_two_so_batches_of_different_sizes_share_their_code(spark: Any) -> None:
    df = _rows(spark, {"a": 10})
    bounds = {Slices(df, 128 << 20, records * 3).per_row for records in range(40_000, 43_000, 97)}
    # 1,118 to 1,041 bytes a row, each batch's own: one bound, so one generated code for them all
    assert bounds == {1024}
    assert Slices(df, 1_000_000, 3).per_row == 262_144 <= 1_000_000 // 3
    assert Slices(df, 100, 200).per_row == 0 and Slices(df, 100, None).per_row == -1
