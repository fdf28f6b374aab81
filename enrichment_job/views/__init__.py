"""Materialized views of the enriched stream: aggregates kept live in Spark's RocksDB state
store, every changed row written to the view's compacted changelog topic, exactly once.

`declarations.py` says what each view is (group columns, measures, row); `aggregation.py` makes
all of them one streaming aggregation; `app.py` runs it as one stateful query;
`python -m enrichment_job.views` starts it.
"""
