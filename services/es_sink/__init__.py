"""Enriched ratings and alerts from Kafka into Elasticsearch daily indices, for Kibana dashboards."""

__all__ = ["config", "documents", "outcomes", "service", "sink"]
