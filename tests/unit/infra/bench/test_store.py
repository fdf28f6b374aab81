"""python -m infra.bench.store answers --help with what it measures, and measures nothing."""

import subprocess
import sys


def test_help_says_what_it_measures_and_runs_no_store() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "infra.bench.store", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: python -m infra.bench.store")
    assert "microseconds per change" in run.stdout
    assert "load_s" not in run.stdout  # no store was loaded
