"""The customer table the join reads: every version of every customer.

- `versions`: the versions as Arrow columns sorted by customer and version order, and the
  as-of lookup over them (`VersionStore`).
- `table`: the table in memory for the join and in Delta Lake for people and restarts
  (`CustomerTable`, `DeltaLog`), with the CDC position it has reached (`CdcState`).
"""

__all__ = ["table", "versions"]
