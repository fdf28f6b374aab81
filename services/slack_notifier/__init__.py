"""Posts a Slack message per unhappy platinum customer alert, exactly once, within Slack's rate."""

__all__ = ["alert", "config", "history", "ledger", "message", "rate", "responses", "sink"]
