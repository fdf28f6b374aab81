"""The PySpark enrichment job: CDC ingestion into a versioned customer table and the
as-of join of ratings to it. docs/reference.md, "What it reads and writes", says how."""

__all__ = ["app", "marker", "runtime", "settings", "tasks", "views"]
