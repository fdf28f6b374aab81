"""Object names: UTC date and hour of rating_time, first and last offsets zero-padded; one object
per topic, partition and hour of a batch, named by the group's first and last offsets; which
siblings an object's range overlaps."""

from datetime import datetime

import pyarrow as pa
import pytest

from services.s3_sink.layout import HOUR_MS, LakeObject, merged, offsets_of, split_into_objects, uncovered
from services.s3_sink.rows import parse_values
from services.s3_sink.schema import to_lake_table


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


@pytest.mark.parametrize(
    ("when", "folder"),
    [
        ("2026-11-22T00:00:00+00:00", "dt=2026-11-22/hour=00"),
        ("2026-11-21T23:59:59.999+00:00", "dt=2026-11-21/hour=23"),
        ("2026-12-31T23:30:00+00:00", "dt=2026-12-31/hour=23"),
        ("2027-01-01T00:00:00.001+00:00", "dt=2027-01-01/hour=00"),
        # an offset timezone in the source does not matter: the lake is in UTC
        ("2026-11-22T01:30:00+02:00", "dt=2026-11-21/hour=23"),
    ],
)
def test_the_folder_is_the_utc_date_and_hour(when: str, folder: str) -> None:
    target = LakeObject("ratings", 3, ms(when) // HOUR_MS, 42, 50)
    name = "ratings+3+00000000000000000042+00000000000000000050.parquet"
    assert target.key("lake") == f"lake/{folder}/{name}"
    assert offsets_of(target.key("lake")) == (42, 50)


def test_offsets_are_padded_to_20_digits_so_names_sort_by_offset() -> None:
    offsets = [0, 9, 10, 99_999, 2**63 - 1]
    keys = [LakeObject("t", 0, 0, o, o).key("p") for o in offsets]
    assert sorted(keys) == keys
    assert keys[-1].endswith("+09223372036854775807+09223372036854775807.parquet")
    assert (
        LakeObject("t", 0, 0, 7, 9).key("")
        == "dt=1970-01-01/hour=00/t+0+00000000000000000007+00000000000000000009.parquet"
    )
    assert offsets_of("p/dt=1970-01-01/hour=00/t+0+00000000000000000007.parquet") is None  # not ours


def lake_rows(rows: list[tuple[str, int, int, int]]) -> pa.Table:
    """(topic, partition, offset, rating_time) -> a LAKE_SCHEMA table."""
    values = [
        f'{{"rating_id":{o},"user_id":1,"stars":3,"rating_time":{t},"customer_matched":false}}'.encode()
        for _, _, o, t in rows
    ]
    parsed = parse_values(values)
    return to_lake_table(parsed.table, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


def test_a_batch_splits_by_partition_and_hour_named_by_each_groups_offsets() -> None:
    h0, h1 = ms("2026-11-22T10:59:59.999+00:00"), ms("2026-11-22T11:00:00+00:00")
    table = lake_rows(
        [
            ("t", 0, 100, h0),
            ("t", 1, 7, h1),
            ("t", 0, 101, h1),
            ("t", 0, 102, h0),
            ("t", 1, 8, h1),
            ("u", 0, 100, h0),
            ("t", 0, 103, h1),
        ]
    )
    objects = split_into_objects(table)
    got = {o.key("p"): rows.column("kafka_offset").to_pylist() for o, rows in objects}
    assert got == {
        "p/dt=2026-11-22/hour=10/t+0+00000000000000000100+00000000000000000102.parquet": [100, 102],
        "p/dt=2026-11-22/hour=11/t+0+00000000000000000101+00000000000000000103.parquet": [101, 103],
        "p/dt=2026-11-22/hour=11/t+1+00000000000000000007+00000000000000000008.parquet": [7, 8],
        "p/dt=2026-11-22/hour=10/u+0+00000000000000000100+00000000000000000100.parquet": [100],
    }
    assert sum(rows.num_rows for _, rows in objects) == table.num_rows


def test_an_empty_batch_has_no_objects() -> None:
    assert split_into_objects(lake_rows([])) == []


def test_ranges_are_joined_where_they_meet() -> None:
    assert merged([(30, 40), (0, 9), (10, 12), (35, 50), (60, 60)]) == [(0, 12), (30, 50), (60, 60)]
    assert merged([]) == []


@pytest.mark.parametrize(
    ("siblings", "pieces"),
    [
        ([], [[10, 12, 15, 20]]),
        ([(0, 9), (21, 30)], [[10, 12, 15, 20]]),  # ranges that do not meet it
        ([(10, 20)], []),  # all held
        ([(5, 12)], [[15, 20]]),
        ([(13, 14)], [[10, 12], [15, 20]]),  # a range between two rows splits it, holding none
        ([(12, 12), (16, 30)], [[10], [15]]),
        ([(0, 100)], []),
    ],
)
def test_only_the_rows_no_sibling_holds_are_written_in_stretches_that_meet_no_sibling(
    siblings: list[tuple[int, int]], pieces: list[list[int]]
) -> None:
    hour = ms("2026-11-22T10:00:00+00:00")
    rows = lake_rows([("t", 0, o, hour) for o in (20, 10, 12, 15)])  # not in offset order
    got = uncovered(LakeObject("t", 0, hour // HOUR_MS, 10, 20), rows, siblings)
    assert [part.column("kafka_offset").to_pylist() for _, part in got] == pieces
    assert [(o.first_offset, o.last_offset) for o, _ in got] == [(p[0], p[-1]) for p in pieces]
    assert all(o.hour == hour // HOUR_MS and o.partition == 0 for o, _ in got)
