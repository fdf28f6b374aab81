"""Consumer services: slack_notifier, es_sink, s3_sink, and their shared core."""

__all__ = ["core", "es_sink", "loadgen", "s3_sink", "slack_notifier", "views"]
