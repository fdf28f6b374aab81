"""Every record becomes exactly one document, readable through the aliases, in the index of its
UTC day, with _id = rating_id: also after duplicates, a replay from the start, and a kill -9."""

from support.es_sink import MIDNIGHT_MS, EsSinkCase, alerts_among, ratings_over_midnight
from support.kafka import committed_total
from support.services import enriched_record


def test_records_of_both_topics_become_one_document_each_in_their_daily_index(case: EsSinkCase) -> None:
    ratings = ratings_over_midnight(600)
    alerts = alerts_among(ratings)
    assert alerts
    case.produce(case.ratings_topic, ratings)
    case.produce(case.alerts_topic, alerts)
    total = len(ratings) + len(alerts)
    service = case.service()
    service.wait_for(lambda m: m["written"] == total, f"{total} written")

    docs = case.docs(case.ratings_alias)
    assert set(docs) == {str(r["rating_id"]) for r in ratings}
    for record in (ratings[0], ratings[-1]):
        doc = docs[str(record["rating_id"])]
        assert doc["rating_id"] == record["rating_id"]
        assert doc["full_name"] == record["full_name"]
        day = "2026.11.22" if record["rating_time"] < MIDNIGHT_MS else "2026.11.23"
        assert doc["_index"] == f"{case.ratings_alias}-{day}"
    assert {d["_index"] for d in docs.values()} == {
        f"{case.ratings_alias}-2026.11.22",
        f"{case.ratings_alias}-2026.11.23",
    }
    alert_docs = case.docs(case.alerts_alias)
    assert set(alert_docs) == {str(r["rating_id"]) for r in alerts}
    assert all(d["_index"].startswith(f"{case.alerts_alias}-2026.11.2") for d in alert_docs.values())

    assert committed_total(case.stack_env, case.group, case.ratings_topic) == len(ratings)
    assert committed_total(case.stack_env, case.group, case.alerts_topic) == len(alerts)
    assert service.stop() == 0


def test_a_history_replayed_from_1970_makes_an_index_a_year_not_one_a_day(case: EsSinkCase) -> None:
    """Ratings of 1,000 distinct days, from 1970 on, written now: daily indices would be about
    1,000 (a node's shard limit), and from then on every new day would be dead-lettered."""
    day_ms = 86_400_000
    old = [enriched_record(90_000 + i, rating_time=i * 20 * day_ms) for i in range(1000)]
    recent = enriched_record(91_000, rating_time=MIDNIGHT_MS - 5 * day_ms)  # late, not history
    case.produce(case.ratings_topic, [*old, recent])
    service = case.service()
    service.wait_for(lambda m: m["written"] == len(old) + 1, f"{len(old) + 1} written")
    docs = case.docs(case.ratings_alias)
    assert set(docs) == {str(r["rating_id"]) for r in [*old, recent]}
    years = {f"{case.ratings_alias}-{year}" for year in range(1970, 2025)}
    assert {d["_index"] for d in docs.values()} == {*years, f"{case.ratings_alias}-2026.11.18"}
    assert service.stop() == 0


def test_duplicates_and_a_replay_from_the_start_add_no_document(case: EsSinkCase) -> None:
    ratings = ratings_over_midnight(300)
    case.produce(case.ratings_topic, ratings)
    service = case.service()
    service.wait_for(lambda m: m["written"] == 300, "300 written")

    case.produce(case.ratings_topic, ratings[:150])  # the same records again
    service.wait_for(lambda m: m["written"] == 450, "450 written")
    assert service.stop() == 0
    assert committed_total(case.stack_env, case.group, case.ratings_topic) == 450
    assert case.count(case.ratings_alias) == 300

    replay = case.service(group=case.group + "-replay")  # a reset group: everything once more
    replay.wait_for(lambda m: m["written"] == 450, "replay of 450 written")
    assert replay.stop() == 0
    docs = case.docs(case.ratings_alias)
    assert set(docs) == {str(r["rating_id"]) for r in ratings}


def test_a_kill_mid_stream_and_a_restart_give_exactly_one_document_per_record(case: EsSinkCase) -> None:
    n = 10_000
    case.produce(case.ratings_topic, ratings_over_midnight(n))
    # the dead member's partitions move to the restarted one after the session timeout
    quick = {"ES_SINK_BATCH_MAX_RECORDS": "100", "ES_SINK_KAFKA_EXTRA": '{"session.timeout.ms": "6000"}'}
    first = case.service(**quick)
    first.wait_for(lambda m: m["written"] >= 1_000, "1,000 written")
    first.kill()
    committed_at_kill = committed_total(case.stack_env, case.group, case.ratings_topic)
    assert 1_000 <= committed_at_kill < n  # killed mid-stream

    second = case.service(**quick)
    second.wait_for(
        lambda _m: committed_total(case.stack_env, case.group, case.ratings_topic) == n, "all committed"
    )
    assert second.stop() == 0
    assert case.count(case.ratings_alias) == n


def test_a_batch_split_into_small_bulk_requests_indexes_every_record_once(case: EsSinkCase) -> None:
    ratings = ratings_over_midnight(300)
    case.produce(case.ratings_topic, ratings)
    # About five documents per request: a 300-record batch is some sixty bulk requests.
    service = case.service(ES_SINK_BULK_MAX_BYTES="4000", ES_SINK_BATCH_MAX_RECORDS="300")
    service.wait_for(lambda m: m["written"] == 300, "300 written")
    assert service.stop() == 0
    assert set(case.docs(case.ratings_alias)) == {str(r["rating_id"]) for r in ratings}
    assert committed_total(case.stack_env, case.group, case.ratings_topic) == 300
