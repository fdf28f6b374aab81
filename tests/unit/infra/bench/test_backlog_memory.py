"""The backlog-memory benchmark: --help answers without the stack, and the memory it reads is
the process's own resident set."""

import os
import subprocess
import sys

import pytest

from infra.bench.backlog_memory import rss_mb


@pytest.mark.parametrize(
    ("module", "setting"),
    [
        ("infra.bench.backlog_memory", "ENRICH_MAX_BATCH_BYTES"),
        ("infra.bench.views_memory", "VIEWS_JOB_MAX_BATCH_BYTES"),
    ],
)
def test_help_names_its_settings_and_connects_nowhere(module: str, setting: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
    )
    assert done.returncode == 0, done.stderr
    for option in ("--ratings", "--message-bytes", "--max-batch-bytes", "--out", setting):
        assert option in done.stdout


def test_rss_is_this_process_s_and_none_once_a_process_is_gone() -> None:
    own = rss_mb(os.getpid())
    assert own is not None and 5 < own < 10_000
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert rss_mb(gone.pid) is None
