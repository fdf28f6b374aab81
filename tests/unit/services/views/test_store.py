"""The query service's store, its hand-over to subscribers and request parsing, without Kafka."""

import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from foundation.view_marker import ViewMarker
from services.views.api import BadRequest, parse_value
from services.views.hub import OVERFLOWED, Hub, RowFilter, Subscriber, change_data, events_of
from services.views.store import (
    READER_CACHE_KIB,
    WRITER_CACHE_KIB,
    Change,
    Snapshot,
    Store,
    infer_columns,
    key_of,
)


def _change(user: int, ratings: int, status: str = "gold") -> Change:
    row = {"user_id": user, "ratings": ratings, "club_status": status, "customer_matched": True}
    return Change("customer_ratings", key_of([user]), ("user_id",), json.dumps(row))


def test_a_value_equal_to_the_stored_one_is_no_change_and_offsets_land_with_the_rows(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    first = store.apply([_change(1, 1), _change(2, 1)], {}, {("t", 0): 2})
    again = store.apply([_change(1, 1), _change(2, 2)], {}, {("t", 0): 4})
    assert [c.key for c in first] == ["[1]", "[2]"]
    assert [c.key for c in again] == ["[2]"]
    assert store.offsets() == {("t", 0): 4}
    assert json.loads(store.get("customer_ratings", "[2]") or "{}")["ratings"] == 2
    assert (tmp_path.stat().st_mode & 0o777) == 0o700


def test_a_store_reopened_has_the_rows_and_offsets_and_reset_empties_it(tmp_path: Path) -> None:
    Store(tmp_path / "s.sqlite3").apply([_change(1, 3)], {}, {("t", 1): 9})
    store = Store(tmp_path / "s.sqlite3")
    assert store.offsets() == {("t", 1): 9} and store.count("customer_ratings") == 1
    store.reset()
    assert store.offsets() == {} and store.count("customer_ratings") == 0


def test_columns_come_from_the_first_row_until_a_marker_names_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.apply([_change(1, 3)], {}, {})
    info = store.view_info("customer_ratings")
    assert info is not None and info["key"] == ["user_id"] and info["marker"] is None
    assert {c["name"]: c["type"] for c in info["columns"]}["customer_matched"] == "boolean"
    marker = ViewMarker.decode(
        {"view": "customer_ratings", "key": ["user_id"], "columns": [{"name": "user_id", "type": "int"}]}
    )
    store.apply([], {"customer_ratings": marker}, {})
    info = store.view_info("customer_ratings")
    assert info is not None and info["columns"] == marker.columns and info["marker"] == marker


def test_filtered_scans_compare_typed_values_and_stop_at_the_limit(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.apply([_change(i, i % 3, "platinum" if i % 2 else "gold") for i in range(20)], {}, {})
    rows = [json.loads(r) for r in store.page("customer_ratings", [("club_status", "=", "platinum")], 4)[0]]
    assert len(rows) == 4 and {r["club_status"] for r in rows} == {"platinum"}
    both = store.page("customer_ratings", [("club_status", "=", "gold"), ("ratings", "=", 0)], 100)[0]
    assert sorted(json.loads(r)["user_id"] for r in both) == [0, 6, 12, 18]
    assert len(store.page("customer_ratings", [("customer_matched", "=", True)], 100)[0]) == 20


def test_key_parts_and_filters_parse_as_their_column_types() -> None:
    assert parse_value("42", "int", "k") == 42
    assert parse_value("2.5", "double", "k") == 2.5
    assert parse_value("true", "boolean", "k") is True
    assert parse_value("42", "string", "k") == "42"
    assert parse_value("-1.5e3", "double", "k") == -1500.0
    refused_texts = (("4x", "long"), ("yes", "boolean"), ("x", "double"), ("4_2", "int"), ("²", "long"))
    for text, kind in (*refused_texts, ("nan", "double"), ("inf", "double"), ("1_0.5", "double")):
        with pytest.raises(BadRequest) as refused:
            parse_value(text, kind, "filter f")
        assert refused.value.status == 400 and "filter f" in str(refused.value)


def test_inferred_types_tell_booleans_from_numbers() -> None:
    assert infer_columns({"a": True, "b": 1, "c": 1.5, "d": "x", "e": None}) == [
        {"name": "a", "type": "boolean"},
        {"name": "b", "type": "long"},
        {"name": "c", "type": "double"},
        {"name": "d", "type": "string"},
        {"name": "e", "type": "string"},
    ]


def test_a_key_changed_twice_in_one_batch_gives_both_changes_in_order_and_keeps_the_last(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.apply([_change(1, 1)], {}, {})
    applied = store.apply([_change(1, 2), _change(2, 1), _change(1, 1), _change(1, 1)], {}, {})
    assert [(c.key, json.loads(c.value or "{}")["ratings"]) for c in applied] == [
        ("[1]", 2),
        ("[2]", 1),
        ("[1]", 1),
    ]
    assert json.loads(store.get("customer_ratings", "[1]") or "{}")["ratings"] == 1
    deleted = store.apply([Change("customer_ratings", "[2]", ("user_id",), None)] * 2, {}, {})
    assert len(deleted) == 1 and store.get("customer_ratings", "[2]") is None


def test_the_views_description_is_kept_across_a_reopen(tmp_path: Path) -> None:
    marker = ViewMarker.decode(
        {"view": "customer_ratings", "key": ["user_id"], "columns": [{"name": "user_id", "type": "int"}]}
    )
    Store(tmp_path / "s.sqlite3").apply([_change(1, 3)], {"customer_ratings": marker}, {})
    info = Store(tmp_path / "s.sqlite3").view_info("customer_ratings")
    assert info is not None and info["marker"] == marker and info["key"] == ["user_id"]


def test_a_batch_reaches_each_subscriber_of_its_view_and_key_unless_its_snapshot_holds_it() -> None:
    counts: list[int] = []
    hub = Hub(on_count=counts.append)
    whole = Subscriber("customer_ratings", None, asyncio.Queue())
    one = Subscriber("customer_ratings", "[2]", asyncio.Queue())
    other = Subscriber("segment_hourly", None, asyncio.Queue())
    late = Subscriber("customer_ratings", None, asyncio.Queue(), after=7)  # its snapshot holds batch 7
    for sub in (whole, one, other, late):
        hub.add(sub)
    assert counts == [1, 2, 3, 4]  # the changelog process is told before any snapshot is read
    hub.publish(7, events_of([_change(1, 1), _change(2, 1), _change(1, 2)]))
    hub.publish(8, events_of([_change(3, 1)]))
    got = [json.loads(d) for d in _drain(whole.queue)]
    assert [(d["key"]["user_id"], d["row"]["ratings"]) for d in got] == [(1, 1), (2, 1), (1, 2), (3, 1)]
    assert [json.loads(d)["key"] for d in _drain(one.queue)] == [{"user_id": 2}]
    assert other.queue.empty()
    assert [json.loads(d)["key"] for d in _drain(late.queue)] == [{"user_id": 3}]
    hub.remove(late)
    assert counts[-1] == 3


def test_a_subscriber_whose_queue_fills_is_marked_overflowed_and_gets_no_more() -> None:
    hub = Hub()
    sub = Subscriber("customer_ratings", None, asyncio.Queue(2))
    hub.add(sub)
    hub.publish(1, events_of([_change(i, 1) for i in range(5)]))
    assert sub.overflowed
    assert _drain(sub.queue) == [OVERFLOWED]  # what it held is freed; its stream wakes and ends
    hub.publish(2, events_of([_change(9, 1)]))
    assert sub.queue.empty()


def test_a_subscriber_is_cut_off_when_its_waiting_changes_hold_more_memory_than_allowed() -> None:
    hub = Hub()
    change = events_of([_change(1, 1)])[0][2]
    room = 3 * sys.getsizeof(change)  # three such changes, though the queue takes a thousand
    sub = Subscriber("customer_ratings", None, asyncio.Queue(1000), max_bytes=room)
    hub.add(sub)
    hub.publish(1, events_of([_change(i, 1) for i in range(3)]))
    assert not sub.overflowed and sub.held_bytes <= room
    sub.taken(sub.queue.get_nowait())  # its stream took one: room for one more
    hub.publish(2, events_of([_change(7, 1)]))
    assert not sub.overflowed and sub.queue.qsize() == 3
    hub.publish(3, events_of([_change(8, 1)]))
    assert sub.overflowed and sub.held_bytes == 0
    assert _drain(sub.queue) == [OVERFLOWED]


def test_a_snapshot_names_the_last_batch_it_holds_and_the_number_survives_a_reopen(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    assert _read(store.snapshot("customer_ratings", None)) == (0, [])
    store.apply([_change(1, 1)], {}, {("t", 0): 1})
    store.apply([_change(2, 1), _change(1, 2)], {}, {("t", 0): 3})
    seq, rows = _read(store.snapshot("customer_ratings", None))
    assert seq == store.seq == 2 and [k for k, _ in rows] == ["[1]", "[2]"]
    assert _read(store.snapshot("customer_ratings", "[2]")) == (2, [("[2]", rows[1][1])])
    reopened = Store(tmp_path / "s.sqlite3")
    assert reopened.seq == 2
    reopened.apply([_change(3, 1)], {}, {})
    assert _read(Store(tmp_path / "s.sqlite3").snapshot("customer_ratings", "[3]"))[0] == 3


def test_a_snapshot_read_in_pages_keeps_its_batch_while_pulls_read_the_newest(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.apply([_change(i, 1) for i in range(5)], {}, {("t", 0): 5})
    snapshot = store.snapshot("customer_ratings", None)
    first = snapshot.page(2)
    store.apply([_change(4, 9), _change(5, 1)], {}, {("t", 0): 7})  # a batch while it is read
    assert json.loads(store.get("customer_ratings", "[4]") or "{}")["ratings"] == 9
    rest = [row for page in iter(lambda: snapshot.page(2), []) for row in page]
    snapshot.close()
    assert snapshot.seq == 1 and len(first) == 2
    assert [k for k, _ in first + rest] == ["[0]", "[1]", "[2]", "[3]", "[4]"]
    assert json.loads(rest[-1][1])["ratings"] == 1


def _read(snapshot: Snapshot) -> tuple[int, list[tuple[str, str]]]:
    rows = [row for page in iter(lambda: snapshot.page(2), []) for row in page]
    snapshot.close()
    return snapshot.seq, rows


def _drain(queue: "asyncio.Queue[str]") -> list[str]:
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out


def test_a_scan_orders_rows_by_the_key_s_typed_values_not_its_text(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    marker = ViewMarker.decode(
        {"view": "customer_ratings", "key": ["user_id"], "columns": [{"name": "user_id", "type": "int"}]}
    )
    store.apply([_change(i, 1) for i in (100, 3, 42, 7)], {"customer_ratings": marker}, {})
    users = [json.loads(r)["user_id"] for r in store.page("customer_ratings", [("ratings", "=", 1)], 10)[0]]
    assert users == [3, 7, 42, 100]  # as text, "[100]" < "[3]" < "[42]" < "[7]"
    assert [json.loads(r)["user_id"] for r in store.page("customer_ratings", [], 2)[0]] == [3, 7]


def test_a_dropped_view_loses_its_rows_description_and_offsets_and_the_others_keep_theirs(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.sqlite3")
    by_channel = Change("by_channel", key_of(["web"]), ("channel",), json.dumps({"channel": "web", "n": 3}))
    marker = ViewMarker.decode(
        {"view": "by_channel", "key": ["channel"], "columns": [{"name": "channel", "type": "string"}]}
    )
    store.apply([_change(1, 3), by_channel], {"by_channel": marker}, {("view.by_channel", 0): 5, ("t", 0): 1})
    assert store.count("by_channel") == 1 and "by_channel" in store.infos()
    store.apply([_change(2, 1)], {}, {("t", 0): 2}, {"by_channel": "view.by_channel"})
    assert store.count("by_channel") == 0 and store.get("by_channel", key_of(["web"])) is None
    assert "by_channel" not in store.infos() and "by_channel" not in Store(tmp_path / "s.sqlite3").infos()
    assert store.offsets() == {("t", 0): 2}
    assert store.count("customer_ratings") == 2


def test_a_scan_takes_ranges_reverses_and_pages_after_a_cursor_without_skipping_or_repeating(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.sqlite3")
    columns = [{"name": "user_id", "type": "int"}, {"name": "ratings", "type": "long"}]
    marker = ViewMarker.decode({"view": "customer_ratings", "key": ["user_id"], "columns": columns})
    store.apply([_change(i, i % 7) for i in range(1, 51)], {"customer_ratings": marker}, {})

    def users(filters: list[tuple[str, str, Any]], limit: int = 100, **how: Any) -> list[int]:
        return [json.loads(r)["user_id"] for r in store.page("customer_ratings", filters, limit, **how)[0]]

    assert users([("user_id", ">=", 8), ("user_id", "<", 12)]) == [8, 9, 10, 11]
    assert users([("user_id", ">", 45)], descending=True) == [50, 49, 48, 47, 46]
    assert users([("ratings", "<=", 0)]) == [7, 14, 21, 28, 35, 42, 49]
    pages, after = [], None
    while True:
        page = users([("ratings", ">=", 3)], 4, after=after)
        pages += page
        if len(page) < 4:
            break
        after = [page[-1]]
    assert pages == [i for i in range(1, 51) if i % 7 >= 3]
    assert users([], 3, after=[10], descending=True) == [9, 8, 7]
    with pytest.raises(ValueError, match="operator"):
        store.page("customer_ratings", [("ratings", "!=", 1)], 10)[0]


def test_a_filtered_subscription_gets_the_rows_that_match_and_a_removal_when_one_stops_matching() -> None:
    rows = RowFilter([("club_status", "=", "platinum"), ("ratings", ">=", 2)], ("user_id",))
    assert rows.matches({"user_id": 1, "club_status": "platinum", "ratings": 2})
    assert not rows.matches({"user_id": 1, "club_status": "platinum", "ratings": None})
    assert not rows.matches({"user_id": 1, "club_status": "platinum", "ratings": "many"})  # another type
    rows.show({"user_id": 1, "club_status": "platinum", "ratings": 3})  # from the snapshot

    def event(user: int, ratings: int, status: str) -> str:
        return change_data(_change(user, ratings, status))

    assert rows.passing(event(2, 1, "platinum")) is None  # never matched: nothing
    assert rows.passing(event(2, 5, "platinum")) == event(2, 5, "platinum")  # matches now
    assert rows.passing(event(1, 4, "gold")) == '{"key":{"user_id":1},"row":null}'  # left the filter
    assert rows.passing(event(1, 5, "gold")) is None  # already removed
    removed = change_data(Change("customer_ratings", key_of([2]), ("user_id",), None))
    assert rows.passing(removed) == '{"key":{"user_id":2},"row":null}'


def test_readers_keep_a_small_page_cache_each_and_the_writer_the_one_it_is_given(tmp_path: Path) -> None:
    """Each thread that reads (the event loop's pulls, a worker's scans) has a connection of its
    own: with a large cache, each would copy the table into the service's memory."""
    cache = "PRAGMA cache_size"
    assert Store(tmp_path / "default.sqlite3")._writer.execute(cache).fetchone() == (-WRITER_CACHE_KIB,)
    store = Store(tmp_path / "s.sqlite3", writer_cache_kib=65_536)
    assert store._writer.execute(cache).fetchone() == (-65_536,)
    readers: list[Any] = []
    for _ in range(2):
        thread = threading.Thread(target=lambda: readers.append(store._reader.execute(cache).fetchone()))
        thread.start()
        thread.join()
    assert readers == [(-READER_CACHE_KIB,)] * 2
    assert READER_CACHE_KIB < WRITER_CACHE_KIB


def test_a_page_ends_before_the_row_that_would_take_it_over_its_bytes_and_says_so(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    marker = ViewMarker.decode(
        {"view": "customer_ratings", "key": ["user_id"], "columns": [{"name": "user_id", "type": "int"}]}
    )
    rows = {
        i: json.dumps(
            {"user_id": i, "last_message": "é" * (300_000 if i == 4 else 100_000)}, ensure_ascii=False
        )
        for i in range(6)
    }
    store.apply(
        [Change("customer_ratings", key_of([i]), ("user_id",), r) for i, r in rows.items()],
        {"customer_ratings": marker},
        {},
    )
    pages, after, cut = [], None, True
    while cut:  # rows of about 200 KB (é is two bytes), one of 600 KB; 450 KB a page at most
        page, cut = store.page("customer_ratings", [], 10, after=after, max_bytes=450_000)
        pages.append([json.loads(r)["user_id"] for r in page])
        after = [pages[-1][-1]]
    assert pages == [[0, 1], [2, 3], [4], [5]]  # the long row alone: a page has its first row whole
    assert (
        store.page("customer_ratings", [], 3)[1] is False
        and len(store.page("customer_ratings", [], 3)[0]) == 3
    )
