"""The secured stack (SASL/SCRAM, ACLs): a client without a valid password is refused, each
program's principal reaches its own topics and no others, and the whole pipeline runs through
it: the load generator, Debezium in Connect, the enrichment job, the views job and query service,
the Slack notifier, the Elasticsearch and S3 sinks, each signed in as itself. Elasticsearch signs
every request in, and the sink's user may only create documents and indices of its own."""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from elasticsearch import AuthenticationException, AuthorizationException, ConflictError, Elasticsearch
from support.enrichment import Job, Topics, db_now_ms, insert_customer, rating
from support.lake import Lake
from support.secured import client, kafka_extra, spark_kafka_extra
from support.services import ServiceProcess
from support.views_api import free_port

from infra.slack.fake import CHANNEL, TOKEN, fake_slack
from infra.stack import kafka_security
from services.slack_notifier.message import covered_ids

StackEnv = dict[str, str]


class DefaultTopics(Topics):
    """The job's default topic names and job name: the ones its principal's ACLs name."""

    def env(self) -> dict[str, str]:
        return {}


def _connection_errors(config: dict[str, Any], timeout_s: float = 10) -> list[KafkaError]:
    """The errors a client reports while it tries to connect (its error callback)."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append, "log_level": 0})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not errors:
        producer.poll(0.2)
    return errors


def test_a_client_without_a_valid_password_is_refused(stack_env: StackEnv) -> None:
    for wrong in ({"sasl.password": "not-the-password"}, {"sasl.username": "nobody"}):
        errors = _connection_errors(client(stack_env, "loadgen") | wrong)
        assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
        assert "invalid credentials" in errors[0].str()
    # Plaintext to the SASL listener: the broker drops the connection before any request.
    errors = _connection_errors({"bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"]})
    assert errors and errors[0].code() == KafkaError._ALL_BROKERS_DOWN, errors
    # The right password gets through.
    producer = Producer(client(stack_env, "loadgen"))
    assert producer.list_topics(timeout=10).brokers


def test_the_cluster_holds_exactly_the_acls_of_the_principals_table(stack_env: StackEnv) -> None:
    admin = AdminClient(client(stack_env, "admin"))
    for user, grants in kafka_security.PRINCIPALS.items():
        assert set(kafka_security.granted(admin, user)) == set(kafka_security.bindings(user, grants)), user


def _delivery(config: dict[str, Any], topic: str) -> KafkaError | None:
    outcome: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 10000})
    producer.produce(topic, key=b"0", value=b"{}", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert outcome, f"no delivery report for {topic}"
    return outcome[0]


def _read_error(config: dict[str, Any], topic: str, group: str) -> KafkaError | None:
    """The error a consumer of `topic` in `group` gets within 10 s; None when it may read."""
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            error: KafkaError | None = None if msg is None else msg.error()
            if error is not None:
                return error
        return None
    finally:
        consumer.close()


def test_each_principal_reaches_its_own_topics_and_no_others(stack_env: StackEnv) -> None:
    heartbeat = "__debezium-heartbeat.asgard"  # a topic the load generator may not touch
    denied = _delivery(client(stack_env, "loadgen"), heartbeat)
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    denied = _delivery(client(stack_env, "es-sink"), "unhappy-platinum-customers")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The ES sink reads the enriched topic, not the ratings; the query service not the enriched.
    assert _read_error(client(stack_env, "es-sink"), "ratings-with-customer-data", "es-sink") is None
    refused = _read_error(client(stack_env, "es-sink"), "ratings", "es-sink")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    refused = _read_error(client(stack_env, "views-api"), "ratings-with-customer-data", "views-api")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The job's memory, its markers, can be written by the job alone: a forged marker could
    # make it take batches as written (a reader of the markers may not write one).
    for principal, commits in (("views-api", "views-commits"), ("loadgen", "enrichment-commits")):
        forged = _delivery(client(stack_env, principal), commits)
        assert forged is not None and forged.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, principal
    # A group another program owns is refused too.
    refused = _read_error(client(stack_env, "es-sink"), "ratings-with-customer-data", "s3-sink")
    assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def _ratings_written(stack_env: StackEnv) -> int:
    consumer = Consumer({**client(stack_env, "admin"), "group.id": f"probe-{uuid.uuid4().hex}"})
    try:
        parts = consumer.list_topics("ratings", timeout=10).topics["ratings"].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition("ratings", p), timeout=10)[1] for p in parts)
    finally:
        consumer.close()


def test_the_load_generator_writes_ratings_as_its_principal(stack_env: StackEnv) -> None:
    before = _ratings_written(stack_env)
    env = {
        **os.environ,
        "LOADGEN_BOOTSTRAP_SERVERS": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
        "LOADGEN_KAFKA_EXTRA": kafka_extra(stack_env, "loadgen"),
        "LOADGEN_DB_PORT": stack_env["MARIADB_PORT"],
        "LOADGEN_DB_PASSWORD": stack_env["APP_DB_PASSWORD"],
    }
    run = subprocess.run(
        [sys.executable, "-m", "services.loadgen", "--rate", "50", "--duration", "3", "--customers", "100"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert _ratings_written(stack_env) - before >= 100


def _until(condition: Callable[[], Any], what: str, services: list[Any], timeout_s: float = 120) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := condition():
            return found
        for service in services:
            assert service.proc is not None
            if service.proc.poll() is not None:
                pytest.fail(f"{getattr(service, 'module', 'the job')} exited:\n{service.tail()}")
        time.sleep(1)
    logs = "\n\n".join(service.tail(15) for service in services)
    pytest.fail(f"no {what} within {timeout_s} s:\n{logs}")


def _elasticsearch(stack_env: StackEnv, sink: bool = False) -> Elasticsearch:
    """A client signed in as the stack's administrator, or as the sink's user."""
    names = (
        ("ES_SINK_USERNAME", "ES_SINK_PASSWORD") if sink else ("ELASTICSEARCH_USER", "ELASTICSEARCH_PASSWORD")
    )
    auth = (stack_env[names[0]], stack_env[names[1]])
    return Elasticsearch(stack_env["ELASTICSEARCH_URL"], basic_auth=auth, request_timeout=30)


def test_elasticsearch_signs_everyone_in_and_lets_the_sink_only_create_documents_of_its_own(
    stack_env: StackEnv,
) -> None:
    url = stack_env["ELASTICSEARCH_URL"]
    for auth in (None, (stack_env["ES_SINK_USERNAME"], "not-the-password"), ("nobody", "x")):
        with pytest.raises(AuthenticationException):
            Elasticsearch(url, basic_auth=auth).search(index="ratings", size=1)
    admin = _elasticsearch(stack_env)
    sink = _elasticsearch(stack_env, sink=True)
    assert sink.security.authenticate()["roles"] == ["ratings_es_sink"]
    index = f"ratings-secured-{uuid.uuid4().hex[:8]}"
    private = f"private-{uuid.uuid4().hex[:8]}"  # an index of someone else's
    admin.create(index=private, id="1", document={"secret": "s"}, refresh=True)
    try:
        assert sink.create(index=index, id="1", document={"rating_id": 1})["result"] == "created"
        assert sink.mget(index=index, ids=["1"])["docs"][0]["_source"] == {"rating_id": 1}
        with pytest.raises(ConflictError):  # the same id again: a 409, as the sink expects
            sink.create(index=index, id="1", document={"rating_id": 2})
        refused = {
            "overwrite a document": lambda: sink.index(index=index, id="1", document={"rating_id": 3}),
            "delete a document": lambda: sink.delete(index=index, id="1"),
            "delete an index": lambda: sink.indices.delete(index=index),
            "write another index": lambda: sink.create(index=f"other-{index}", id="1", document={}),
            "read another index": lambda: sink.search(index=private, size=1),
            "get another index's document": lambda: sink.get(index=private, id="1"),
            "change cluster settings": lambda: sink.cluster.put_settings(
                persistent={"action.auto_create_index": "false"}
            ),
        }
        for what, call in refused.items():
            with pytest.raises(AuthorizationException):
                call()
                pytest.fail(f"the sink's user could {what}")
        assert admin.get(index=index, id="1")["_source"] == {"rating_id": 1}  # unchanged
    finally:
        admin.indices.delete(index=[index, private], ignore_unavailable=True)


def test_the_pipeline_runs_through_the_secured_broker(
    stack_env: StackEnv, db: Any, s3: Any, tmp_path: Path
) -> None:
    customer = insert_customer(db, "platinum")
    message = f"secured {uuid.uuid4().hex[:8]}"
    job = Job(
        stack_env,
        DefaultTopics(),
        tmp_path / "job",
        grace_ms=1000,
        extra={
            "ENRICH_KAFKA_EXTRA": kafka_extra(stack_env, "enrichment"),
            "ENRICH_SPARK_KAFKA_EXTRA": spark_kafka_extra(stack_env, "enrichment"),
        },
    )
    views_port = free_port()
    lake = Lake(s3, stack_env["S3_BUCKET"], f"secured-{uuid.uuid4().hex[:8]}")
    with fake_slack() as slack:
        programs = {
            "enrichment_job.views": (
                "VIEWS_JOB_",
                "views",
                {
                    "VIEWS_JOB_SPARK_JARS": stack_env["SPARK_JARS"],
                    "VIEWS_JOB_SPARK_KAFKA_EXTRA": spark_kafka_extra(stack_env, "views"),
                    "VIEWS_JOB_STATE_DIR": str(tmp_path / "views-job"),
                    "VIEWS_JOB_TRIGGER_INTERVAL": "1 second",
                    "JAVA_HOME": stack_env["JAVA_HOME"],
                },
            ),
            "services.views": (
                "VIEWS_",
                "views-api",
                {
                    "VIEWS_PORT": str(views_port),
                    "VIEWS_PG_PORT": "0",
                    "VIEWS_STATE_DIR": str(tmp_path / "views-api"),
                },
            ),
            "services.slack_notifier": (
                "SLACK_",
                "slack-notifier",
                {
                    "SLACK_BOT_TOKEN": TOKEN,
                    "SLACK_CHANNEL": CHANNEL,
                    "SLACK_WEBHOOK_URL": "",
                    "SLACK_BASE_URL": slack.base_url,
                    "SLACK_STATE_DIR": str(tmp_path / "slack"),
                    "SLACK_VIEWS_URL": f"http://127.0.0.1:{views_port}",
                    "SLACK_ENV_FILE": "",
                    # The stack's earlier tests leave alerts on the topic; with the default burst
                    # this test's alert could land in a summary, which does not quote reviews.
                    "SLACK_BURST_MESSAGES": "50",
                },
            ),
            "services.es_sink": (
                "ES_SINK_",
                "es-sink",
                {  # signed in as its own user, whose role names the default index families
                    "ES_SINK_URL": stack_env["ELASTICSEARCH_URL"],
                    "ES_SINK_USERNAME": stack_env["ES_SINK_USERNAME"],
                    "ES_SINK_PASSWORD": stack_env["ES_SINK_PASSWORD"],
                    "ES_SINK_BATCH_MAX_WAIT_MS": "200",
                },
            ),
            "services.s3_sink": (
                "S3_SINK_",
                "s3-sink",
                {
                    "S3_SINK_ENDPOINT_URL": stack_env["S3_ENDPOINT_URL"],
                    "S3_SINK_ACCESS_KEY": stack_env["S3_ACCESS_KEY"],
                    "S3_SINK_SECRET_KEY": stack_env["S3_SECRET_KEY"],
                    "S3_SINK_BUCKET": lake.bucket,
                    "S3_SINK_PREFIX": lake.prefix,
                    "S3_SINK_BATCH_MAX_WAIT_MS": "1000",
                },
            ),
        }
        services = []
        for module, (prefix, user, env) in programs.items():
            workdir = tmp_path / user
            workdir.mkdir()
            signed_in = {
                f"{prefix}BOOTSTRAP_SERVERS": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
                f"{prefix}KAFKA_EXTRA": kafka_extra(stack_env, user),
            }
            services.append(ServiceProcess(module, prefix, {**signed_in, **env}, workdir).start())
        try:
            # The job catches up only when Debezium's events, heartbeats included, come through.
            job.start()
            producer = Producer(client(stack_env, "loadgen"))
            rating_id = int(time.time() * 1000)
            key, value = rating(rating_id, customer, 1, db_now_ms(db), message)
            producer.produce("ratings", key=key, value=value)
            assert producer.flush(30) == 0
            watched = [job, *services]

            def covering() -> list[dict[str, Any]]:
                return [p for p in slack.posts() if rating_id in covered_ids(p.get("metadata"))]

            posts = _until(covering, "Slack post", watched, 180)
            assert len(posts) == 1 and message in json.dumps(posts[0]), posts
            es = _elasticsearch(stack_env)

            def indexed() -> list[Any]:
                if not es.indices.exists_alias(name="ratings"):
                    return []
                es.indices.refresh(index="ratings")
                found = es.search(index="ratings", query={"term": {"rating_id": rating_id}})
                return list(found["hits"]["hits"])

            assert len(_until(indexed, "Elasticsearch document", watched)) == 1
            in_lake = _until(
                lambda: [r for r in lake.rows() if r["rating_id"] == rating_id], "lake row", watched
            )
            assert in_lake[0]["user_id"] == customer and in_lake[0]["club_status"] == "platinum"

            def row() -> dict[str, Any] | None:
                url = f"http://127.0.0.1:{views_port}/views/customer_ratings/{customer}"
                try:
                    with urllib.request.urlopen(url, timeout=5) as answer:
                        return dict(json.loads(answer.read()))
                except (urllib.error.URLError, OSError):
                    return None

            counted = _until(row, "customer_ratings row", watched, 180)
            assert counted["ratings"] == 1 and counted["unhappy_ratings"] == 1
        finally:
            for service in services:
                service.stop()
            job.stop()
            lake.empty()
