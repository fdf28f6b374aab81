"""The services' Prometheus endpoint: what a scrape reads from a service's figures, no endpoint
at port 0, and a port that is taken stops the service naming the setting."""

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support.prometheus import Endpoint
from support.views_api import free_port

from foundation.errors import ConfigError
from foundation.prometheus import serve
from services.core.metrics import Metrics, ServiceCollector


def _metrics() -> Metrics:
    metrics = Metrics("es_sink", None, 10)
    metrics.add("consumed", 120)
    metrics.add("written", 117)
    metrics.add("dead_letters", 3)
    metrics.set("state", "waiting for downstream")
    metrics.batch_done(0.25)
    metrics.batch_done(0.5)
    metrics.set_lag("ratings-with-customer-data", 1, 42)
    metrics.set_lag("ratings-with-customer-data", 0, -3)  # a cached end behind the commit: none
    return metrics


def test_a_scrape_reads_counts_batches_lag_and_state() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(_metrics()))
    text = generate_latest(registry).decode()
    assert 'ratings_records_consumed_total{service="es_sink"} 120.0' in text
    assert 'ratings_records_written_total{service="es_sink"} 117.0' in text
    assert 'ratings_dead_letters_total{service="es_sink"} 3.0' in text
    assert 'ratings_downstream_retries_total{service="es_sink"} 0.0' in text
    assert 'ratings_batch_seconds_count{service="es_sink"} 2.0' in text
    assert 'ratings_batch_seconds_sum{service="es_sink"} 0.75' in text
    lag = 'ratings_consumer_lag_records{partition="%d",service="es_sink",topic="ratings-with-customer-data"}'
    assert f"{lag % 1} 42.0" in text
    assert f"{lag % 0} 0.0" in text
    waiting = 'ratings_service_state{ratings_service_state="waiting for downstream",service="es_sink"} 1.0'
    assert waiting in text
    assert 'ratings_service_state{ratings_service_state="running",service="es_sink"} 0.0' in text


def test_the_endpoint_serves_the_figures_over_http_and_stops() -> None:
    port = free_port()
    endpoint = serve(ServiceCollector(_metrics()), Endpoint(port), "ES_SINK_")
    assert endpoint is not None and endpoint.port == port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert response.status == 200
            assert 'ratings_records_consumed_total{service="es_sink"} 120.0' in response.read().decode()
    finally:
        endpoint.close()
    with pytest.raises(ConnectionRefusedError):  # nothing listens any more
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_port_0_serves_nothing() -> None:
    assert serve(ServiceCollector(_metrics()), Endpoint(0), "ES_SINK_") is None


def test_a_taken_port_names_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            ConfigError, match=rf"setting ES_SINK_METRICS_PORT: cannot serve metrics on 127.0.0.1:{port}"
        ):
            serve(ServiceCollector(_metrics()), Endpoint(port), "ES_SINK_")
