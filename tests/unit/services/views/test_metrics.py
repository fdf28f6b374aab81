"""The query service's figures for Prometheus, collected from its parts without a server."""

import threading
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from foundation.view_marker import ViewMarker
from services.views.hub import Hub
from services.views.metrics import ViewsCollector
from services.views.store import Change, Store, key_of

MARKER = ViewMarker.decode(
    {"view": "customer_ratings", "key": ["user_id"], "columns": [{"name": "user_id", "type": "int"}]}
)


def test_each_view_says_whether_it_is_still_loading_beside_its_rows(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.apply(
        [Change("customer_ratings", key_of([1]), ("user_id",), '{"user_id":1}')],
        {"customer_ratings": MARKER},
        {},
    )
    changelog = SimpleNamespace(records=5, caught_up=threading.Event(), failed=None)
    loading = {"now": frozenset({"segment_hourly"})}
    registry = CollectorRegistry(auto_describe=False)
    names = ["customer_ratings", "segment_hourly"]
    registry.register(ViewsCollector(lambda: names, lambda: loading["now"], store, Hub(), changelog))  # type: ignore[arg-type]
    scraped = generate_latest(registry).decode()
    assert 'ratings_views_loading{view="customer_ratings"} 0.0' in scraped
    assert 'ratings_views_loading{view="segment_hourly"} 1.0' in scraped
    assert 'ratings_views_rows{view="customer_ratings"} 1.0' in scraped
    assert "ratings_views_caught_up 0.0" in scraped
    loading["now"] = frozenset()
    assert 'ratings_views_loading{view="segment_hourly"} 0.0' in generate_latest(registry).decode()
