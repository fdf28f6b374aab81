"""Every consumer service answers --help with its settings and defaults, and refuses an unknown
argument, before it connects anywhere (Kafka here points at a closed port)."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

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


def test_sigusr1_writes_every_thread_s_stack_and_the_service_goes_on(tmp_path: Path) -> None:
    """What an operator (or the fault matrix) asks of a service that stopped making progress."""
    log = tmp_path / "es_sink.log"
    env = {**os.environ, "ES_SINK_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "services.es_sink"], env=env, stdout=out, stderr=out)
    try:
        _wait_for(lambda: "consuming" in log.read_text(), proc)
        proc.send_signal(signal.SIGUSR1)
        _wait_for(lambda: "most recent call first" in log.read_text(), proc)
        assert "services/core/loop.py" in log.read_text()  # the loop's frames are in the dump
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait(10)


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, f"the service exited with {proc.returncode}"
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.1)
