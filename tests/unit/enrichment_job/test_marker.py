"""The batch marker's one encoding: what the job wrote before it had a type reads back, and a
marker reads back as it was written."""

import json

from enrichment_job.customers.table import CdcState
from enrichment_job.marker import BatchMarker

# A driver's marker as the job wrote it before the type (the JSON of a commits topic).
WRITTEN = {
    "batch_id": 41,
    "run": "0123456789abcdef",
    "ratings_topic": "ratings",
    "cdc_topic": "asgard.demo.customers",
    "watermark_ms": 1_796_000_000_000,
    "position": [7, 1, 4711, 0],
    "cdc_to": {"0": 9_000},
    "waiting_from": {"0": 118, "2": 40},
    "consumed_to": {"0": 120, "1": 7, "2": 55},
    "new": 3,
    "enriched": 2,
    "alerts": 1,
    "dlq": 0,
    "waiting": 4,
    "cdc_events": 10,
    "changes": 9,
    "duplicates": 0,
    "deferred": 0,
}


def test_a_marker_written_before_the_type_reads_back_whole() -> None:
    marker = BatchMarker.decode(json.loads(json.dumps(WRITTEN)))
    assert (marker.batch_id, marker.run, marker.join_in) == (41, "0123456789abcdef", "driver")
    assert marker.state == CdcState(1_796_000_000_000, (7, 1, 4711, 0), {0: 9_000})
    assert marker.watermark_ms == 1_796_000_000_000
    assert marker.consumed_to == {0: 120, 1: 7, 2: 55}
    assert marker.waiting_from == {0: 118, 2: 40}
    assert marker.counts["enriched"] == 2
    assert marker.as_json() == WRITTEN  # the same JSON as before, key for key


def test_a_cdc_marker_of_the_join_in_tasks_carries_no_ratings_offsets() -> None:
    marker = BatchMarker(
        7, "r", CdcState(5, None, {0: 3}), "ratings", "cdc", join_in="tasks", counts={"changes": 2}
    )
    body = json.loads(json.dumps(marker.as_json()))
    assert body["join_in"] == "tasks"
    assert "consumed_to" not in body and "waiting_from" not in body
    assert BatchMarker.decode(body) == marker


def test_a_job_name_never_committed_has_no_marker_and_an_old_marker_lacks_its_topics() -> None:
    assert BatchMarker.last(None) is None
    old = BatchMarker.last({"batch_id": 3, "cdc_to": {"0": 1}})
    assert old is not None
    assert (old.ratings_topic, old.cdc_topic, old.run, old.consumed_to) == (None, None, None, {})
