"""The ground floor every process of the product stands on, the Spark jobs and the services alike:
one error taxonomy (`errors`), logs (`logs`), `--help` from a settings class (`help`), the
settings base (`settings`), the Prometheus exposition (`prometheus`), the enriched record's schema
(`enriched`), the largest Kafka record (`kafka_record`), Arrow's allocator (`arrow_memory`), the
customer database's client (`customer_db`), and the two contracts between the views job and
the query service: a view's marker (`view_marker`) and its changelog record
(`changelog_record`). It imports nothing of the rest of the product."""

__all__ = [
    "arrow_memory",
    "changelog_record",
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
