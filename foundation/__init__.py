"""The ground floor every process of the product stands on, the Spark jobs and the services alike:
one error taxonomy (`errors`), logs (`logs`), `--help` from a settings class (`help`), the
settings base (`settings`), the Prometheus exposition (`prometheus`), the enriched record's schema
(`enriched`), the largest Kafka record (`kafka_record`), Arrow's allocator (`arrow_memory`), the
customer database's client (`customer_db`) and the views' marker, the contract between the views
job and the query service (`view_marker`). It imports nothing of the rest of the product."""

__all__ = [
    "arrow_memory",
    "customer_db",
    "enriched",
    "errors",
    "help",
    "kafka_record",
    "logs",
    "prometheus",
    "settings",
    "view_marker",
]
