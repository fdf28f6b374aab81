"""Reading a program's Prometheus endpoint in tests: where it listens, and its samples."""

from dataclasses import dataclass, field

from infra.demo.figures import scrape
from support.views_api import free_port

__all__ = ["Endpoint", "scrape"]


@dataclass(frozen=True)
class Endpoint:
    """Where a test serves metrics (foundation.prometheus.serve): a free port by default."""

    metrics_port: int = field(default_factory=free_port)
    metrics_host: str = "127.0.0.1"
