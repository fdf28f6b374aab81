"""Kafka in and out for both Spark jobs, on the driver and in tasks.

- `reader`: a topic's offset ranges read with `read_committed` into Arrow columns
  (`TopicReader`), with records deleted under a position refused loudly (`RecordsDeleted`).
- `transactions`: a micro-batch's output written exactly once (`TransactionalOutput`): the
  records and the batch's marker in one Kafka transaction, the last markers read back, and a
  marker the job did not write refused (`check_planned`, `ForeignMarker`).
- `batches`: a micro-batch's DataFrames to the records a transactional producer writes.
- `claim_check`: the bytes of dead letters too large for Kafka kept in a store, the record
  naming where (`ClaimCheck`, `Claimed`).
"""

__all__ = ["batches", "claim_check", "reader", "transactions"]
