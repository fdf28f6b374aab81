"""A benchmark stopped with SIGTERM still runs its clean-up (its `finally` blocks)."""

import signal
import subprocess
import sys
from pathlib import Path

from infra.stack.settings import REPO_ROOT

PROGRAM = """
import os, signal, sys
from pathlib import Path
from infra.bench.results import exit_on_sigterm
exit_on_sigterm()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    signal.pause()
finally:
    Path(sys.argv[1]).write_text("cleaned up")
"""


def test_sigterm_runs_the_clean_up_and_exits_143(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(marker)], cwd=REPO_ROOT, timeout=60, check=False
    )
    assert done.returncode == 128 + signal.SIGTERM
    assert marker.read_text() == "cleaned up"
