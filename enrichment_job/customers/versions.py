"""The customer versions the join reads: in memory on the driver, as Arrow columns sorted by
customer id and version order, and the as-of lookup over them.

Versions are only ever added (a change, a delete, a snapshot read each open a version), so the
store is a large sorted `base` and a small sorted `recent` part that each batch's new versions
join. Once `recent` holds `FOLD_ROWS` versions or a tenth of the base, whichever is more, it
is merged into the base: a merge re-sorts the whole table, so it is rare, and a lookup
searches both parts.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from enrichment_job.kafka.batches import concat
from enrichment_job.records.schemas import VERSION_FIELDS

__all__ = ["FOLD_ROWS", "VERSIONS", "Picks", "VersionStore"]

ORDER = ("id", "valid_from", "cdc_partition", "cdc_offset")
FOLD_ROWS = 10_000
VERSIONS = to_arrow_schema(VERSION_FIELDS)


@dataclass(frozen=True)
class _Part:
    """Versions sorted by ORDER, with the sort keys as numpy arrays for the lookup."""

    table: pa.Table
    ids: np.ndarray
    valid_from: np.ndarray
    partition: np.ndarray
    offset: np.ndarray

    @staticmethod
    def of(table: pa.Table) -> "_Part":
        # A version without id or valid_from matches no rating (as SQL's comparisons with null).
        table = table.filter(
            pc.and_(pc.is_valid(table.column("id")), pc.is_valid(table.column("valid_from")))
        )
        table = concat([table.sort_by([(name, "ascending") for name in ORDER])])

        def keys(name: str) -> np.ndarray:
            return np.asarray(pc.fill_null(table.column(name), 0).to_numpy(), np.int64)

        return _Part(table, keys("id"), keys("valid_from"), keys("cdc_partition"), keys("cdc_offset"))

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def lookup(
        self, ids: np.ndarray, times: np.ndarray, deadlines: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per rating: the customer's latest version valid at its time (valid_from <= time), and
        its first version if that begins by the deadline; -1 for none."""
        lo = np.searchsorted(self.ids, ids, "left")
        hi = np.searchsorted(self.ids, ids, "right")
        # The first version of the customer whose valid_from is after the time: a binary search
        # within each customer's versions, all ratings at once.
        low, high = lo.copy(), hi.copy()
        while True:
            open_ = low < high
            if not open_.any():
                break
            mid = (low + high) // 2
            after = np.zeros(len(mid), bool)
            after[open_] = self.valid_from[mid[open_]] > times[open_]
            high = np.where(open_ & after, mid, high)
            low = np.where(open_ & ~after, mid + 1, low)
        at = np.where(low > lo, low - 1, -1)
        has = lo < hi
        first_from = (
            self.valid_from[np.minimum(lo, max(len(self) - 1, 0))]
            if len(self)
            else np.zeros(len(lo), np.int64)
        )
        first = np.where(has & (first_from <= deadlines), lo, -1)
        return at, first

    def order(self, index: np.ndarray) -> list[np.ndarray]:
        """The version order keys (valid_from, cdc_partition, cdc_offset) of rows `index`."""
        return [self.valid_from[index], self.partition[index], self.offset[index]]


class _Best:
    """Per rating, the latest (or earliest) version offered so far by the parts: its row in
    the store's table (-1: none) and its order keys."""

    def __init__(self, n: int, latest: bool) -> None:
        self.latest = latest
        self.index = np.full(n, -1, np.int64)
        self.keys = [np.zeros(n, np.int64) for _ in range(3)]

    def offer(self, found: np.ndarray, part: "_Part", shift: int) -> None:
        """`found`: rows of `part` (-1: none); `shift`: where the part starts in the table."""
        take = found >= 0
        mine = part.order(np.where(take, found, 0))
        (af, ap, ao), (bf, bp, bo) = (mine, self.keys) if self.latest else (self.keys, mine)
        after = (af > bf) | ((af == bf) & ((ap > bp) | ((ap == bp) & (ao > bo))))
        take &= (self.index < 0) | after
        self.index[take] = found[take] + shift
        for key, new in zip(self.keys, mine, strict=True):
            key[take] = new[take]


@dataclass(frozen=True)
class Picks:
    """The as-of join's result per rating: the row of `table` it joined (null: none) and
    whether a version valid at its time was found (`settled`)."""

    table: pa.Table  # the store's versions, base then recent
    index: pa.Array  # int64, null where no version was picked
    settled: np.ndarray  # bool
    parts: tuple[pa.Table, ...] = ()  # `table`'s parts (each one chunk), in its order

    def take(self, name: str) -> pa.Array:
        """Column `name` of each rating's picked version (null where none). Gathered part by
        part: Arrow's take over a column of several chunks first copies the whole column into
        one (a few milliseconds a string column at a million versions, every batch)."""
        parts = self.parts or (self.table,)
        if len(parts) == 1:
            return pc.take(parts[0].column(name), self.index)
        out: pa.Array | None = None
        for part, (local, inside) in zip(parts, self._within_parts, strict=True):
            got = pc.take(part.column(name), local)
            out = got if out is None else pc.if_else(inside, got, out)
        assert out is not None
        return out

    @cached_property
    def _within_parts(self) -> list[tuple[pa.Array, pa.Array]]:
        """Per part: each rating's row within it (null where its pick is elsewhere or none), and
        whether its pick is in it. The same for every column taken."""
        index = np.asarray(pc.fill_null(self.index, -1).to_numpy(zero_copy_only=False), np.int64)
        within, start = [], 0
        for part in self.parts:
            end = start + part.num_rows
            inside = (index >= start) & (index < end)
            within.append(
                (pa.array(np.where(inside, index - start, 0), pa.int64(), mask=~inside), pa.array(inside))
            )
            start = end
        return within


class VersionStore:
    """Every customer version known to the job, for the as-of join."""

    def __init__(self, versions: pa.Table | None = None) -> None:
        self._base = _Part.of(versions) if versions is not None and versions.num_rows else None
        self._recent: _Part | None = None
        self._table: pa.Table | None = None  # the parts as one table (chunked), built once

    def __len__(self) -> int:
        return sum(len(p) for p in self._parts())

    def _parts(self) -> list[_Part]:
        return [p for p in (self._base, self._recent) if p is not None]

    @property
    def recent_rows(self) -> int:
        return len(self._recent) if self._recent is not None else 0

    def add(self, versions: pa.Table) -> None:
        """New versions, visible to the next lookup."""
        if not versions.num_rows:
            return
        parts = [versions] if self._recent is None else [self._recent.table, versions]
        base_rows = len(self._base) if self._base is not None else 0
        rows = sum(t.num_rows for t in parts)
        if self._base is None or rows >= max(FOLD_ROWS, base_rows // 10):
            if self._base is not None:
                parts.insert(0, self._base.table)
            self._base, self._recent = _Part.of(concat(parts)), None
        else:
            self._recent = _Part.of(concat(parts))
        self._table = None

    def table(self) -> pa.Table:
        """All versions, sorted per part (base, then recent), without copying them."""
        if self._table is None:
            parts = self._parts()
            self._table = pa.concat_tables([p.table for p in parts]) if parts else VERSIONS.empty_table()
        return self._table

    def pick(
        self, ids: pa.Array | pa.ChunkedArray, times: pa.Array | pa.ChunkedArray, grace_ms: int
    ) -> Picks:
        """Each rating's version: the customer's latest valid at its time (valid_from <= time);
        with none, its first version if that begins within `grace_ms` after the time (the row
        was created a moment after the rating). A rating without id or time picks none.

        Versions are ordered by (valid_from, cdc_partition, cdc_offset): of two versions valid
        from the same millisecond, the one later in the CDC topic is the later one."""
        known = pc.and_(pc.is_valid(ids), pc.is_valid(times))
        mask = np.asarray(known.to_numpy(zero_copy_only=False), bool)
        user = np.asarray(pc.fill_null(ids, 0).to_numpy(zero_copy_only=False), np.int64)
        at_time = np.asarray(pc.fill_null(times, 0).to_numpy(zero_copy_only=False), np.int64)
        latest, earliest = _Best(len(user), latest=True), _Best(len(user), latest=False)
        shift = 0
        for part in self._parts():
            at, first = part.lookup(user, at_time, at_time + grace_ms)
            latest.offer(np.where(mask, at, -1), part, shift)
            earliest.offer(np.where(mask, first, -1), part, shift)
            shift += len(part)
        at, first = latest.index, earliest.index
        chosen = np.where(at >= 0, at, first)
        index = pa.array(chosen, pa.int64(), mask=chosen < 0)
        return Picks(self.table(), index, at >= 0, tuple(p.table for p in self._parts()))
