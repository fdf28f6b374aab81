"""A views query's batch marker reads back what it wrote, and reads the JSON of markers written
before it had a type."""

from enrichment_job.views.query_marker import QueryMarker


def test_a_marker_round_trips_with_per_view_or_one_newest_rating() -> None:
    for newest in ({"customer_ratings": 1_795_000_000_001, "segment_hourly": None}, 1_795_000_000_001, None):
        marker = QueryMarker(7, {0: 10, 3: 42}, 1_796_000_000_000, rows=5, max_rating_time=newest, run="r1")
        assert QueryMarker.decode(marker.as_json()) == marker
    assert list(QueryMarker(1, {3: 42, 0: 10}).enriched_to_json.items()) == [("0", 10), ("3", 42)]


def test_the_json_of_a_marker_written_before_the_type_reads_back() -> None:
    written = {  # what TransactionalOutput wrote around the views job's dict of a batch
        "batch_id": 12,
        "run": "0f3c",
        "max_rating_time": {"customer_ratings": 1_795_000_000_001},
        "enriched_to": {"1": 5, "0": 9},
        "rows": 3,
        "written_at_ms": 1_796_000_000_000,
    }
    marker = QueryMarker.decode(written)
    assert marker == QueryMarker(
        12, {0: 9, 1: 5}, 1_796_000_000_000, 3, {"customer_ratings": 1_795_000_000_001}, "0f3c"
    )
    assert marker.as_json() == {**written, "enriched_to": {"0": 9, "1": 5}}
    assert QueryMarker.last(None) is None
