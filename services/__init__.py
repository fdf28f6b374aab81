"""Consumer services: slack_notifier, es_sink, s3_sink, and their shared core."""
