"""The query service's figures for Prometheus, served at GET /metrics beside the API: rows,
freshness and whether it is still loading per view, the changelog records applied, whether the
store has caught up, and the SSE subscribers."""

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.views.changelog import ChangelogProcess
from services.views.hub import Hub
from services.views.store import Store

__all__ = ["ViewsCollector"]


class ViewsCollector(Collector):
    def __init__(
        self,
        names: Callable[[], list[str]],
        loading: Callable[[], frozenset[str]],
        store: Store,
        hub: Hub,
        changelog: ChangelogProcess,
    ) -> None:
        self.names, self.loading, self.store, self.hub = names, loading, store, hub
        self.changelog = changelog

    def collect(self) -> Iterator[Metric]:
        applied = CounterMetricFamily(
            "ratings_views_changelog_records", "changelog records applied to the store since the start"
        )
        applied.add_metric([], self.changelog.records)
        yield applied
        caught_up = GaugeMetricFamily(
            "ratings_views_caught_up", "1 once the store has caught up with the changelog topics (/health)"
        )
        caught_up.add_metric(
            [], 1.0 if self.changelog.caught_up.is_set() and not self.changelog.failed else 0.0
        )
        yield caught_up
        subscribers = GaugeMetricFamily(
            "ratings_views_subscribers", "clients following a view's changes (SSE)"
        )
        subscribers.add_metric([], self.hub.count())
        yield subscribers
        rows = GaugeMetricFamily("ratings_views_rows", "rows of the view in the store", labels=["view"])
        refused = GaugeMetricFamily(
            "ratings_views_loading",
            "1 while the view's changelog topic is not yet read to its end: its queries answer 503",
            labels=["view"],
        )
        loading = self.loading()
        behind = GaugeMetricFamily(
            "ratings_views_rating_lag_seconds",
            "now minus the newest rating time the view reflects",
            labels=["view"],
        )
        for name in self.names():
            rows.add_metric([name], self.store.count(name))
            refused.add_metric([name], 1.0 if name in loading else 0.0)
            info = self.store.view_info(name) or {}
            marker = info.get("marker")
            newest = marker.max_rating_time if marker is not None else None  # ms
            if isinstance(newest, int | float):
                behind.add_metric([name], max(0.0, time.time() - newest / 1000))
        yield rows
        yield refused
        yield behind
