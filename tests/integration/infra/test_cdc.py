"""MariaDB changes reach Kafka through Debezium as c/u/d events, with a tombstone after a delete."""

import itertools
import json
import time
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

import pymysql
import pytest
from confluent_kafka import Consumer, TopicPartition

from infra.stack.health import http_json
from infra.stack.secrets import read_env_file
from infra.stack.settings import StackSettings

StackEnv = dict[str, str]
CDC_TOPIC = "asgard.demo.customers"


def _consumer_at_end(stack_env: StackEnv, topic: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
            "group.id": f"test-{time.time_ns()}",
            "enable.auto.commit": False,
        }
    )
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, high)])
    return consumer


def _events_for(consumer: Consumer, customer_id: int, count: int, timeout_s: float = 60) -> list[Any]:
    """(key, value) of the next `count` events of one customer; value None for a tombstone."""
    events: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(events) < count and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None or msg.error() is not None:
            continue
        key = json.loads(msg.key())
        value = json.loads(msg.value()) if msg.value() is not None else None
        # The heartbeat table's events share this topic (and key {"id": 1}); skip them.
        if key["id"] == customer_id and (value is None or value["source"]["table"] == "customers"):
            events.append((key, value))
    return events


def test_insert_update_delete_become_c_u_d_and_a_tombstone(stack_env: StackEnv, db: Any, unique: str) -> None:
    consumer = _consumer_at_end(stack_env, CDC_TOPIC)
    email = f"{unique}@example.com"
    try:
        with db.cursor() as cur:
            cur.execute(
                "INSERT INTO customers (first_name, last_name, email, gender, club_status, region, comments)"
                " VALUES ('Ada', 'Lovelace', %s, 'Female', 'silver', 'EMEA', 'test')",
                (email,),
            )
            customer_id = cur.lastrowid
            cur.execute("UPDATE customers SET club_status = 'platinum' WHERE id = %s", (customer_id,))
            cur.execute("DELETE FROM customers WHERE id = %s", (customer_id,))
        events = _events_for(consumer, customer_id, 4)
    finally:
        consumer.close()

    assert [value["op"] if value else None for _, value in events] == ["c", "u", "d", None]
    created, updated, deleted, _tombstone = (value for _, value in events)
    assert created["before"] is None
    assert created["after"]["email"] == email
    assert created["after"]["region"] == "EMEA"
    assert created["source"]["table"] == "customers"
    assert created["source"]["ts_ms"] > 0
    assert updated["before"]["club_status"] == "silver"
    assert updated["after"]["club_status"] == "platinum"
    assert deleted["before"]["club_status"] == "platinum"
    assert deleted["after"] is None


def _next_values(stack_env: StackEnv, topic: str, count: int, timeout_s: float = 30) -> list[Any]:
    consumer = _consumer_at_end(stack_env, topic)
    values: list[Any] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None and msg.value() is not None:
                values.append(json.loads(msg.value()))
    finally:
        consumer.close()
    return values


def test_debezium_sends_heartbeats_while_the_table_is_quiet(stack_env: StackEnv) -> None:
    beats = _next_values(stack_env, "__debezium-heartbeat.asgard", 2)
    assert len(beats) == 2, "fewer than 2 heartbeats within 30 s"
    assert beats[1]["ts_ms"] > beats[0]["ts_ms"] > 0


def test_the_cdc_topic_carries_a_millisecond_database_clock_ten_times_a_second(stack_env: StackEnv) -> None:
    """The heartbeat table's changes, in binlog order with the customers': the CDC watermark.

    The binlog stamps events in whole seconds, so the clock is the row's own ts (NOW(3)).
    """
    values = _next_values(stack_env, CDC_TOPIC, 30)
    ticks = [v for v in values if v["source"]["table"] == "debezium_heartbeat"]
    assert len(ticks) >= 20, f"{len(ticks)} heartbeat ticks among {len(values)} events"
    clock = [datetime.fromisoformat(t["after"]["ts"].replace("Z", "+00:00")) for t in ticks]
    assert clock == sorted(clock) and len(set(clock)) == len(clock), "the clock must rise with every tick"
    assert any(c.microsecond for c in clock), "readings carry milliseconds"
    steps_ms = [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(clock)]
    assert sorted(steps_ms)[len(steps_ms) // 2] < 250, f"median tick spacing {steps_ms} ms"
    seconds = [t["source"]["ts_ms"] for t in ticks]
    assert seconds == sorted(seconds) and seconds[-1] > seconds[0], "binlog time advances too"


def _hostname_errors(stack_env: StackEnv, hostname: str) -> list[str]:
    """What Connect's validation says of a MariaDB connector config naming `hostname`."""
    config = {
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "database.hostname": hostname,
        "topic.prefix": "validate-only",
    }
    configs = http_json(
        "PUT",
        f"{stack_env['CONNECT_URL']}/connector-plugins/MariaDbConnector/config/validate",
        config,
        timeout=30,
        auth=(stack_env["CONNECT_USER"], stack_env["CONNECT_PASSWORD"]),
    )["configs"]
    (field,) = [c["value"] for c in configs if c["value"]["name"] == "database.hostname"]
    return list(field["errors"])


def test_connect_resolves_only_the_allowlisted_environment_variables(stack_env: StackEnv) -> None:
    assert _hostname_errors(stack_env, "${env:MARIADB_HOST}") == []  # resolved: 127.0.0.1
    # Not on the list: left as written (and so an invalid host name), never the worker's HOME.
    (error,) = _hostname_errors(stack_env, "${env:HOME}")
    assert "${env:HOME} has invalid format" in error


def test_the_debezium_user_reads_only_the_captured_tables(stack_env: StackEnv) -> None:
    settings = StackSettings()
    secrets = read_env_file(settings.state_dir / "secrets.env")
    conn = pymysql.connect(
        host=stack_env["MARIADB_HOST"],
        port=int(stack_env["MARIADB_PORT"]),
        user="debezium",
        password=secrets["DEBEZIUM_DB_PASSWORD"],
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GRANTS")
            grants = sorted(row[0] for row in cur.fetchall())
            cur.execute("SELECT COUNT(*) FROM demo.customers")  # the snapshot's read
            with pytest.raises(pymysql.err.OperationalError, match="denied"):
                cur.execute("SELECT COUNT(*) FROM mysql.user")
    finally:
        conn.close()
    assert [g.split(" TO ")[0] for g in grants] == [
        "GRANT RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR ON *.*",
        "GRANT SELECT ON `demo`.`customers`",
        "GRANT SELECT ON `demo`.`debezium_heartbeat`",
    ]


@pytest.mark.parametrize("password", [None, "wrong"])
def test_connect_s_rest_api_refuses_a_client_without_its_credentials(
    stack_env: StackEnv, password: str | None
) -> None:
    """Anyone on the host could otherwise delete the connector, or register one that resolves
    the database password from the worker's environment and sends it elsewhere."""
    auth = None if password is None else (stack_env["CONNECT_USER"], password)
    for method, path in (("GET", "/connectors"), ("DELETE", "/connectors/a-connector")):
        with pytest.raises(urllib.error.HTTPError) as refused:
            http_json(method, f"{stack_env['CONNECT_URL']}{path}", auth=auth)
        refused.value.close()  # its response, read or not
        assert refused.value.code == 401
    signed_in = (stack_env["CONNECT_USER"], stack_env["CONNECT_PASSWORD"])
    assert StackSettings().connector_name in http_json(
        "GET", f"{stack_env['CONNECT_URL']}/connectors", auth=signed_in
    )
