"""The enrichment job's driver: what runs once per start or once per micro-batch, not per
rating.

- `recovery`: a start, before the first batch: the state folder's run claimed, the customer
  table and the waiting ratings rebuilt from the last commit.
- `cdc`: a batch's change events folded into new customer versions, the compacted `customers`
  topic's records and the CDC state, committed before the tasks run.
- `app`: the wiring: the Spark session, the streaming query, each batch's CDC step and its
  tasks (`tasks.TaskJoin`), the metrics endpoint.
"""

__all__ = ["app", "cdc", "recovery"]
