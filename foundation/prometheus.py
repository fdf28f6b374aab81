"""A Prometheus endpoint for a program's figures: an HTTP server of its own (prometheus-client)
on a thread, over one collector that reads the figures when Prometheus scrapes, so a batch
never waits for metrics. Every metric name starts with `ratings_`."""

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from foundation.errors import ConfigError

__all__ = ["Endpoint", "MetricsServer", "counters", "serve"]

log = logging.getLogger(__name__)


class Endpoint(Protocol):
    """Where a program serves its metrics: a port (0: no endpoint) and an address."""

    @property
    def metrics_port(self) -> int: ...
    @property
    def metrics_host(self) -> str: ...


def counters(
    specs: Iterable[tuple[str, str, str]], values: Mapping[str, float], label: str, label_value: str
) -> Iterator[Metric]:
    """A counter per (metric name, key in `values`, help text), labelled `label`=`label_value`."""
    for name, key, doc in specs:
        family = CounterMetricFamily(name, doc, labels=[label])
        family.add_metric([label_value], values.get(key, 0))
        yield family


class MetricsServer:
    """The running endpoint; `close()` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self.server, self.thread = server, thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve(collector: Collector, where: Endpoint, setting_prefix: str) -> MetricsServer | None:
    """Serves `collector` at http://<metrics_host>:<metrics_port>/metrics, or nothing when the
    port is 0. A port that cannot be bound raises ConfigError naming the setting."""
    if not where.metrics_port:
        return None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, thread = start_http_server(where.metrics_port, where.metrics_host, registry)
    except OSError as err:
        raise ConfigError(
            f"setting {setting_prefix}METRICS_PORT: cannot serve metrics on "
            f"{where.metrics_host}:{where.metrics_port}: {err.strerror or err}"
        ) from None
    log.info("Prometheus metrics at http://%s:%d/metrics", where.metrics_host, server.server_port)
    return MetricsServer(server, thread)
