"""Reading a program's Prometheus endpoint in tests: where it listens, and its samples."""

import urllib.request
from dataclasses import dataclass, field

from support.views_api import free_port


@dataclass(frozen=True)
class Endpoint:
    """Where a test serves metrics (services.core.prometheus.serve): a free port by default."""

    metrics_port: int = field(default_factory=free_port)
    metrics_host: str = "127.0.0.1"


def scrape(port: int) -> dict[str, float]:
    """GET /metrics on 127.0.0.1:`port`: `name{labels}` -> value, comments dropped."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    samples = [line.rsplit(" ", 1) for line in lines if line[:1] not in ("#", "")]
    return {name: float(value) for name, value in samples}
