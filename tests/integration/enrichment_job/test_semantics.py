"""The join semantics of DESIGN.md against the real stack: MariaDB statements through Debezium,
ratings through Kafka, outputs read back from Kafka with read_committed.

One job (grace 3 s) serves the tests that only add data; bootstrap, crash and replay start
jobs of their own."""

import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.enrichment import (
    Job,
    Topics,
    by_rating,
    create_topics,
    db_now_ms,
    delete_topics,
    execute,
    insert_customer,
    next_second,
    produce,
    rating,
    read_topic,
    update_join_case,
    values,
)
from support.prometheus import scrape
from support.views_api import free_port

from enrichment_job.driver.app import FIRST_BATCH_SHARE
from enrichment_job.settings import JobSettings
from foundation.enriched import decode_enriched
from services.es_sink.documents import document
from services.s3_sink.rows import decode_value, parse_values
from services.s3_sink.schema import to_lake_table
from services.slack_notifier.alert import decode_alert

StackEnv = dict[str, str]
GRACE_MS = 3000
TEMPLATE = Path(__file__).parents[3] / "services" / "es_sink" / "ratings-index-template.json"
FUTURE = (
    "rating_time more than 300000 ms after the record's Kafka timestamp or the job's clock, the "
    "earlier (ENRICH_MAX_FUTURE_MS)"
)


@pytest.fixture(scope="module")
def job(stack_env: StackEnv, topics: Topics, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    metrics = {"ENRICH_METRICS_PORT": str(free_port())}
    job = Job(stack_env, topics, tmp_path_factory.mktemp("jobs") / "main", GRACE_MS, metrics).start()
    yield job
    job.stop()


def _ids() -> Iterator[int]:
    base = time.time_ns() // 1000
    return iter(range(base, base + 1_000_000))


IDS = _ids()


def test_a_rating_joins_the_row_valid_at_its_time_and_updates_apply_later(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    update_join_case(stack_env, topics, db, next(IDS), next(IDS))


def _scrape(job: Job) -> dict[str, float]:
    """The job's Prometheus endpoint: metric name (labels dropped) -> value, one series each."""
    samples = scrape(int(job.env["ENRICH_METRICS_PORT"]))
    return {name.split("{")[0]: value for name, value in samples.items()}


def test_prometheus_scrapes_the_job_s_counts_batches_and_watermark_lag(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    before = _scrape(job)
    customer = insert_customer(db, "platinum")
    t0 = next_second(db)
    first = next(IDS)
    produce(stack_env, topics.name("ratings"), [rating(first, customer, 1, t0)])
    assert by_rating(stack_env, topics.name("enriched"), {first})[first]["customer_matched"]
    enriched = before.get("ratings_job_enriched_total", 0)
    deadline = time.monotonic() + 30
    while (after := _scrape(job)).get("ratings_job_enriched_total", 0) == enriched:
        assert time.monotonic() < deadline, after
        time.sleep(0.5)
    assert after["ratings_job_enriched_total"] >= enriched + 1
    assert after["ratings_job_alerts_total"] >= before.get("ratings_job_alerts_total", 0) + 1
    assert after["ratings_job_cdc_changes_total"] >= 1
    assert after["ratings_job_batch_seconds_count"] > before.get("ratings_job_batch_seconds_count", 0)
    assert 0 <= after["ratings_job_watermark_lag_seconds"] < 60
    assert after["ratings_query_last_batch_id"] >= 1


def test_b_after_a_delete_ratings_are_unmatched_and_a_reinsert_matches_again(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    customer = insert_customer(db, "gold")
    next_second(db)
    execute(db, "DELETE FROM customers WHERE id = %s", customer)
    t_deleted = next_second(db)
    insert_customer(db, "bronze", customer_id=customer)
    t_back = next_second(db)
    gone, back = next(IDS), next(IDS)
    produce(
        stack_env,
        topics.name("ratings"),
        # The last millisecond of the delete's second, before the re-insert's second began.
        [rating(gone, customer, 4, t_deleted // 1000 * 1000 - 1), rating(back, customer, 4, t_back)],
    )
    out = by_rating(stack_env, topics.name("enriched"), {gone, back})
    assert out[gone]["customer_matched"] is False and out[gone]["club_status"] is None
    assert out[back]["customer_matched"] is True and out[back]["club_status"] == "bronze"


def test_d_grace_joins_a_row_created_shortly_after_the_rating_and_not_later(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    now = db_now_ms(db)
    customer = insert_customer(db, "platinum")  # created about now
    within, beyond = next(IDS), next(IDS)
    produce(
        stack_env,
        topics.name("ratings"),
        [rating(within, customer, 5, now - 1000), rating(beyond, customer, 5, now - GRACE_MS - 2000)],
    )
    out = by_rating(stack_env, topics.name("enriched"), {within, beyond})
    assert out[within]["customer_matched"] is True and out[within]["club_status"] == "platinum"
    assert out[beyond]["customer_matched"] is False


def test_e_records_of_one_customer_come_out_in_input_order(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    customer = insert_customer(db, "platinum")
    t0 = next_second(db)
    # Rating times out of order on purpose: order follows the input offsets, not the times.
    ids = [next(IDS) for _ in range(30)]
    produce(
        stack_env,
        topics.name("ratings"),
        [rating(rid, customer, 1 + i % 2, t0 + (i * 7919) % 900) for i, rid in enumerate(ids)],
    )
    by_rating(stack_env, topics.name("enriched"), set(ids))
    enriched = [
        v["rating_id"]
        for v in values(read_topic(stack_env, topics.name("enriched"), timeout_s=10))
        if v["user_id"] == customer
    ]
    alerts = [
        v["rating_id"]
        for v in values(read_topic(stack_env, topics.name("alerts"), timeout_s=10))
        if v["user_id"] == customer
    ]
    assert enriched == ids
    assert alerts == [rid for i, rid in enumerate(ids) if 1 + i % 2 < 3]


def test_ratings_newer_than_a_batch_s_heartbeat_are_released_by_the_batch_in_a_second_transaction(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    """A rating newer than the newest heartbeat its batch read waits for the next one. The batch
    waits for it (ENRICH_RELEASE_WAIT_MS) after its commit and writes those ratings in a second
    transaction, with a marker of the same batch, instead of a trigger later. Ratings here are
    150 ms ahead of the database clock, one every 50 ms for 2 s: each batch reads some that no
    heartbeat it read covers, and that a heartbeat within its wait does. Each comes out once,
    in input order."""
    customer = insert_customer(db, "gold")
    offset_ms = db_now_ms(db) - time.time_ns() // 1_000_000
    ids = [next(IDS) for _ in range(40)]
    for rid in ids:
        now_ms = time.time_ns() // 1_000_000 + offset_ms
        produce(stack_env, topics.name("ratings"), [rating(rid, customer, 4, now_ms + 150)])
        time.sleep(0.05)
    out = by_rating(stack_env, topics.name("enriched"), set(ids))
    assert all(out[rid]["customer_matched"] for rid in ids)
    enriched = [
        v["rating_id"]
        for v in values(read_topic(stack_env, topics.name("enriched"), timeout_s=10))
        if v["user_id"] == customer
    ]
    assert enriched == ids, "each once, in input order across both transactions of a batch"
    job_name = topics.env()["ENRICH_JOB_NAME"]
    markers = [
        json.loads(m.value())
        for m in read_topic(stack_env, JobSettings.model_fields["commits_topic"].default, timeout_s=20)
        if m.key() == job_name.encode()
    ]
    released = [m for m in markers if m.get("released")]
    assert released, f"no batch released ratings in its second transaction: {markers[-8:]}"
    for second in released:
        first = [m for m in markers if m["batch_id"] == second["batch_id"] and "released" not in m]
        assert first and first[0]["waiting"] >= second["released"], (first, second)
        assert markers.index(first[0]) < markers.index(second)


def test_g_bad_records_go_to_the_dlq_with_reasons_and_good_ones_around_them_are_enriched(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    customer = insert_customer(db, "silver")
    t0 = next_second(db)
    first, last = next(IDS), next(IDS)
    marker = uuid.uuid4().hex
    bad = {
        f"{{not json {marker}": "not a JSON object",
        json.dumps(
            {"marker": marker, "user_id": customer, "stars": 3, "rating_time": t0}
        ): "missing field rating_id",
        json.dumps(
            {"marker": marker, "rating_id": 1, "user_id": customer, "stars": "3", "rating_time": t0}
        ): "field stars is not int",
        json.dumps(
            {"marker": marker, "rating_id": 2, "user_id": customer, "stars": 9, "rating_time": t0}
        ): "stars outside 1..5",
        # Near the top of the long range: rating_time + grace overflowed and crash-looped the job.
        json.dumps(
            {"marker": marker, "rating_id": 3, "user_id": customer, "stars": 3, "rating_time": 2**63 - 1}
        ): FUTURE,
        json.dumps(
            {"marker": marker, "rating_id": 4, "user_id": customer, "stars": 3, "rating_time": t0 + 3_600_000}
        ): FUTURE,
        json.dumps(
            {"marker": marker, "rating_id": 5, "user_id": customer, "stars": 3, "rating_time": -1}
        ): "rating_time before 1970-01-01",
    }
    produce(
        stack_env,
        topics.name("ratings"),
        [rating(first, customer, 3, t0), *((b"bad", v.encode()) for v in bad), rating(last, customer, 3, t0)],
    )
    out = by_rating(stack_env, topics.name("enriched"), {first, last})
    assert all(v["customer_matched"] for v in out.values())
    dead = [
        r
        for r in read_topic(stack_env, topics.name("dlq"), min_records=len(bad), timeout_s=60)
        if marker.encode() in r.value()
    ]
    reasons = {r.value().decode(): dict(r.headers())["dlq.reason"].decode() for r in dead}
    assert reasons == bad
    for record in dead:
        headers = dict(record.headers())
        assert headers["dlq.topic"].decode() == topics.name("ratings")
        assert int(headers["dlq.offset"]) >= 0


def test_a_rating_that_is_not_utf8_is_a_dead_letter_with_its_bytes_not_an_alert(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    """Bytes that are not UTF-8 inside a JSON string: enriched, they would reach every consumer
    and fail each sink that parses JSON (the alert in no dashboard, no lake row, no Slack)."""
    customer = insert_customer(db, "platinum")
    t0 = next_second(db)
    broken, after = next(IDS), next(IDS)
    _, text = rating(broken, customer, 1, t0, message="caf-")
    latin1 = text.replace(b"caf-", b"caf\xe9 \xff")
    produce(
        stack_env, topics.name("ratings"), [(str(customer).encode(), latin1), rating(after, customer, 1, t0)]
    )
    by_rating(stack_env, topics.name("alerts"), {after})
    dead = [r for r in read_topic(stack_env, topics.name("dlq"), timeout_s=30) if r.value() == latin1]
    assert len(dead) == 1
    assert dict(dead[0].headers())["dlq.reason"] == b"value is not valid UTF-8"
    for role in ("enriched", "alerts"):
        # json.loads of bytes decodes them strictly: every record the job wrote is UTF-8.
        written = values(read_topic(stack_env, topics.name(role), timeout_s=10))
        assert broken not in {v["rating_id"] for v in written}


def test_a_rating_whose_producer_set_its_kafka_timestamp_ahead_is_a_dead_letter_not_a_hold(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    """A producer's CreateTime 55 minutes ahead, and its rating_time with it: bounded by the
    job's clock, it is dead-lettered. Let through, it would hold its customer's later ratings
    (and their alerts) for 55 minutes."""
    customer = insert_customer(db, "platinum")
    t0 = next_second(db)
    ahead_ms = int(time.time() * 1000) + 55 * 60_000
    early, after = next(IDS), next(IDS)
    produce(stack_env, topics.name("ratings"), [rating(early, customer, 1, ahead_ms)], timestamp_ms=ahead_ms)
    produce(stack_env, topics.name("ratings"), [rating(after, customer, 1, t0)])
    by_rating(stack_env, topics.name("alerts"), {after})
    dlq = read_topic(stack_env, topics.name("dlq"), timeout_s=30)
    dead = [r for r in dlq if _rating_id(r.value()) == early]
    assert [dict(r.headers())["dlq.reason"].decode() for r in dead] == [FUTURE]


def _rating_id(value: bytes | None) -> object:
    """A dead letter's rating_id, when its value is a JSON object that has one."""
    try:
        return json.loads(value or b"").get("rating_id")
    except (ValueError, AttributeError):
        return None


def test_a_rating_of_an_aborted_producer_transaction_is_never_enriched_alerted_or_dead_lettered(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    customer = insert_customer(db, "platinum")
    t0 = next_second(db)
    aborted, committed = next(IDS), next(IDS)
    servers = stack_env["KAFKA_BOOTSTRAP_SERVERS"]
    producer = Producer({"bootstrap.servers": servers, "transactional.id": f"test-{uuid.uuid4()}"})
    producer.init_transactions(30)
    outcomes = ((aborted, producer.abort_transaction), (committed, producer.commit_transaction))
    for rating_id, finish in outcomes:
        producer.begin_transaction()
        key, value = rating(rating_id, customer, 1, t0)  # unhappy platinum: it would alert
        producer.produce(topics.name("ratings"), value, key)
        producer.flush(30)
        finish(30)
    by_rating(stack_env, topics.name("alerts"), {committed})
    enriched = {v["rating_id"] for v in values(read_topic(stack_env, topics.name("enriched"), timeout_s=10))}
    assert committed in enriched and aborted not in enriched
    alerts = {v["rating_id"] for v in values(read_topic(stack_env, topics.name("alerts"), timeout_s=10))}
    assert aborted not in alerts
    dead = read_topic(stack_env, topics.name("dlq"), timeout_s=10)
    assert not [r for r in dead if str(aborted).encode() in (r.value() or b"")]


def test_c_a_fresh_job_waits_for_the_table_so_no_rating_is_unmatched_for_being_early(
    stack_env: StackEnv, db: Any, tmp_path: Path
) -> None:
    out, _ = _fresh_job_on_waiting_ratings(
        stack_env, db, tmp_path / "fresh", club_status="gold", customers=5, stars=2
    )
    assert all(v["customer_matched"] and v["club_status"] == "gold" for v in out.values())


def _fresh_job_on_waiting_ratings(
    stack_env: StackEnv,
    db: Any,
    state_dir: Path,
    *,
    club_status: str,
    customers: int,
    stars: int,
    env: dict[str, str] | None = None,
) -> tuple[dict[int, Any], Job]:
    """New customers, then a rating of each waiting in a topic of its own, then a job on a
    fresh checkpoint (`env` added to its environment): the enriched records, and the job."""
    own = Topics()
    customer_ids = [insert_customer(db, club_status) for _ in range(customers)]
    t0 = next_second(db)
    ids = [next(IDS) for _ in customer_ids]
    names = create_topics(stack_env, own)
    waiting = [rating(rid, c, stars, t0) for rid, c in zip(ids, customer_ids, strict=True)]
    produce(stack_env, own.name("ratings"), waiting)
    job = Job(stack_env, own, state_dir, GRACE_MS)
    job.env.update(env or {})
    job.start()
    try:
        return by_rating(stack_env, own.name("enriched"), set(ids)), job
    finally:
        job.stop()
        delete_topics(stack_env, names)


def _cdc_events(stack_env: StackEnv) -> int:
    """Records in the CDC topic now (its snapshot, the changes and heartbeats since)."""
    topic = JobSettings().cdc_topic
    consumer = Consumer({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"], "group.id": "test-count"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in partitions]
    finally:
        consumer.close()
    return sum(high - low for low, high in marks)


def test_c_a_fresh_job_reads_a_long_cdc_topic_to_its_end_before_deciding_any_rating(
    stack_env: StackEnv, db: Any, tmp_path: Path
) -> None:
    # A limit per read that takes at least four reads through the CDC topic.
    events = _cdc_events(stack_env)
    limit = max(20, events // 4)
    out, job = _fresh_job_on_waiting_ratings(
        stack_env,
        db,
        tmp_path / "long-cdc",
        club_status="silver",
        customers=3,
        stars=4,
        env={"ENRICH_MAX_OFFSETS_PER_TRIGGER": str(limit)},
    )
    assert all(v["customer_matched"] and v["club_status"] == "silver" for v in out.values())
    log = job.log.read_text(errors="replace")
    # The topic was read to its end, a limited read after the other: ahead, while the Spark
    # session started, or else by the first batch before it decided any rating.
    ahead = re.search(r"CDC topic read while Spark started: (\d+) events", log)
    if ahead is not None:
        assert int(ahead.group(1)) >= events, job.tail()
    else:
        assert "catching up with the CDC topic" in log, job.tail()
    batches = [
        (int(m["new"]), int(m["waiting"]))
        for m in re.finditer(r"batch \d+: (?P<new>\d+) new, .*?, (?P<waiting>\d+) waiting", log)
    ]
    first = next((b for b in batches if b[0] > 0), None)
    assert first is not None, job.tail()
    assert first[1] == 0, f"the first batch with ratings left {first[1]} waiting for the CDC watermark"


def test_a_fresh_job_takes_a_smaller_share_of_a_backlog_in_its_first_batch(
    stack_env: StackEnv, db: Any, tmp_path: Path
) -> None:
    # The first batch loads the table: its share of the backlog is small, so that the first
    # output comes sooner; the batches after it take full shares.
    limit = 40
    out, job = _fresh_job_on_waiting_ratings(
        stack_env,
        db,
        tmp_path / "backlog",
        club_status="gold",
        customers=80,
        stars=4,
        env={"ENRICH_MAX_OFFSETS_PER_TRIGGER": str(limit)},
    )
    assert len(out) == 80 and all(v["customer_matched"] for v in out.values())
    log = job.log.read_text(errors="replace")
    taken = [int(n) for n in re.findall(r"batch \d+: (\d+) new, ", log)]
    taken = [n for n in taken if n > 0]
    assert sum(taken) == 80, job.tail()
    assert taken[0] <= limit * FIRST_BATCH_SHARE, taken
    assert limit * FIRST_BATCH_SHARE < max(taken[1:]) <= limit, taken


def _last_marker_batch(stack_env: StackEnv, job_name: str) -> int:
    """The batch id of the job name's last marker in the commits topic."""
    markers = [
        json.loads(r.value())
        for r in read_topic(stack_env, JobSettings().commits_topic)
        if r.key() == job_name.encode() and r.value() is not None
    ]
    assert markers, f"no marker of {job_name}"
    return int(markers[-1]["batch_id"])


def test_a_batch_kafka_has_is_skipped_and_what_the_restart_took_ahead_is_written_once(
    stack_env: StackEnv, db: Any, tmp_path: Path
) -> None:
    # A crash between a batch's Kafka commit and its checkpoint commit: Spark runs the batch
    # again after the restart, and the job finds it in Kafka. The restart began its first
    # batch's work ahead, while Spark planned; the batch it skips must leave that work to the
    # next one, which writes the ratings produced while the job was down, each once.
    own = Topics()
    names = create_topics(stack_env, own)
    try:
        customer = insert_customer(db, "gold")
        t0 = next_second(db)
        before, after = [next(IDS) for _ in range(5)], [next(IDS) for _ in range(5)]
        produce(stack_env, own.name("ratings"), [rating(r, customer, 4, t0) for r in before])
        state = tmp_path / "state"
        job = Job(stack_env, own, state, GRACE_MS).start()
        by_rating(stack_env, own.name("enriched"), set(before))
        assert job.stop() == 0, job.tail()
        marked = _last_marker_batch(stack_env, own.env()["ENRICH_JOB_NAME"])
        checkpoint = state / "checkpoints" / "pipeline"
        # The checkpoint as the crash left it: batch `marked` planned, its commit not written.
        for log_name, last_kept in (("commits", marked - 1), ("offsets", marked)):
            for path in (checkpoint / log_name).iterdir():
                batch = re.fullmatch(r"\.?(\d+)(\.crc)?", path.name)
                if batch is not None and int(batch.group(1)) > last_kept:
                    path.unlink()
        produce(stack_env, own.name("ratings"), [rating(r, customer, 4, t0 + 1000) for r in after])
        job.start()
        out = by_rating(stack_env, own.name("enriched"), set(before + after))
        job.stop()
        assert all(v["customer_matched"] for v in out.values())
        log = job.log.read_text(errors="replace")
        assert f"batch {marked} is already in Kafka; not writing it again" in log, job.tail()
        assert re.search(rf"batch {marked + 1}: .* ahead=", log), job.tail()  # the work taken ahead
        enriched = Counter(v["rating_id"] for v in values(read_topic(stack_env, own.name("enriched"))))
        assert {r: enriched[r] for r in before + after} == dict.fromkeys(before + after, 1)
    finally:
        delete_topics(stack_env, names)


def test_the_job_s_real_output_reads_in_every_consumer(
    stack_env: StackEnv, topics: Topics, job: Job, db: Any
) -> None:
    """The contract: what the job wrote to the enriched and alert topics in this module's tests
    (matched, unmatched, deleted and re-inserted customers, dead letters around them; at least
    a matched alert and an unmatched rating of its own) reads in the services' model, the
    lake's parse and schema, the Elasticsearch documents and the Slack alerts, with nothing
    rejected."""
    customer = insert_customer(db, "platinum")
    t0 = next_second(db)
    matched, unmatched = next(IDS), next(IDS)
    produce(
        stack_env,
        topics.name("ratings"),
        [
            rating(matched, customer, 1, t0, message="<!channel> *bold*"),
            rating(unmatched, 2_000_000_007, 4, t0),
        ],
    )
    by_rating(stack_env, topics.name("alerts"), {matched})
    by_rating(stack_env, topics.name("enriched"), {matched, unmatched})
    enriched = read_topic(stack_env, topics.name("enriched"), min_records=2, timeout_s=30)
    alerts = read_topic(stack_env, topics.name("alerts"), min_records=1, timeout_s=30)
    records = [decode_enriched(m) for m in enriched]
    assert {r.customer_matched for r in records} == {True, False}
    parsed = parse_values([decode_value(m) for m in enriched])
    assert parsed.rejected == [] and len(parsed.kept) == len(enriched)
    lake = to_lake_table(
        parsed.table,
        [m.topic() for m in enriched],
        [m.partition() for m in enriched],
        [m.offset() for m in enriched],
    )
    assert lake.num_rows == len(enriched)
    mapped = set(json.loads(TEMPLATE.read_text())["template"]["mappings"]["properties"])
    for record in records:
        assert set(document(record)) <= mapped
    for message in alerts:
        alert = decode_alert(message)
        assert alert.club_status == "platinum" and alert.stars < 3
