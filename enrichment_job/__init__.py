"""The PySpark enrichment job (issue 3): CDC ingestion into a versioned customer table and the
as-of join of ratings to it. See ../shared/DESIGN.md, "Join semantics"."""
