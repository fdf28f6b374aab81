"""A stand-in for Slack on this machine, for the tests and the notifier's benchmark."""
