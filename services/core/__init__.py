"""What every consumer service shares: the consumer loop (offsets committed after the sink
confirms), its settings, dead letters, metrics and watchdog. The ground floor below it (errors,
logs, settings base, the enriched record) is `foundation`."""

__all__ = ["dlq", "loop", "main", "metrics", "records", "settings", "watchdog"]
