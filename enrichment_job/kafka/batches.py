"""From a micro-batch's DataFrames to the records a transactional producer writes.

Spark builds every key and value (JSON) on the JVM; the driver receives them as Arrow columns,
a bounded number of bytes at a time (`Slices`), and only hands the bytes to the producer."""

import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from enrichment_job.kafka.transactions import Records

__all__ = ["Slices", "concat", "to_records"]

_BUCKET = "__slice_bucket"
_BYTES = "__slice_bytes"
# Rows are hashed by key into this many buckets, and whole buckets make a slice: a slice is at
# most the bound unless one bucket alone is over it (a bucket then is a slice of its own).
_BUCKETS = 1024


def concat(tables: list[pa.Table]) -> pa.Table:
    """The tables one after the other, as one chunk. PySpark's createDataFrame stops reading an
    Arrow table at its first empty chunk (PySpark 4.0.0): the rows after it would be lost."""
    return pa.concat_tables(tables).combine_chunks()


def _code_stable(per_row: int) -> int:
    """`per_row` rounded down to a power of two. The bound is a literal of the code Spark
    generates for the batch's collect: a bound of its own every batch (it follows the batch's
    records) made Spark compile that code again every batch, and the JIT then compile the new
    class: in the views job, a JIT that never settled. Rounded, a few values cover every batch
    and the compiled code is reused; rows up to half the bound may come in slices."""
    return 1 << (per_row.bit_length() - 1) if per_row > 0 else per_row


class Slices:
    """A micro-batch's rows (key, value, headers when it has them, and `extra` columns) taken to
    the driver a bounded number of bytes at a time, rather than in one collect: the rows of a
    batch weigh what its groups' values weigh, not what it read (a view's row keeps its last
    message, up to Kafka's record limit, whatever the rating that changed it), so a batch of
    200,000 changed rows could ask the driver for 200 GB.

    Entering does all of the Spark work, before the batch's transaction opens (a transaction
    open longer than the producer's timeout is aborted by the broker). It collects whole every
    row whose key and value together are at most `max_bytes` divided by `max_rows` (a bound on
    the rows the batch can have: its records times the rows each can change) rounded down to a
    power of two, and of each longer row only its size, key hash (one of 1,024 buckets) and
    `extra` columns: at most `max_bytes` in all, and one Spark job, as before, when no row is
    longer. The longer rows are then collected a slice at a time, each slice's keys and values
    `max_bytes` at most (unless one bucket alone weighs more: it is a slice of its own), the
    rows of one key in one slice, from the batch run again and persisted meanwhile; each slice
    goes to an Arrow file in a temporary folder (TMPDIR) as it comes, which iterating reads back
    one at a time and exiting removes. `max_rows` None (no bound is known): every row is a
    longer one. Each slice is sorted by `order_by`."""

    def __init__(
        self,
        df: DataFrame,
        max_bytes: int,
        max_rows: int | None,
        order_by: tuple[str, ...] = (),
        extra: tuple[str, ...] = (),
    ) -> None:
        """Does no Spark work of its own: entering does."""
        self.data = ["key", "value", *(["headers"] if "headers" in df.columns else [])]
        self.df, self.others = df, [*order_by, *extra]
        self.max_bytes, self.order_by = max_bytes, order_by
        self.per_row = _code_stable(max_bytes // max_rows) if max_rows else -1  # longer rows: slices
        self.rows = self.bytes = 0
        self.largest = 0  # the bytes of the largest collect
        self.plan: list[list[int]] = []  # the buckets of each slice of the longer rows
        self.extras = pa.table({})  # the `extra` columns of every row, longer ones too
        self._first: pa.Table | None = None
        self._files: list[Path] = []
        self._spill = ExitStack()

    def _columns(self, whole_up_to: int | None) -> list[str]:
        """The rows' columns (their data only for rows of at most `whole_up_to` bytes; for every
        row with None), each's size and bucket, as SQL: one py4j call for the projection, where
        Column functions cost one each (30 made it 25 ms slower a batch on a busy driver)."""
        size = "coalesce(octet_length(`key`), 0) + coalesce(octet_length(`value`), 0)"
        data = {"key": "CAST(`key` AS BINARY)", "value": "CAST(`value` AS BINARY)", "headers": "`headers`"}
        if whole_up_to is not None:
            data = {name: f"CASE WHEN {size} <= {whole_up_to} THEN {sql} END" for name, sql in data.items()}
        picked = [f"{sql} AS `{name}`" for name, sql in data.items() if name in self.data]
        others = [f"`{name}`" for name in self.others]
        bucket = f"CAST(pmod(xxhash64(`key`), {_BUCKETS}) AS INT) AS `{_BUCKET}`"
        return [*picked, *others, f"{size} AS `{_BYTES}`", bucket]

    def __enter__(self) -> "Slices":
        first = self.df.selectExpr(*self._columns(self.per_row)).toArrow()
        sizes = first.column(_BYTES)
        self.rows, self.bytes = first.num_rows, pc.sum(sizes).as_py() or 0
        self.extras = first.select(self.others)
        in_first = pc.less_equal(sizes, self.per_row)
        self._first = first.filter(in_first).drop_columns([_BYTES, _BUCKET])
        self.largest = pc.sum(sizes.filter(in_first)).as_py() or 0
        longer = first.filter(pc.invert(in_first))
        if longer.num_rows:
            self._plan(longer.group_by(_BUCKET).aggregate([(_BYTES, "sum")]).sort_by(_BUCKET))
            try:
                self._collect_slices()
            except BaseException:
                self._spill.close()
                raise
        return self

    def _plan(self, by_bucket: pa.Table) -> None:
        """Whole buckets into slices of at most `max_bytes`, in bucket order."""
        buckets: list[int] = []
        weight = 0
        for b, n in zip(
            by_bucket.column(_BUCKET).to_pylist(), by_bucket.column(f"{_BYTES}_sum").to_pylist(), strict=True
        ):
            if buckets and weight + n > self.max_bytes:
                self.plan.append(buckets)
                self.largest = max(self.largest, weight)
                buckets, weight = [], 0
            buckets.append(b)
            weight += n
        self.plan.append(buckets)
        self.largest = max(self.largest, weight)

    def _collect_slices(self) -> None:
        folder = Path(self._spill.enter_context(tempfile.TemporaryDirectory(prefix="batch-slices-")))
        cached = self.df.selectExpr(*self._columns(None)).where(f"`{_BYTES}` > {self.per_row}").persist()
        try:
            for i, buckets in enumerate(self.plan):
                chosen = f"`{_BUCKET}` IN ({', '.join(map(str, buckets))})"
                table = cached.where(chosen).drop(_BYTES, _BUCKET).toArrow()
                path = folder / f"{i}.arrow"
                with pa.OSFile(str(path), "wb") as out, pa.ipc.new_file(out, table.schema) as writer:
                    writer.write_table(table)
                self._files.append(path)
                del table
        finally:
            cached.unpersist()

    def describe(self) -> str:
        return (
            f"{self.rows} rows of {self.bytes} bytes taken in {1 + len(self.plan)} collects of at most"
            f" {self.largest} bytes (rows over {max(self.per_row, 0)} bytes in {len(self.plan)} slices),"
            f" the bound {self.max_bytes}"
        )

    def __iter__(self) -> Iterator[pa.Table]:
        assert self._first is not None, "entered first"
        yield self._sorted(self._first)
        for path in self._files:
            with pa.OSFile(str(path)) as source:  # read into memory: nothing refers to the file after
                table = pa.ipc.open_file(source).read_all()
            yield self._sorted(table)

    def _sorted(self, table: pa.Table) -> pa.Table:
        return table.sort_by([(name, "ascending") for name in self.order_by]) if self.order_by else table

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._spill.close()


def to_records(table: pa.Table, topic: str) -> Records:
    headers = None
    if "headers" in table.column_names:
        headers = [
            [(h["key"], h["value"]) for h in row] if row is not None else None
            for row in table.column("headers").to_pylist()
        ]
    return Records(topic, table.column("key").to_pylist(), table.column("value").to_pylist(), headers)
