"""Every consumer service answers --help with its settings and defaults, and refuses an unknown
argument, before it connects anywhere (Kafka here points at a closed port)."""

import os
import subprocess
import sys

import pytest

SERVICES = {
    "services.es_sink": "ES_SINK_",
    "services.s3_sink": "S3_SINK_",
    "services.slack_notifier": "SLACK_",
}


def _run(module: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, f"{prefix}BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("module", SERVICES)
def test_help_lists_the_settings_and_connects_nowhere(module: str) -> None:
    done = _run(module, SERVICES[module], "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m {module} [--help]")
    assert f"{SERVICES[module]}BOOTSTRAP_SERVERS=127.0.0.1:9092" in done.stdout
    assert "consuming" not in done.stderr  # the loop never started


@pytest.mark.parametrize("module", SERVICES)
def test_an_unknown_argument_exits_2_naming_it(module: str) -> None:
    done = _run(module, SERVICES[module], "--bogus")
    assert done.returncode == 2
    assert "unknown arguments --bogus" in done.stderr
