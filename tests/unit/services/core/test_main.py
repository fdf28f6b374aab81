"""Every consumer service answers --help with its settings and defaults, and refuses an unknown
argument, before it connects anywhere (Kafka here points at a closed port)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.services import ServiceProcess

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
    service = ServiceProcess(
        "services.es_sink", "ES_SINK_", {"ES_SINK_BOOTSTRAP_SERVERS": "127.0.0.1:1"}, tmp_path
    )
    service.start()
    service.wait_for(lambda m: m.get("state") == "running", "the loop running")
    assert service.proc is not None
    try:
        service.proc.send_signal(signal.SIGUSR1)
        # faulthandler writes the dump a line at a time, thread after thread: wait for the
        # loop's frames themselves, not for the first thread's header
        deadline = time.monotonic() + 30
        while "services/core/loop.py" not in service.tail(400) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "most recent call first" in service.tail(400), service.tail()
        # the loop's frames are in the dump
        assert "services/core/loop.py" in service.tail(400), service.tail()
        assert service.proc.poll() is None, service.tail()
        assert service.stop() == 0
    finally:
        if service.proc.poll() is None:
            service.kill()
