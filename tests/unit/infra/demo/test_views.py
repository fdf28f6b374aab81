"""The demo's recount of every view from enriched records, with the views job's own rules."""

from typing import Any

from enrichment_job.views.settings import ViewsSettings
from infra.demo import views
from infra.demo.reconcile import decode_json
from infra.demo.views import Recount, Rules, segment_key

HOUR = 1_794_996_000_000  # 2026-11-18T10:00:00Z
RULES = Rules.of(ViewsSettings())


def _enriched(**fields: Any) -> dict[str, Any]:
    record = {
        "rating_id": 1,
        "user_id": 7,
        "stars": 2,
        "rating_time": HOUR + 1000,
        "channel": "web",
        "club_status": "gold",
        "customer_matched": True,
        "cdc_watermark_ms": HOUR + 2000,
    }
    return {**record, **fields}


def test_a_segment_key_follows_the_views_rules_for_late_hours_and_large_keys() -> None:
    assert segment_key(_enriched(), RULES) == ("gold", "web", "2026-11-18T10")
    unmatched = _enriched(customer_matched=False, club_status=None, channel=None)
    assert segment_key(unmatched, RULES) == ("unmatched", "unknown", "2026-11-18T10")
    closes = HOUR + 3_600_000 + RULES.lateness_ms
    assert segment_key(_enriched(cdc_watermark_ms=closes - 1), RULES) is not None
    assert segment_key(_enriched(cdc_watermark_ms=closes), RULES) is None  # late: refused
    assert segment_key(_enriched(channel="c" * 1_100), RULES) is None  # over VIEWS_JOB_MAX_KEY_BYTES


def test_the_recount_counts_only_the_rows_the_run_touches() -> None:
    run = [_enriched(rating_id=10, user_id=7, stars=1), _enriched(rating_id=11, user_id=8, stars=5)]
    count = Recount.of_run(RULES, run)
    earlier = _enriched(rating_id=3, user_id=7, stars=4, rating_time=HOUR + 500)
    other_hour = _enriched(rating_id=4, user_id=9, rating_time=HOUR - 10)
    for record in [earlier, other_hour, *run]:
        count.add(record)
    assert count.counts["customer_ratings"] == {
        (7,): {"ratings": 2, "unhappy_ratings": 1, "stars_sum": 5, "last_rating_id": 10},
        (8,): {"ratings": 1, "unhappy_ratings": 0, "stars_sum": 5, "last_rating_id": 11},
    }
    assert count.counts["segment_hourly"] == {
        ("gold", "web", "2026-11-18T10"): {
            "ratings": 3,
            "unhappy_ratings": 1,
            "stars_sum": 10,
            "customers": 2,
        }
    }
    assert count.earliest_ms() == HOUR - 600_000


def test_bytes_that_are_not_utf8_are_read_and_reported_not_a_crash() -> None:
    assert decode_json(b'{"a": 1}') == ({"a": 1}, True)
    assert decode_json(b'{"message": "caf\xe9"}') == ({"message": "caf\ufffd"}, False)
    assert decode_json(b"{not json") == (None, True)


def test_caught_up_waits_for_the_required_views_only(monkeypatch: Any) -> None:
    """A view another run declared on the same stack is listed by the service but run by no
    views job of this run: the drain does not wait for it (it waited for ever)."""
    listed = {
        "customer_ratings": {"freshness": {"enriched_to": {"0": 10}}},
        "segment_hourly": {"freshness": {"enriched_to": {"0": 10}}},
        "left_by_a_demo": {"freshness": {"enriched_to": {"0": 3}}},
    }
    monkeypatch.setattr(views, "catalog", lambda: listed)
    monkeypatch.setattr(
        views, "behind", lambda servers, topic, view: 10 - view["freshness"]["enriched_to"]["0"]
    )
    assert views.caught_up("kafka", "enriched", ("customer_ratings", "segment_hourly"))
    assert not views.caught_up("kafka", "enriched", ("customer_ratings", "left_by_a_demo"))
    assert not views.caught_up("kafka", "enriched", ("customer_ratings", "not_served_yet"))
