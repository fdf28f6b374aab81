"""What the services' benchmarks share: printing their figures and keeping them as JSON."""

import json
from pathlib import Path
from typing import Any


def write_result(result: dict[str, Any], out: Path) -> None:
    print(json.dumps(result, indent=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {out}")
