"""How a state folder continues the job name's last commit, where a run starts, and which CDC
offsets a restart re-reads for the customer table."""

from pathlib import Path
from typing import Any

import pytest

from enrichment_job.driver.recovery import (
    PIPELINE_CHECKPOINT,
    TopicsChanged,
    claim_state,
    starting_offsets,
)
from enrichment_job.marker import BatchMarker
from enrichment_job.runtime.checkpoints import ForeignMarker
from enrichment_job.settings import TABLE, JobSettings


def _settings(tmp_path: Path, **more: Any) -> JobSettings:
    return JobSettings(state_dir=str(tmp_path / "state"), job_name="job-a", **more)


def _marker(run: str, **fields: object) -> BatchMarker:
    return BatchMarker.decode(
        {"batch_id": 41, "run": run, "ratings_topic": "ratings", "cdc_topic": "asgard.demo.customers"}
        | fields
    )


def test_a_folder_goes_on_with_its_own_run_when_the_last_commit_is_its_own(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    first = claim_state(settings, None)
    settings.state.write_text(f"{PIPELINE_CHECKPOINT}/metadata", "{}")
    for batch in (40, 41):  # Spark's offset log: a file per batch planned
        settings.state.write_text(f"{PIPELINE_CHECKPOINT}/offsets/{batch}", "v1")
    assert claim_state(settings, _marker(first)) == first
    assert settings.state.exists(PIPELINE_CHECKPOINT)


@pytest.mark.parametrize("planned", [[], [40], [7, 8]])
def test_a_marker_of_its_own_run_for_a_batch_its_checkpoint_never_planned_stops_the_job(
    tmp_path: Path, planned: list[int]
) -> None:
    """Anyone who can write to the commits topic could otherwise make the job take every batch
    up to a forged batch id as written, and skip them."""
    settings = _settings(tmp_path)
    run = claim_state(settings, None)
    settings.state.write_text(f"{PIPELINE_CHECKPOINT}/metadata", "{}")
    for batch in planned:
        settings.state.write_text(f"{PIPELINE_CHECKPOINT}/offsets/{batch}", "v1")
    with pytest.raises(
        ForeignMarker, match=f"names this state folder's run {run} and batch 41, but the checkpoint"
    ):
        claim_state(settings, _marker(run))


def test_a_folder_behind_another_runs_commit_is_rebuilt_under_a_new_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(tmp_path)
    mine = claim_state(settings, None)
    settings.state.write_text(f"{PIPELINE_CHECKPOINT}/metadata", "{}")
    settings.state.write_text(f"{TABLE}/_delta_log/00000000000000000000.json", "{}")
    run = claim_state(settings, _marker("another-host"))
    assert run != mine
    assert not settings.state.exists(PIPELINE_CHECKPOINT) and not settings.state.exists(TABLE)
    assert "out of date" in caplog.text


def test_a_deleted_query_checkpoint_is_a_new_run_not_a_replay_of_batch_ids(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    mine = claim_state(settings, None)  # committed batches 0..41, then checkpoints/pipeline went
    assert claim_state(settings, _marker(mine)) != mine


def test_a_job_name_used_for_other_topics_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(TopicsChanged, match="setting ENRICH_JOB_NAME: job 'job-a' last committed reading"):
        claim_state(_settings(tmp_path), _marker("other", ratings_topic="other-ratings"))


def test_a_first_run_starts_the_ratings_at_the_setting_and_the_cdc_at_its_beginning(tmp_path: Path) -> None:
    ratings = {0: (5, 120), 1: (0, 7)}  # partition -> first and next offset now
    earliest = starting_offsets(_settings(tmp_path), None, ratings, [0])
    assert earliest == {"ratings": {"0": 5, "1": 0}, "asgard.demo.customers": {"0": -2}}
    latest = starting_offsets(_settings(tmp_path, starting_offsets="latest"), None, ratings, [0])
    # The customer table is the whole CDC history also when the ratings start at their end.
    assert latest == {"ratings": {"0": 120, "1": 7}, "asgard.demo.customers": {"0": -2}}


def test_a_new_run_starts_where_the_last_commit_left_both_topics(tmp_path: Path) -> None:
    marker = _marker("x", consumed_to={"0": 120, "1": 7}, cdc_to={"0": 9000})
    ratings = {0: (0, 200), 1: (0, 9), 2: (3, 50)}
    assert starting_offsets(_settings(tmp_path), marker, ratings, [0]) == {
        "ratings": {"0": 120, "1": 7, "2": 3},  # a partition it never read: from its start
        "asgard.demo.customers": {"0": 9000},
    }
