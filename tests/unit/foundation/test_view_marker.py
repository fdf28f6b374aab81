"""A view's marker, the views job's word to the query service: one encoding, the same JSON as
the markers already in a commits topic, and a refusal that keeps what the view had."""

import json

from foundation.view_marker import ViewMarker

BATCH = {
    "view": "by_user",
    "key": ["user_id"],
    "columns": [{"name": "user_id", "type": "int"}, {"name": "ratings", "type": "bigint"}],
    "state": "live",
    "sql": "SELECT user_id, count(*) AS ratings FROM enriched GROUP BY user_id",
    "created_at_ms": 1_796_000_000_000,
    "topic": "view.by_user.1796000000000",
    "batch_id": 12,
    "enriched_to": {"0": 120, "1": 7},
    "max_rating_time": 1_796_000_100_000,
    "written_at_ms": 1_796_000_200_000,
}


def test_a_batch_marker_reads_back_as_it_was_written() -> None:
    marker = ViewMarker.decode(json.loads(json.dumps(BATCH)))
    assert marker.key == ("user_id",)
    assert marker.has_columns and marker.version == 1_796_000_000_000
    assert marker.enriched_to == {"0": 120, "1": 7}
    assert marker.as_json() == BATCH
    assert ViewMarker.decode(marker.as_json()) == marker


def test_a_built_in_view_s_marker_has_no_state_and_a_drop_says_only_that() -> None:
    built_in = {k: v for k, v in BATCH.items() if k not in {"state", "sql", "created_at_ms", "topic"}}
    assert ViewMarker.decode(built_in).state is None
    assert ViewMarker.decode(built_in).as_json() == built_in
    dropped = {"view": "by_user", "state": "dropped", "dropped": True, "written_at_ms": 5}
    assert ViewMarker.decode(dropped).dropped
    assert ViewMarker.decode(dropped).as_json() == dropped
    assert "dropped" not in ViewMarker("v").as_json()


def test_a_refusal_keeps_the_key_columns_and_freshness_the_view_had() -> None:
    served = ViewMarker.decode(BATCH)
    refusal = ViewMarker("by_user", state="failed", error="boom", written_at_ms=1_796_000_300_000)
    assert not refusal.has_columns
    said = refusal.over(served)
    assert (said.state, said.error, said.written_at_ms) == ("failed", "boom", 1_796_000_300_000)
    assert (said.key, said.columns, said.batch_id) == (served.key, served.columns, 12)
    assert refusal.over(None) == refusal
