"""The PySpark enrichment job: CDC ingestion into a versioned customer table and the
as-of join of ratings to it. docs/reference.md, "What it reads and writes", says how.

Each module's `__all__` is what code outside the product (the stack, the demo, the benchmarks)
may use: the job's settings, its metrics, the customer table (`table`, `versions`, `schemas`),
a batch's join (`enrich`), which the table benchmark drives without Kafka, and where a dead
letter's bytes are kept (`claim_check`), which the demo's reconciliation reads."""

__all__ = [
    "app",
    "claim_check",
    "enrich",
    "marker",
    "metrics",
    "runtime",
    "schemas",
    "settings",
    "table",
    "tasks",
    "versions",
    "views",
]
