"""How every entry point logs: a plain line per record by default, or with LOG_FORMAT=json one
JSON object per line, the form log shippers parse without a pattern. Both go to stderr.

A JSON line has the keys of Spark's own structured log lines (ts, level, msg, logger), so the
job's Python and JVM lines read alike, plus thread, and exception (the traceback) when there
is one."""

import json
import logging
import os
import sys
from datetime import UTC, datetime

from foundation.errors import ConfigError

__all__ = ["FORMATS", "HELP", "TEXT", "JsonFormatter", "configure", "configure_or_exit", "log_format"]

TEXT = "%(asctime)s %(name)s %(levelname)s %(message)s"
FORMATS = ("text", "json")
HELP = "LOG_FORMAT=text  text, or json: one JSON object per log line (every entry point reads it)"


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON. Messages are not parsed: what a program logged as text
    stays one string, escaped as JSON, so a customer's text cannot break the line or forge a
    field."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line: dict[str, object] = {
            "ts": ts.replace("+00:00", "Z"),
            "level": record.levelname,
            "msg": record.getMessage(),
            "logger": record.name,
            "thread": record.threadName,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False)


def _checked(value: str) -> str:
    if value not in FORMATS:
        raise ConfigError(f"setting LOG_FORMAT: {value!r} is not one of {', '.join(FORMATS)}")
    return value


def log_format() -> str:
    """LOG_FORMAT from the environment: text (the default) or json."""
    return _checked(os.environ.get("LOG_FORMAT", "text").strip().lower() or "text")


def configure(level: int | str = logging.INFO, fmt: str | None = None) -> None:
    """The root logger writes to stderr in `fmt` (LOG_FORMAT when None), replacing any handler
    set before. Raises ConfigError for an unknown format."""
    chosen = log_format() if fmt is None else _checked(fmt)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else logging.Formatter(TEXT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def configure_or_exit(level: int | str = logging.INFO) -> None:
    """`configure`, or the message naming LOG_FORMAT on stderr and exit code 2."""
    try:
        configure(level)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
