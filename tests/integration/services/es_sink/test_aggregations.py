"""The aggregations the saved Kibana visualizations run (infra/kibana/ratings.ndjson), on the real
Elasticsearch over documents the service indexed, agree with figures computed from the input."""

from collections import Counter, defaultdict
from typing import Any

from support.es_sink import HOUR_MS, EsSinkCase, alerts_among, ratings_over_midnight

UNHAPPY_PLATINUM = {
    "bool": {"filter": [{"range": {"stars": {"lt": 3}}}, {"term": {"club_status": "platinum"}}]}
}


def between_middle_values(values: list[int], median: float) -> bool:
    """Elasticsearch's percentiles are estimates (t-digest): the median lies between the two
    middle values of the sorted input (they are equal for an odd count)."""
    ordered = sorted(values)
    low, high = ordered[(len(ordered) - 1) // 2], ordered[len(ordered) // 2]
    return low <= median <= high


def test_the_dashboard_figures_match_the_input(case: EsSinkCase) -> None:
    ratings = ratings_over_midnight(997, hours=6)
    for i, record in enumerate(ratings):  # uneven stars per group, so medians differ
        record["stars"] = 1 + (i * i + i // 7) % 5
    alerts = alerts_among(ratings)
    case.produce(case.ratings_topic, ratings)
    case.produce(case.alerts_topic, alerts)
    service = case.service()
    total = len(ratings) + len(alerts)
    service.wait_for(lambda m: m["written"] == total, f"{total} written")
    assert service.stop() == 0
    case.es.indices.refresh(index=f"{case.ratings_alias},{case.alerts_alias}")

    aggs = {
        "per_hour": {"date_histogram": {"field": "rating_time", "fixed_interval": "1h", "min_doc_count": 1}},
        "by_club_status": {
            "terms": {"field": "club_status", "size": 10},
            "aggs": {"median_stars": {"percentiles": {"field": "stars", "percents": [50]}}},
        },
        "by_region": {
            "terms": {"field": "region", "size": 20},
            "aggs": {"median_stars": {"percentiles": {"field": "stars", "percents": [50]}}},
        },
        "by_channel": {"terms": {"field": "channel", "size": 10}},
        "unhappy_platinum": {"filter": UNHAPPY_PLATINUM},
    }
    result: dict[str, Any] = case.es.search(index=case.ratings_alias, size=0, aggs=aggs)["aggregations"]

    per_hour = Counter(r["rating_time"] // HOUR_MS * HOUR_MS for r in ratings)
    assert {b["key"]: b["doc_count"] for b in result["per_hour"]["buckets"]} == per_hour
    assert len(per_hour) == 6

    for field in ("club_status", "region"):
        stars: dict[str, list[int]] = defaultdict(list)
        for r in ratings:
            stars[r[field]].append(r["stars"])
        buckets = result[f"by_{field}"]["buckets"]
        assert {b["key"]: b["doc_count"] for b in buckets} == {k: len(v) for k, v in stars.items()}
        for bucket in buckets:
            median = bucket["median_stars"]["values"]["50.0"]
            assert between_middle_values(stars[bucket["key"]], median), (field, bucket["key"], median)

    by_channel = {b["key"]: b["doc_count"] for b in result["by_channel"]["buckets"]}
    assert by_channel == Counter(r["channel"] for r in ratings)

    assert result["unhappy_platinum"]["doc_count"] == len(alerts)
    assert case.count(case.alerts_alias) == len(alerts)
