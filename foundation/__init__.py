"""The ground floor every process of the product stands on, the Spark jobs and the services alike:
one error taxonomy (`errors`), logs (`logs`), `--help` from a settings class (`help`), the
settings base (`settings`), the Prometheus exposition (`prometheus`), the enriched record's schema
(`enriched`) and the customer database's client (`customer_db`). It imports nothing of the rest
of the product."""

__all__ = ["customer_db", "enriched", "errors", "help", "logs", "prometheus", "settings"]
