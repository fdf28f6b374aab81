"""The queries' checkpoints in a job's state folder, the run they belong to, and the check that
a marker in a commits topic was written by this run.

A run is the life of one set of checkpoints: new checkpoints are a new run, with markers of
its own. Both jobs write a marker per batch in the same Kafka transaction as the batch's
output; a marker that names this run and a batch its checkpoint never planned was not written
by the job (`check_planned`).
"""

import uuid

from enrichment_job.runtime.spark_internals import last_planned_batch
from enrichment_job.runtime.state_dir import StateDir

__all__ = ["CHECKPOINTS", "ForeignMarker", "check_planned", "run_id"]

CHECKPOINTS = "checkpoints"  # the queries' checkpoints and the job's run id, in the state folder


class ForeignMarker(ValueError):
    """A marker in the commits topic names the job's run and a batch the job never planned: the
    job did not write it. Going on would take every batch up to it as written."""


def run_id(state: StateDir) -> str:
    """Identifies the run of the state folder's checkpoints: new checkpoints are a new run
    with its own markers."""
    path = f"{CHECKPOINTS}/run_id"
    run = state.read_text(path)
    if run is None:
        run = uuid.uuid4().hex[:16]
        state.write_text(path, run)
    return run.strip()


def check_planned(
    marked_run: str | None,
    marked_batch: int,
    run: str,
    state: StateDir,
    checkpoint: str,
    *,
    key: str,
    topic: str,
) -> None:
    """Refuses a marker (the last one of `key` in the commits topic `topic`, naming `marked_run`
    and `marked_batch`) that names this run and a batch the run's checkpoint never planned:
    Spark writes a batch to the checkpoint's offset log before the batch runs, so the job
    cannot have written it."""
    if marked_run != run:
        return
    planned = last_planned_batch(state, checkpoint)
    if planned is None or marked_batch > planned:
        raise ForeignMarker(
            f"the last marker of {key!r} in {topic} names this state folder's run {run} and batch "
            f"{marked_batch}, but the checkpoint {checkpoint} planned batches only up to "
            f"{planned}: the job did not write that marker (or the checkpoint was deleted without the "
            "state folder's checkpoints/run_id), and going on would take the batches up to it as "
            f"written. Find who wrote it, and let only the job's own principal write to {topic} "
            "(the secured stack's ACLs do)"
        )
