"""Elasticsearch down while records keep coming: the service pauses, commits nothing, and after
the outage indexes everything. A document Elasticsearch refuses goes to the dead-letter topic
with the reason and its original bytes, while the rest of its batch is indexed."""

import json
from urllib.parse import urlsplit

from support.es_sink import EsSinkCase, ratings_over_midnight
from support.kafka import committed_total, produce, read_topic
from support.proxy import proxy_to
from support.services import as_kafka, enriched_record


def test_an_outage_pauses_the_service_and_loses_nothing(case: EsSinkCase) -> None:
    url = urlsplit(case.stack_env["ELASTICSEARCH_URL"])
    ratings = ratings_over_midnight(900)
    with proxy_to(str(url.hostname), int(url.port or 9200)) as proxy:
        service = case.service(url=proxy.url)
        case.produce(case.ratings_topic, ratings[:300])
        service.wait_for(lambda m: m["written"] == 300, "300 written")

        proxy.down()
        case.produce(case.ratings_topic, ratings[300:600])
        service.wait_for(lambda m: m["state"] == "waiting for downstream", "a pause")
        case.produce(case.ratings_topic, ratings[600:])  # records keep coming
        paused = service.wait_for(lambda m: m["retries"] >= 3, "three retries")
        assert paused["state"] == "waiting for downstream"
        assert "unreachable" in paused["last_error"]
        assert committed_total(case.stack_env, case.group, case.ratings_topic) == 300

        proxy.up()
        resumed = service.wait_for(lambda m: m["written"] == 900, "all 900 written after the outage")
        assert resumed["state"] == "running"
        assert service.stop() == 0
    assert committed_total(case.stack_env, case.group, case.ratings_topic) == 900
    assert set(case.docs(case.ratings_alias)) == {str(r["rating_id"]) for r in ratings}


def test_refused_documents_become_dead_letters_and_the_rest_is_indexed(case: EsSinkCase) -> None:
    good = ratings_over_midnight(100)
    # A MariaDB zero date: a valid string for the decoder, not a date for the mapping.
    refused = [enriched_record(9001 + i, create_ts="0000-00-00 00:00:00") for i in range(2)]
    unreadable = (b"1", b"{not json")
    case.produce(case.ratings_topic, [*good[:50], refused[0], *good[50:], refused[1]])
    produce(case.stack_env, case.ratings_topic, [unreadable])
    service = case.service()
    service.wait_for(lambda m: m["written"] + m["dead_letters"] == 103, "103 handled")

    dead = read_topic(case.stack_env, case.dlq_topic, min_records=3, timeout_s=30)
    by_value = {m.value(): dict(m.headers()) for m in dead}
    assert set(by_value) == {as_kafka(r)[1] for r in refused} | {unreadable[1]}
    for record in refused:
        headers = by_value[as_kafka(record)[1]]
        assert headers["dlq.reason"].startswith(b"document_parsing_exception")
        assert b"create_ts" in headers["dlq.reason"]
        assert headers["dlq.topic"] == case.ratings_topic.encode()
        assert headers["dlq.stage"] == b"es-sink"
    assert by_value[unreadable[1]]["dlq.reason"].startswith(b"record")
    assert json.loads(as_kafka(refused[0])[1])["rating_id"] == 9001

    assert service.stop() == 0
    assert set(case.docs(case.ratings_alias)) == {str(r["rating_id"]) for r in good}
    assert committed_total(case.stack_env, case.group, case.ratings_topic) == 103


def test_a_second_rating_under_an_id_already_indexed_is_a_dead_letter_and_the_first_stays(
    case: EsSinkCase,
) -> None:
    """Two producers gave one id to two ratings: before, the second overwrote the first without a
    word. The same rating again (a producer's retry, its customer fields joined anew) is not."""
    first = enriched_record(7001, stars=5, message="great trip")
    other = enriched_record(7001, stars=1, message="awful trip")  # the same id, another rating
    again = enriched_record(7002) | {"enriched_ms": 1}  # 7002 retried: only the job's stamps differ
    case.produce(case.ratings_topic, [first, enriched_record(7002)])
    case.produce(case.ratings_topic, [other, again])
    service = case.service()
    service.wait_for(lambda m: m["written"] + m["dead_letters"] == 4, "4 handled")
    dead = read_topic(case.stack_env, case.dlq_topic, min_records=1, timeout_s=30)
    assert [m.value() for m in dead] == [as_kafka(other)[1]]
    reason = dict(dead[0].headers())["dlq.reason"].decode()
    assert reason.startswith("rating_id 7001 is indexed already in ")
    assert "another rating (stars 5 there, 1 here): two ratings share one id" in reason
    assert service.stop() == 0
    docs = case.docs(case.ratings_alias)
    assert set(docs) == {"7001", "7002"}
    assert (docs["7001"]["stars"], docs["7001"]["message"]) == (5, "great trip")
