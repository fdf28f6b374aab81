"""JSON written column by column is what Spark's to_json writes for the same rows."""

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from enrichment_job.records.json_columns import MIN_SLICE_ROWS, Slices, json_objects, utf8_valid

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
TEXTS = ["plain", 'quote " and back\\slash', "new\nline\ttab\x01bell\x1f", "ünïcödé ✓ \u2028", "", None]


def _rows() -> pa.StructArray:
    stamp = dt.datetime(2026, 11, 25, 17, 23, 12, 345_000, tzinfo=dt.UTC)
    return pa.array(
        [
            {
                "id": i,
                "big": 2**40 + i if i % 2 else None,
                "text": t,
                "flag": [True, False, None][i % 3],
                "at": stamp + dt.timedelta(milliseconds=655 * i) if i != 4 else None,
            }
            for i, t in enumerate(TEXTS)
        ]
        + [None],
        pa.struct(
            [
                ("id", pa.int32()),
                ("big", pa.int64()),
                ("text", pa.string()),
                ("flag", pa.bool_()),
                ("at", pa.timestamp("ms", tz="UTC")),
            ]
        ),
    )


@pytest.mark.parametrize("nulls", [False, True])
def test_json_objects_are_what_sparks_to_json_writes(spark: Any, nulls: bool) -> None:
    rows = _rows()
    ours = json_objects(rows, nulls=nulls).to_pylist()
    frame = spark.createDataFrame(pa.table({"row": rows}))
    options = {"ignoreNullFields": str(not nulls).lower()}
    theirs = [r[0] for r in frame.select(F.to_json("row", options)).collect()]
    assert ours == theirs
    assert ours[-1] is None
    assert ('"text":null' in ours[-2]) == nulls


@pytest.mark.parametrize("nulls", [False, True])
def test_json_objects_in_slices_on_threads_are_the_same_objects_in_the_same_order(nulls: bool) -> None:
    rows = pa.concat_arrays([_rows()] * (3 * MIN_SLICE_ROWS // len(_rows()) + 1))
    whole = json_objects(rows, nulls=nulls)
    sliced = [json_objects(rows, nulls=nulls, slices=Slices(n)) for n in (2, 3, 4)]
    small = json_objects(rows.slice(0, MIN_SLICE_ROWS + 1), nulls=nulls, slices=Slices(4))
    assert all(s.equals(whole) for s in sliced)
    assert small.equals(whole.slice(0, MIN_SLICE_ROWS + 1))


def test_a_type_without_a_writer_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="double"):
        json_objects(pa.array([{"x": 1.5}]))


def test_utf8_valid_marks_each_value_that_is_not_utf8() -> None:
    good, bad = "ünï ✓".encode(), b"caf\xe9"
    values = pa.array([good, bad, None, *[good] * 40, b"\xff", good], pa.binary())
    marks = utf8_valid(values).to_pylist()
    assert [i for i, ok in enumerate(marks) if not ok] == [1, 43]
    assert utf8_valid(pa.array([], pa.binary())).to_pylist() == []
