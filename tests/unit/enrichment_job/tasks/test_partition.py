"""A task's check of its partition's last marker, before it reads or writes anything: a marker
of its run for a batch after the one it runs was not written by the job."""

from typing import Any

import pytest

from enrichment_job.runtime.checkpoints import ForeignMarker
from enrichment_job.runtime.metrics import Steps
from enrichment_job.settings import JobSettings
from enrichment_job.tasks import partition
from enrichment_job.tasks.plan import PartitionMarker, PartitionPlan, TaskOutcome

SETTINGS = JobSettings(job_name="job-a")


def _plan(batch_id: int) -> PartitionPlan:
    return PartitionPlan(SETTINGS, "run-1", batch_id, 3, 0, 100, 100, 1000, 1 << 20, 1 << 27, None)


def _held(batch_id: int, run: str = "run-1") -> Any:
    marker = PartitionMarker(run, batch_id, 3, 9, 80, None, None)
    return partition._Held(producer=None, marker=marker, offset=12)  # type: ignore[arg-type]


def test_a_batch_whose_marker_is_in_kafka_is_not_run_again() -> None:
    outcome = partition._run(_plan(41), None, _held(41), 0.0, Steps())  # type: ignore[arg-type]
    assert outcome == TaskOutcome(3, True, 80, 0)


def test_a_marker_of_this_run_ahead_of_the_batch_stops_the_task_naming_the_partition() -> None:
    ahead = r"ratings partition 3 .* names this run and batch 1000000, ahead of the batch being run \(41\)"
    with pytest.raises(ForeignMarker, match=ahead):
        partition._run(_plan(41), None, _held(1_000_000), 0.0, Steps())  # type: ignore[arg-type]
