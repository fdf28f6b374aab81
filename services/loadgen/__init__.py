"""The load generator: plays the web site (ratings into Kafka) and the customer database (a trickle
of changes in MariaDB or PostgreSQL), seeded and reproducible."""

__all__ = ["config", "customers", "database", "generator", "ratings"]
