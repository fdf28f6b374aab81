"""The PySpark enrichment job: CDC ingestion into a versioned customer table and the
as-of join of ratings to it. See ../shared/DESIGN.md, "Join semantics"."""
