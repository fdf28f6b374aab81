"""LOG_FORMAT: JSON lines that a log shipper can parse, and a bad value that stops every entry
point naming the setting, before it connects anywhere."""

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from foundation.errors import ConfigError
from foundation.logs import JsonFormatter, configure, log_format

ENTRY_POINTS = (
    "services.es_sink",
    "services.s3_sink",
    "services.slack_notifier",
    "services.views",
    "services.loadgen",
    "enrichment_job",
    "enrichment_job.views",
)


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("es_sink", logging.WARNING, __file__, 1, msg, args, exc_info)


def test_a_json_line_has_spark_s_keys_and_the_message_formatted() -> None:
    line = JsonFormatter().format(_record("indexed %d ratings", 42))
    parsed = json.loads(line)
    assert parsed["level"] == "WARNING"
    assert parsed["msg"] == "indexed 42 ratings"
    assert parsed["logger"] == "es_sink"
    assert parsed["thread"]
    assert parsed["ts"].endswith("Z") and parsed["ts"][10] == "T"
    assert "exception" not in parsed


def test_customer_text_stays_one_line_and_one_field() -> None:
    text = 'great\n{"level": "ERROR"}\r\n", "logger": "forged'
    line = JsonFormatter().format(_record("message: %s", text))
    assert "\n" not in line and "\r" not in line
    parsed = json.loads(line)
    assert parsed["msg"] == f"message: {text}"
    assert parsed["logger"] == "es_sink" and parsed["level"] == "WARNING"


def test_an_exception_comes_as_its_traceback() -> None:
    parsed = json.loads(JsonFormatter().format(_record("failed", exc=True)))
    assert parsed["exception"].startswith("Traceback")
    assert "ValueError: boom" in parsed["exception"]


def test_configure_json_writes_json_lines_to_stderr(
    root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(logging.INFO, "json")
    logging.getLogger("s3_sink").info("wrote %s", "part-0001.parquet")
    logging.getLogger("s3_sink").debug("not at INFO")
    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["msg"] for line in lines] == ["wrote part-0001.parquet"]
    assert len(root_logger.handlers) == 1


def test_the_default_is_text_and_a_bad_value_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOG_FORMAT", raising=False)
    assert log_format() == "text"
    monkeypatch.setenv("LOG_FORMAT", "JSON")
    assert log_format() == "json"
    monkeypatch.setenv("LOG_FORMAT", "xml")
    with pytest.raises(ConfigError, match="setting LOG_FORMAT: 'xml' is not one of text, json"):
        log_format()
    with pytest.raises(ConfigError, match="LOG_FORMAT"):
        configure(logging.INFO, "yaml")


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_every_entry_point_stops_on_a_bad_log_format_and_lists_it_in_help(module: str) -> None:
    env = {**os.environ, "LOG_FORMAT": "xml", "LOADGEN_DURATION_S": "1"}
    env = {k: v for k, v in env.items() if not k.endswith("BOOTSTRAP_SERVERS")}
    bad = _run(module, env)
    assert bad.returncode == 2, bad.stderr
    assert "error: setting LOG_FORMAT: 'xml' is not one of text, json" in bad.stderr
    helped = _run(module, env, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "LOG_FORMAT=text" in " ".join(helped.stdout.split())


def _run(module: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
