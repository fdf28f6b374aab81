"""The materialized views' query service: the views' changelog topics loaded into an embedded
store (SQLite), served as HTTP JSON by key and by filter, and as Server-Sent Events of changes."""

__all__ = [
    "api",
    "arrays",
    "changelog",
    "cli",
    "config",
    "cursors",
    "exports",
    "hub",
    "metadata",
    "metrics",
    "numbers",
    "patterns",
    "pgwire",
    "plans",
    "portals",
    "protocol",
    "session",
    "sql",
    "store",
    "subscription",
    "timestamps",
]
