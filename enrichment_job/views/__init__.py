"""Materialized views of the enriched stream: aggregates kept live in Spark's RocksDB state
store, every changed row written to the view's compacted changelog topic, exactly once.

`declarations.py` says what each view is (name, key, aggregation); `app.py` runs one stateful
streaming query per view; `python -m enrichment_job.views` starts them.
"""
