"""The join in Spark tasks: each partition of the ratings topic read, joined and written by one
task on an executor, in its own Kafka transaction with a per-partition marker.

- `enrich`: a batch's as-of join over Arrow columns: ratings (and those still waiting) to
  enriched records, alerts and dead letters.
- `plan`: what a task is given (`PartitionPlan`) and what it commits and returns
  (`PartitionMarker`, `TaskOutcome`): the contracts between the driver and its tasks.
- `tables`: how the customer table reaches the executors (`TableShipper` on the driver,
  `worker_store` in a task): a broadcast base and each batch's new versions.
- `partition`: what runs in a task (`run_partition`).
- `launch`: the driver's side of one batch (`TaskJoin`).
"""

from enrichment_job.tasks.launch import TaskJoin
from enrichment_job.tasks.plan import PartitionMarker, PartitionPlan, TaskOutcome

__all__ = [
    "PartitionMarker",
    "PartitionPlan",
    "TaskJoin",
    "TaskOutcome",
    "enrich",
    "launch",
    "partition",
    "plan",
    "tables",
]
