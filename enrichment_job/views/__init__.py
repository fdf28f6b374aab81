"""Materialized views of the enriched stream: aggregates kept live in Spark's RocksDB state
store, every changed row written to the view's compacted changelog topic, exactly once.

A view is a SQL file (`builtin/*.sql` for the two that come with the product): `definition`
checks and compiles it, `declarations` and `aggregation` run the built-in ones as one streaming
aggregation, `catalog` and `user_views` create, replace and drop the views declared at run
time, `app` runs the queries, each writing its batch's marker (`query_marker`), `commands`
is `python -m enrichment_job.views validate|create|...`.
"""

__all__ = [
    "aggregation",
    "app",
    "background",
    "catalog",
    "commands",
    "declarations",
    "definition",
    "query_marker",
    "settings",
    "transforms",
    "user_views",
]
