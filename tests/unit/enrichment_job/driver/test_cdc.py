"""Change events into versions and the compacted topic's records: the database clock, re-sends
skipped, a binlog that started over (RESET MASTER, a restore, a failover) told apart from a
re-send and reported, and unreadable events dead-lettered with their bytes."""

import json
import logging
from typing import Any

import pyarrow as pa
import pytest

from enrichment_job.customers.table import CdcState
from enrichment_job.customers.versions import VersionStore
from enrichment_job.driver.cdc import UNAVAILABLE, chain, fill_unavailable, in_order, ingest
from enrichment_job.records import change_events
from enrichment_job.records.transforms import with_validity
from tests.support.change_events import (
    cdc_records,
    change_event,
    heartbeat,
    ingest_values,
    pg_change_event,
    versions_frame,
)

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def _ingest(spark: Any, events: list[bytes]) -> Any:
    raw = cdc_records(events, first_offset=100)
    state = CdcState(clock_ms=50_000, position=(-1, 5, 1_000, 0), cdc_to={0: 100})
    return ingest(raw, state, "customers", "dlq", spark)


def test_a_resend_of_recent_positions_is_skipped_quietly(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    result = _ingest(
        spark,
        [
            change_event("u", 7, 49_000, 900, binlog_file=5),
            change_event("u", 7, 50_000, 1_000, binlog_file=5),
            change_event("u", 7, 51_000, 1_100, binlog_file=5),
        ],
    )
    assert (result.duplicates, result.regressions, result.changes) == (2, 0, 1)
    assert result.state == CdcState(51_000, (-1, 5, 1_100, 0), {0: 103})
    assert "earlier binlog file" not in caplog.text


def test_changes_from_an_earlier_binlog_file_are_reported_loudly(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="enrichment_job"):
        result = _ingest(
            spark,
            [
                change_event("u", 7, 60_000, 4, binlog_file=1),
                change_event("u", 8, 61_000, 400, binlog_file=1),
            ],
        )
    assert (result.duplicates, result.regressions, result.changes) == (2, 2, 0)
    expected = (
        "2 CDC events came from an earlier binlog file than the furthest position read, (-1, 5, 1000, 0)"
    )
    assert expected in caplog.text
    assert "RESET MASTER" in caplog.text


def test_a_new_snapshot_below_the_furthest_position_starts_the_history_over(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # RESET MASTER, then a new connector: its snapshot reads at (1, 4), then its changes.
    with caplog.at_level(logging.WARNING, logger="enrichment_job"):
        result = _ingest(
            spark,
            [
                change_event("r", 7, 60_000, 4, binlog_file=1, snapshot="first", club_status="gold"),
                change_event("r", 8, 60_000, 4, binlog_file=1, snapshot="last"),
                change_event("u", 7, 61_000, 10, binlog_file=1, club_status="platinum"),
                change_event("u", 8, 62_000, 20, binlog_file=1, club_status="bronze"),
            ],
        )
    assert (result.duplicates, result.regressions, result.changes) == (0, 0, 4)
    assert result.rewinds == (((-1, 5, 1_000, 0), (-1, 1, 4, 0)),)
    assert [v["club_status"] for v in result.versions.to_pylist()] == ["gold", "silver", "platinum", "bronze"]
    assert result.state.position == (-1, 1, 20, 0)
    expected = (
        "a snapshot in the CDC topic at position (-1, 1, 4, 0) (GTID sequence number or last commit "
        "LSN, binlog file, position or LSN, row) starts below the furthest position read before it, "
        "(-1, 5, 1000, 0)"
    )
    assert expected in caplog.text
    assert "earlier binlog file" not in caplog.text


def test_after_a_new_snapshot_re_sends_are_still_skipped_and_incremental_reads_start_nothing() -> None:
    values = [
        change_event("u", 7, 1_000, 500, binlog_file=3),
        change_event("r", 7, 2_000, 100, binlog_file=3, snapshot="true"),  # a snapshot at (3, 100)
        change_event("u", 7, 2_500, 100, binlog_file=3),  # the first transaction after it: no re-send
        change_event("u", 7, 3_000, 200, binlog_file=3),
        change_event("u", 7, 4_000, 300, binlog_file=3),
        change_event("u", 7, 3_000, 200, binlog_file=3),  # Debezium restarted: a re-send
        change_event("r", 7, 5_000, 50, binlog_file=3, snapshot="incremental"),  # no new history
        change_event("u", 7, 3_000, 250, binlog_file=3),  # below (3, 300): a re-send still
    ]
    clock = _clock(values)
    assert clock.duplicate.tolist() == [False, False, False, False, False, True, False, True]
    assert clock.rewound.tolist() == [False, True, False, False, False, False, False, False]
    assert clock.rewinds == [((-1, 3, 500, 0), (-1, 3, 100, 0))]
    assert clock.position == (-1, 3, 300, 0)
    # A batch that ends on the snapshot carries its position, just below the next transaction.
    assert _clock(values[:2]).position == (-1, 3, 100, -2)
    assert _clock(values[2:4], 5_000, (-1, 3, 100, -2)).duplicate.tolist() == [False, False]


def test_change_events_become_versions_and_the_compacted_topics_records(spark: Any) -> None:
    values = [
        change_event("c", 7, 1_000, 10),
        change_event("u", 7, 2_000, 20, club_status="platinum", comments='say "hi"\n'),
        change_event("d", 7, 3_000, 30),
        None,  # the tombstone after the delete
    ]
    result = ingest_values(spark, values)
    versions = with_validity(spark.createDataFrame(result.versions)).orderBy("valid_from").collect()
    assert [(v.id, v.valid_from, v.valid_to, v.deleted, v.club_status, v.cdc_offset) for v in versions] == [
        (7, 1_000, 2_000, False, "silver", 0),
        (7, 2_000, 3_000, False, "platinum", 1),
        (7, 3_000, None, True, None, 2),
    ]
    assert (result.events, result.changes, len(result.dead)) == (4, 3, 0)
    # The customers topic gets the latest of each customer alone: the delete's tombstone.
    assert (result.customers.keys, result.customers.values) == ([b"7"], [None])
    kept = ingest_values(spark, values[:2]).customers
    assert kept.keys == [b"7"] and kept.values[0] is not None
    assert json.loads(kept.values[0]) == {
        "id": 7,
        "first_name": "Ada",
        "last_name": "L",
        "club_status": "platinum",
        "comments": 'say "hi"\n',
    }
    assert result.state == CdcState(3_000, (-1, 1, 30, 0), {0: 4})


def test_unreadable_events_are_dead_letters_with_their_bytes_and_the_rest_goes_on(spark: Any) -> None:
    values = [
        change_event("c", 7, 1_000, 10),
        b"garbage",
        json.dumps({"op": "x", "after": {"id": 1}, "source": {"ts_ms": 1}}).encode(),
        change_event("u", 7, 2_000, 20, club_status="gold"),
    ]
    assert change_events.read_arrow(cdc_records(values)) is None  # Spark's parse tells why
    result = ingest_values(spark, values)
    assert [v["club_status"] for v in result.versions.to_pylist()] == ["silver", "gold"]
    assert result.dead.values == [b"garbage", values[2]]
    assert result.dead.headers is not None
    headers = [dict(h or []) for h in result.dead.headers]
    assert [h["dlq.reason"] for h in headers] == [b"not a JSON object", b"unknown op"]
    assert [(h["dlq.stage"], h["dlq.topic"], h["dlq.offset"]) for h in headers] == [
        (b"cdc", b"asgard.demo.customers", b"1"),
        (b"cdc", b"asgard.demo.customers", b"2"),
    ]
    assert result.state.cdc_to == {0: 4}


def _renamed(value: bytes, old: str, new: str | None) -> bytes:
    """The change event with a customer column renamed (None: dropped) in its rows."""
    event = json.loads(value)
    for side in ("before", "after"):
        row = event[side]
        if row is not None:
            kept = row.pop(old)
            if new is not None:
                row[new] = kept
    return json.dumps(event).encode()


@pytest.mark.parametrize("new", ["tier", None])
def test_a_change_event_without_a_customer_column_is_a_dead_letter_not_a_null(
    spark: Any, new: str | None
) -> None:
    """A column renamed or dropped in the database: Debezium's rows no longer name it. Read as
    null, a club_status would turn the customer's alerts off without a word; the event is
    dead-lettered with the missing column's name instead, and the customer keeps its version."""
    values = [
        change_event("c", 7, 1_000, 10, club_status="platinum"),
        _renamed(change_event("u", 7, 2_000, 20, club_status="platinum"), "club_status", new),
        _renamed(change_event("c", 8, 3_000, 30), "club_status", new),
        _renamed(change_event("d", 7, 4_000, 40), "club_status", new),  # a delete needs the id only
        heartbeat("1970-01-01T00:00:05.000Z", 50),
    ]
    assert change_events.read_arrow(cdc_records(values)) is None  # Spark's parse tells why
    result = ingest_values(spark, values)
    assert [(v["id"], v["club_status"], v["deleted"]) for v in result.versions.to_pylist()] == [
        (7, "platinum", False),
        (7, None, True),
    ]
    assert result.dead.values == values[1:3]
    assert result.dead.headers is not None
    reasons = [dict(h or [])["dlq.reason"].decode() for h in result.dead.headers]
    assert (
        reasons
        == ["change event without customer columns (renamed or dropped in the database?): club_status"] * 2
    )


def test_a_change_event_that_is_not_utf8_is_a_dead_letter(spark: Any) -> None:
    latin1 = change_event("c", 8, 2_000, 20, last_name="M-ller").replace(b"M-ller", b"M\xfcller")
    values = [change_event("c", 7, 1_000, 10), latin1]
    assert change_events.read_arrow(cdc_records(values)) is None
    result = ingest_values(spark, values)
    assert [v["id"] for v in result.versions.to_pylist()] == [7]
    assert result.dead.values == [latin1]
    assert result.dead.headers is not None
    assert dict(result.dead.headers[0] or [])["dlq.reason"] == b"value is not valid UTF-8"


def test_a_column_added_in_the_database_changes_nothing(spark: Any) -> None:
    values = [change_event("c", 7, 1_000, 10, loyalty_points=5), change_event("u", 7, 2_000, 20, tier="x")]
    assert change_events.read_arrow(cdc_records(values)) is not None
    result = ingest_values(spark, values)
    assert (result.changes, len(result.dead)) == (2, 0)


def test_a_column_name_inside_a_text_does_not_stand_for_the_column(spark: Any) -> None:
    """Only a member counts: a customer's comment that quotes a column's name is no column."""
    quoting = change_event("c", 7, 1_000, 10, comments='"club_status": "platinum"')
    value = _renamed(quoting, "club_status", None)
    assert change_events.read_arrow(cdc_records([value])) is None
    assert len(ingest_values(spark, [value]).dead) == 1


def test_an_update_whose_after_row_lacks_a_null_column_goes_to_sparks_parse() -> None:
    """An update carries two rows: a null column named in `before` alone is missing from
    `after`, and Arrow's null there would stand for it; both rows must name it."""
    both = change_event("u", 7, 1_000, 10, comments=None)
    event = json.loads(both)
    del event["after"]["comments"]
    only_before = json.dumps(event, separators=(",", ":")).encode()
    assert change_events.read_arrow(cdc_records([both])) is not None
    assert change_events.read_arrow(cdc_records([only_before])) is None


@pytest.mark.parametrize("missing", [None, 0, 3])
def test_a_null_column_is_looked_for_in_each_row_however_many_rows_have_it(missing: int | None) -> None:
    """A fresh start's history has a null column in nearly every row (the search then runs
    over every value at once) or in a few (only those are searched): either way, the one row
    that does not name it is found."""
    values = [change_event("c", 7 + i, 1_000 * (i + 1), 10 + i, comments=None) for i in range(5)]
    values.append(change_event("c", 20, 9_000, 30, comments="kept"))
    if missing is not None:
        values[missing] = _renamed(values[missing], "comments", None)
    found = change_events.read_arrow(cdc_records(values))
    assert (found is None) == (missing is not None)
    few = [values[0], *[change_event("c", 30 + i, 10_000 + i, 40 + i, comments="x") for i in range(5)]]
    assert (change_events.read_arrow(cdc_records(few)) is None) == (missing == 0)


@pytest.mark.parametrize("value", [b"null", b"[1]", b" " + change_event("c", 7, 1_000, 10)])
def test_a_value_that_is_not_one_object_goes_to_sparks_parse(spark: Any, value: bytes) -> None:
    """Arrow's reader takes a lone null for an object of nulls (and a batch of only that
    crashes it): such a value is left to Spark, alone in its batch too."""
    assert change_events.read_arrow(cdc_records([value])) is None
    result = ingest_values(spark, [value])
    assert len(result.dead) == (0 if value.startswith(b" ") else 1)


def test_arrow_and_spark_read_a_batch_the_same(spark: Any) -> None:
    values = [
        change_event("r", 9, 50_000, 5, update_ts="1970-01-01T00:00:10Z"),
        heartbeat("1970-01-01T00:00:51.100Z", 6),
        change_event("u", 9, 52_000, 7, email="ada@example.com", region="EU"),
        change_event("d", 9, 53_000, 8),
        None,
        change_event("c", 10, 54_000, 9, binlog_file=12, gtid=77, gender="f"),
    ]
    raw = cdc_records(values, first_offset=40)
    by_arrow = change_events.read_arrow(raw)
    assert by_arrow is not None
    by_spark = change_events.read_spark(spark.createDataFrame(raw, change_events.RAW_SCHEMA))
    assert by_arrow.to_pylist() == by_spark.to_pylist()
    assert by_arrow.column("binlog_file").to_pylist() == [1, 1, 1, 1, None, 12]
    assert by_arrow.column("gtid_seq").to_pylist() == [None, None, None, None, None, 77]
    assert by_arrow.column("reading_ms").to_pylist() == [None, 51_100, 52_000, 53_000, None, 54_000]


def test_a_replayed_change_event_does_not_make_a_second_version(spark: Any) -> None:
    values = [change_event("c", 7, 1_000, 10), change_event("c", 7, 1_000, 10)]
    result = ingest_values(spark, values)
    assert (result.changes, result.duplicates) == (1, 1)


def _clock(values: list[bytes | None], clock_ms: int | None = None, position: Any = None) -> Any:
    events = change_events.read_arrow(cdc_records(values))
    assert events is not None
    return change_events.Clock(events, clock_ms, position)


def test_a_change_resent_after_a_restart_is_a_duplicate_even_in_a_later_batch() -> None:
    # Debezium re-sends from an older binlog position: A(10), B(20), then A(10) and B(20) again.
    values = [change_event("u", 7, 1_000, 10), change_event("u", 7, 2_000, 20, club_status="gold")] * 2
    assert _clock(values).duplicate.tolist() == [False, False, True, True]
    assert _clock(values).position == (-1, 1, 20, 0)
    # The same, with the position carried from an earlier batch.
    assert _clock(values[:1], 5_000, (-1, 1, 20, 0)).duplicate.tolist() == [True]
    assert _clock(values[:1], 5_000, (-1, 1, 5, 0)).duplicate.tolist() == [False]


def test_heartbeats_move_the_clock_in_milliseconds_and_changes_take_it(spark: Any) -> None:
    values = [
        heartbeat("1970-01-01T00:00:01.250Z", 10),
        change_event("u", 7, 1_000, 20),  # committed after the beat at 1.250 s: valid from 1.250 s
        heartbeat("1970-01-01T00:00:01.200Z", 30),  # a reading that went back: the clock does not
        change_event("u", 7, 2_000, 40, club_status="gold"),  # a new second: 2.000 s
    ]
    assert _clock(values).clock_ms.to_pylist() == [1_250, 1_250, 1_250, 2_000]
    assert [v["valid_from"] for v in ingest_values(spark, values).versions.to_pylist()] == [1_250, 2_000]
    # A clock carried from an earlier batch is a floor.
    assert _clock(values[:2], 1_900).clock_ms.to_pylist() == [1_900, 1_900]
    assert ingest_values(spark, values[:2], clock_ms=1_900).state.clock_ms == 1_900


def test_a_snapshot_row_is_valid_from_its_own_update_time_not_the_snapshot_time(spark: Any) -> None:
    values = [
        change_event("r", 9, 50_000, 5, update_ts="1970-01-01T00:00:10Z"),
        change_event("r", 10, 50_000, 6),  # no update_ts: the snapshot's time
    ]
    versions = versions_frame(spark, values).orderBy("id").collect()
    assert [(v.id, v.valid_from) for v in versions] == [(9, 10_000), (10, 50_000)]


def test_a_snapshot_does_not_start_the_clock_before_its_last_row() -> None:
    """Snapshot reads carry the snapshot's time while rows valid from long before are still to
    come: releasing ratings on it would join them before their customers were loaded."""
    values = [
        change_event("r", 9, 50_000, 5, update_ts="1970-01-01T00:00:10Z"),
        change_event("r", 10, 50_000, 5, update_ts="1970-01-01T00:00:20Z"),
        heartbeat("1970-01-01T00:00:51.100Z", 6),  # the first change streamed after the snapshot
    ]
    clock = _clock(values)
    assert clock.clock_ms.to_pylist() == [None, None, 51_100]
    assert clock.duplicate.tolist() == [False, False, False]


def test_a_heartbeat_time_or_binlog_file_that_does_not_read_is_no_dead_letter(spark: Any) -> None:
    """Spark reads such a batch (Arrow's casts would fail): the heartbeat's reading is its
    source time, and a binlog file name without a number has no place in the order."""
    beat = json.loads(heartbeat("not a time", 10))
    beat["source"].update(ts_ms=7_000, file="binlog-without-number")
    values = [json.dumps(beat).encode(), change_event("u", 7, 8_000, 20)]
    assert change_events.read_arrow(cdc_records(values)) is None
    result = ingest_values(spark, values)
    assert (result.state.clock_ms, result.changes, len(result.dead)) == (8_000, 1, 0)
    assert result.versions.column("valid_from").to_pylist() == [8_000]


def test_after_a_failover_the_gtid_orders_changes_whose_binlog_position_is_lower() -> None:
    # The old primary wrote GTIDs 100 and 101 at file 7; the promoted replica writes 102 on at
    # its own file 2, positions far below. A connector following it (GTID mode) may re-send 101.
    values = [
        change_event("u", 7, 1_000, 9_000, binlog_file=7, gtid=100),
        change_event("u", 7, 2_000, 9_500, binlog_file=7, gtid=101, club_status="gold"),
        change_event("u", 7, 2_000, 300, binlog_file=2, gtid=101, club_status="gold"),  # re-sent
        change_event("u", 7, 3_000, 400, binlog_file=2, gtid=102, club_status="platinum"),
        change_event("u", 8, 3_000, 500, binlog_file=2, gtid=103),
    ]
    clock = _clock(values)
    assert clock.duplicate.tolist() == [False, False, True, False, False]
    assert clock.regressed.tolist() == [False, False, True, False, False]
    assert clock.position == (103, 2, 500, 0)
    # Across batches: the carried position holds the GTID too.
    later = _clock(values[3:], 5_000, (101, 7, 9_500, 0))
    assert later.duplicate.tolist() == [False, False]
    assert _clock(values[:2], 5_000, (103, 2, 500, 0)).duplicate.tolist() == [True, True]


def test_each_snapshot_of_many_reads_is_one_rewind_and_only_a_lower_position_rewinds() -> None:
    values = [
        change_event("u", 7, 1_000, 500, binlog_file=3),
        *(change_event("r", c, 2_000, 100, binlog_file=1, snapshot="true") for c in (7, 8, 9)),
        change_event("r", 10, 2_000, 100, binlog_file=1, snapshot="last"),
        change_event("u", 7, 3_000, 200, binlog_file=1),
        change_event("r", 7, 4_000, 150, binlog_file=1, snapshot="true"),  # below (1, 200)
        change_event("r", 8, 4_000, 150, binlog_file=1, snapshot="last"),
        change_event("u", 7, 5_000, 300, binlog_file=1),
        change_event("r", 7, 6_000, 10, binlog_file=2, snapshot="true"),  # a later file: no rewind
    ]
    clock = _clock(values)
    assert clock.rewound.tolist() == [False, True, False, False, False, False, True, False, False, False]
    assert clock.rewinds == [((-1, 3, 500, 0), (-1, 1, 100, 0)), ((-1, 1, 200, 0), (-1, 1, 150, 0))]
    assert clock.duplicate.tolist() == [False] * 10


def test_without_gtids_a_lower_binlog_file_is_still_a_re_send(spark: Any) -> None:
    result = _ingest(spark, [change_event("u", 7, 60_000, 4, binlog_file=4)])
    assert (result.duplicates, result.regressions, result.changes) == (1, 1, 0)


def test_a_position_written_before_gtids_were_carried_reads_as_one_without(spark: Any) -> None:
    state = CdcState.from_json({"watermark_ms": 5, "position": [5, 1_000, 0], "cdc_to": {"0": 3}})
    assert state == CdcState(5, (-1, 5, 1_000, 0), {0: 3})
    assert CdcState.from_json(state.as_json()) == state


def test_with_gtids_a_new_snapshot_is_a_rewind_only_when_its_binlog_position_is_lower() -> None:
    streamed = change_event("u", 7, 1_000, 500, binlog_file=3, gtid=40)
    later = change_event("r", 7, 2_000, 900, binlog_file=3, snapshot="last")  # no GTID, as Debezium
    earlier = change_event("r", 7, 2_000, 100, binlog_file=1, snapshot="last")
    after = change_event("u", 7, 3_000, 200, binlog_file=1, gtid=2)  # RESET MASTER: GTIDs start over
    assert _clock([streamed, later]).rewound.tolist() == [False, False]
    clock = _clock([streamed, earlier, after])
    assert clock.rewound.tolist() == [False, True, False]
    assert clock.duplicate.tolist() == [False, False, False]
    assert clock.rewinds == [((40, 3, 500, 0), (-1, 1, 100, 0))]
    assert clock.position == (2, 1, 200, 0)


def test_postgres_events_order_by_the_last_commit_then_their_own_lsn(spark: Any) -> None:
    # T1 writes customer 7 at LSN 100 but commits after T2 (customer 8 at LSN 110, committed at
    # 120): the connector streams T2 first. T1's change has the lower LSN and is no re-send.
    values = [
        pg_change_event("r", 9, 40_000, 90, None, snapshot="last"),
        pg_change_event("u", 8, 50_000, 110, 95),
        pg_change_event("u", 7, 51_000, 100, 120, club_status="gold"),
        pg_change_event(
            "u", 1, 51_500, 130, 125, table="debezium_heartbeat", ts="1970-01-01T00:00:51.600123Z"
        ),
    ]
    raw = cdc_records(values)
    events = change_events.read_arrow(raw)
    assert events is not None
    assert events.column("gtid_seq").to_pylist() == [90, 95, 120, 125]
    assert events.column("source_pos").to_pylist() == [90, 110, 100, 130]
    assert events.column("reading_ms").to_pylist() == [None, 50_000, 51_000, 51_600]
    by_spark = change_events.read_spark(spark.createDataFrame(raw, change_events.RAW_SCHEMA))
    assert by_spark.to_pylist() == events.to_pylist()
    result = ingest_values(spark, values)
    assert (result.changes, result.duplicates) == (3, 0)
    # The connector re-sends T1 after a restart: a duplicate.
    again = ingest_values(spark, values[2:3], 52_000, result.state.position)
    assert (again.changes, again.duplicates) == (0, 1)


def test_a_column_debezium_could_not_read_keeps_the_customers_value_before_the_change(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    long_text = "x" * 5000
    first = ingest_values(spark, [pg_change_event("c", 7, 1_000, 10, 5, comments=long_text, region="EU")])
    table = VersionStore(first.versions)
    values = [
        pg_change_event("u", 7, 2_000, 20, 15, comments=UNAVAILABLE, club_status="gold"),  # from the table
        pg_change_event("c", 8, 2_100, 30, 25, comments="short"),
        pg_change_event("u", 8, 2_200, 40, 35, comments=UNAVAILABLE),  # from the batch's own change
        pg_change_event("u", 9, 2_300, 50, 45, comments=UNAVAILABLE),  # unknown to the job: null
    ]
    with caplog.at_level(logging.WARNING):
        result = fill_unavailable(ingest_values(spark, values, 1_500, first.state.position), table)
    rows = result.versions.to_pylist()
    assert [r["comments"] for r in rows] == [long_text, "short", "short", None]
    assert [r["club_status"] for r in rows] == ["gold", "silver", "silver", "silver"]
    published = [json.loads(v) for v in result.customers.values if v is not None]
    assert [p.get("comments") for p in published] == [long_text, "short", None]  # customer 8's latest
    assert all(UNAVAILABLE not in json.dumps(p) for p in published)
    assert "3 customer changes had columns Debezium could not read" in caplog.text
    assert "1 values unknown to the job left null" in caplog.text
    # A batch without the placeholder is returned as it is.
    plain = ingest_values(spark, values[1:2])
    assert fill_unavailable(plain, table) is plain


def test_a_new_postgres_slot_s_snapshot_starts_the_history_over_and_its_changes_count(spark: Any) -> None:
    # The old slot streamed up to LSN 5,000; a new slot (its WAL lost, the connector's offsets
    # deleted) snapshots the table at LSN 9,000 and streams on from there.
    first = ingest_values(spark, [pg_change_event("u", 7, 1_000, 5_000, 4_900, club_status="gold")])
    values = [
        pg_change_event("r", 7, 2_000, 9_000, None, snapshot="last", club_status="gold"),
        pg_change_event("u", 7, 3_000, 9_100, 9_050, club_status="platinum"),
        pg_change_event("u", 7, 3_000, 9_100, 9_050, club_status="platinum"),  # a re-send
    ]
    result = ingest_values(spark, values, 1_500, first.state.position)
    assert [v["club_status"] for v in result.versions.to_pylist()] == ["gold", "platinum"]
    assert (result.duplicates, result.rewinds) == (1, ())


def test_in_order_sorts_records_by_partition_and_offset_and_leaves_ordered_ones_as_they_are() -> None:
    def table(spots: list[tuple[int, int]]) -> pa.Table:
        return pa.table(
            {
                "partition": pa.array([p for p, _ in spots], pa.int32()),
                "offset": pa.array([o for _, o in spots], pa.int64()),
                "value": pa.array([f"{p}:{o}".encode() for p, o in spots], pa.binary()),
            }
        )

    ordered = [(0, 5), (0, 6), (0, 9), (1, 0), (1, 1)]
    assert in_order(table(ordered)).equals(table(ordered))
    for shuffled in ([(1, 0), (0, 5), (0, 9), (1, 1), (0, 6)], [(0, 6), (0, 5), (0, 9), (1, 0), (1, 1)]):
        assert in_order(table(shuffled)).equals(table(ordered))
    two_chunks = pa.concat_tables([table(ordered[:2]), table(ordered[2:])])
    assert in_order(two_chunks).equals(table(ordered))
    assert in_order(table([])).num_rows == 0


def test_a_transaction_writes_the_latest_row_of_each_customer_in_the_order_of_those(spark: Any) -> None:
    values = [
        change_event("c", 7, 1_000, 10),
        change_event("c", 8, 2_000, 20),
        change_event("u", 7, 3_000, 30, club_status="gold"),
        change_event("c", 9, 4_000, 40),
        change_event("d", 8, 5_000, 50),
    ]
    whole = ingest_values(spark, values).customers
    assert whole.topic == "customers"
    assert whole.keys == [b"7", b"9", b"8"]
    assert [json.loads(v)["club_status"] if v is not None else None for v in whole.values] == [
        "gold",
        "silver",
        None,
    ]
    # Read in two parts, one after the other: the same records.
    first = ingest_values(spark, values[:3])
    second = ingest(cdc_records(values[3:], first_offset=3), first.state, "customers", "dlq", spark)
    assert chain([first, second]).customers == whole
    # Made once: kept while what follows changes no customer, made anew when it does.
    made = first.with_customers()
    assert made.records == first.customers and made.with_customers() is made
    beats = ingest(
        cdc_records([heartbeat("1970-01-01T00:00:09.000Z", 60)], 3), first.state, "customers", "dlq", spark
    )
    assert chain([made, beats]).records is made.records
    assert chain([made, second]).records is None and chain([made, second]).customers == whole
