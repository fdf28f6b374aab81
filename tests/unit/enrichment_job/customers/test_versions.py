"""The as-of lookup over the in-memory customer versions."""

from typing import Any

import pyarrow as pa
import pytest

from enrichment_job.customers.versions import FOLD_ROWS, VERSIONS, VersionStore
from tests.support.change_events import sample_versions as versions

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def store_of(table: pa.Table, split: int | None) -> VersionStore:
    """The versions from offset `split` on added after the others (the recent part)."""
    if split is None:
        return VersionStore(table)
    store = VersionStore(table.slice(0, split))
    store.add(table.slice(split))
    return store


def statuses(store: VersionStore, pairs: list[tuple[int | None, int | None]], grace_ms: int) -> list[Any]:
    """Per (user_id, rating_time): the picked version's club status and op, or None."""
    picks = store.pick(
        pa.array([u for u, _ in pairs], pa.int32()), pa.array([t for _, t in pairs], pa.int64()), grace_ms
    )
    club_status, op = picks.take("club_status").to_pylist(), picks.take("op").to_pylist()
    return [None if o is None else (s, o) for s, o in zip(club_status, op, strict=True)]


# (user_id, rating_time, grace_ms, (club status, op) of the version picked, or None)
CASES = [
    (7, 1_500, 0, ("silver", "c")),  # the version valid at the rating's time
    (7, 2_000, 0, ("platinum", "u")),  # an update opens its version at its own time
    (7, 3_500, 0, (None, "d")),  # deleted: the delete's version (the join matches no one)
    (7, 4_000, 0, ("gold", "c")),  # re-inserted
    (7, 500, 0, None),  # before the customer existed, no grace
    (7, 500, 600, ("silver", "c")),  # created within the grace after the rating: its first row
    (8, 9_000, 1_000, ("gold", "c")),  # exactly at the grace limit
    (8, 8_999, 1_000, None),  # beyond the grace: none
    (99, 1_500, 5_000, None),  # no such customer
    (None, 1_500, 5_000, None),  # no user_id (a dead letter)
    (7, None, 5_000, None),  # no rating_time
]


@pytest.mark.parametrize("split", [None, 1, 3, 5])
def test_each_rating_picks_the_version_valid_at_its_time_or_within_the_grace(
    spark: Any, split: int | None
) -> None:
    store = store_of(versions(spark), split)
    for grace_ms in sorted({c[2] for c in CASES}):
        cases = [c for c in CASES if c[2] == grace_ms]
        assert statuses(store, [(u, t) for u, t, _, _ in cases], grace_ms) == [c[3] for c in cases]


@pytest.mark.parametrize("split", [None, 1, 3])
def test_settled_says_a_version_valid_at_the_rating_time_was_found(spark: Any, split: int | None) -> None:
    store = store_of(versions(spark), split)
    picks = store.pick(pa.array([7, 7, 8, 99], pa.int32()), pa.array([1_500, 500, 9_500, 1], pa.int64()), 600)
    assert picks.settled.tolist() == [True, False, False, False]
    assert picks.index.is_valid().to_pylist() == [True, True, True, False]


def test_of_two_versions_from_the_same_millisecond_the_later_in_the_topic_wins() -> None:
    rows = [
        {"id": 1, "club_status": s, "valid_from": 1_000, "cdc_partition": 0, "cdc_offset": o, "op": "u"}
        for s, o in (("gold", 5), ("silver", 4), ("platinum", 6))
    ]
    table = pa.Table.from_pylist(rows, schema=VERSIONS)
    for store in (VersionStore(table), store_of(table, 1), store_of(table, 2)):
        assert statuses(store, [(1, 1_000)], 0) == [("platinum", "u")]


def test_many_versions_of_one_customer_and_a_fold_of_the_recent_part() -> None:
    rows = [
        {"id": 3, "club_status": str(n), "valid_from": 10 * n, "cdc_partition": 0, "cdc_offset": n, "op": "u"}
        for n in range(FOLD_ROWS + 200)
    ]
    table = pa.Table.from_pylist(rows, schema=VERSIONS)
    store = VersionStore(table.slice(0, 100))
    store.add(table.slice(100, 10))
    assert store.recent_rows == 10
    assert statuses(store, [(3, 1_095), (3, 1_100), (3, 5)], 0) == [("109", "u"), ("109", "u"), ("0", "u")]
    store.add(table.slice(110))  # past FOLD_ROWS: folded into the base
    assert store.recent_rows == 0
    assert len(store) == FOLD_ROWS + 200
    times = [(3, 10 * n + 5) for n in range(0, FOLD_ROWS + 200, 997)]
    assert statuses(store, times, 0) == [(str(n), "u") for n in range(0, FOLD_ROWS + 200, 997)]


def test_an_empty_store_picks_nothing() -> None:
    assert statuses(VersionStore(), [(7, 1_000)], 5_000) == [None]


def test_a_picked_column_gathered_part_by_part_equals_the_whole_table_take() -> None:
    rows = [
        {
            "id": n % 50,
            "email": f"{n}@x" if n % 7 else None,
            "club_status": str(n),
            "valid_from": n,
            "cdc_partition": 0,
            "cdc_offset": n,
            "op": "u",
        }
        for n in range(300)
    ]
    table = pa.Table.from_pylist(rows, schema=VERSIONS)
    store = store_of(table, 260)
    assert store.recent_rows == 40
    ids = pa.array([n % 60 for n in range(120)] + [None], pa.int32())
    times = pa.array([299 - n for n in range(120)] + [5], pa.int64())
    picks = store.pick(ids, times, 0)
    assert len(picks.parts) == 2
    inside_recent = [i for i in picks.index.to_pylist() if i is not None and i >= 260]
    assert inside_recent and None in picks.index.to_pylist()  # both parts and no pick
    for name in VERSIONS.names:
        assert picks.take(name).to_pylist() == picks.table.column(name).take(picks.index).to_pylist(), name
