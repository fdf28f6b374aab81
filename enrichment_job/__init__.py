"""The Spark side of the product: the enrichment job (`python -m enrichment_job`) and the views
job (`python -m enrichment_job.views`), laid out by where code runs and what flows through it.

- `runtime`: the Spark runtime both jobs stand on (session, the driver JVM's class archive,
  Spark's private interfaces, the state folder and its checkpoints, metrics, the command line).
- `records`: ratings and Debezium change events, from Kafka's bytes to typed columns.
- `kafka`: Kafka in and out for both jobs (reads into Arrow, exactly-once output, the
  claim-check store of dead letters too large for Kafka).
- `customers`: the customer table the join reads (in memory, and in Delta Lake).
- `tasks`: the join, run in Spark tasks on the executors, a transaction per ratings partition.
- `driver`: the enrichment job's driver: its start, each batch's CDC fold, the wiring.
- `views`: the views job, beside the enrichment job: it reads the enriched topic, and imports
  nothing of `driver`, `tasks` or `customers`.
- `settings` and `marker`: the enrichment job's settings and its batch marker, which the driver
  and the tasks share.

The floors (a unit test holds them): `runtime` at the bottom, then `settings`, `kafka`,
`records`, `customers`, `marker`, `tasks` and `driver`, each importing only floors below it;
`views` on `runtime`, `kafka` and `records` alone; no circles.
Each package's `__all__` is what code outside the product (the stack, the demo, the benchmarks,
the tests) may use."""

__all__ = [
    "customers",
    "driver",
    "kafka",
    "marker",
    "records",
    "runtime",
    "settings",
    "tasks",
    "views",
]
