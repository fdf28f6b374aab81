"""What the benchmarks share: printing their figures, keeping them as JSON, and cleaning up when
stopped."""

import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any


def exit_on_sigterm() -> None:
    """SIGTERM (`kill`, a CI timeout) ends the benchmark through its `finally` blocks, which stop
    the jobs and services it started and delete its topics; by default it would die at once and
    leave them running."""

    def leave(signum: int, _frame: FrameType | None) -> None:
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, leave)


def write_result(result: dict[str, Any], out: Path) -> None:
    print(json.dumps(result, indent=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {out}")
