"""The S3 sink: enriched ratings into the data lake as Parquet, partitioned by date and hour (UTC)."""

__all__ = ["config", "lake_query", "layout", "rows", "s3_errors", "schema", "service", "sink"]
