"""What only PostgreSQL does, against the stack on PostgreSQL: TOASTed values Debezium cannot
send, the table's REPLICA IDENTITY changed under the connector, and a replication slot that is
already there when the stack starts again. (The join's own cases run here too: `make
test-postgres` runs them from tests/integration/enrichment_job.)"""

import json
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.enrichment import (
    Job,
    Topics,
    by_rating,
    create_topics,
    db_now_ms,
    delete_topics,
    execute,
    insert_customer,
    produce,
    rating,
    read_topic,
)
from support.stack import stack_command

from enrichment_job.driver.cdc import UNAVAILABLE
from infra.stack.bootstrap import postgres_sql
from infra.stack.clients import app_db
from infra.stack.settings import StackSettings

StackEnv = dict[str, str]
CDC_TOPIC = "asgard.demo.customers"
SLOT = "ratings_customers"


def _changes_of(stack_env: StackEnv, customer: int, count: int) -> list[dict[str, Any]]:
    """The CDC topic's change events of `customer` (customers table), once `count` are there."""
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(found) < count:
        found = []
        for record in read_topic(stack_env, CDC_TOPIC, timeout_s=20, idle_s=2):
            value = json.loads(record.value()) if record.value() else None
            if value and value["source"]["table"] == "customers":
                row = value["after"] or value["before"]
                if row["id"] == customer:
                    found.append(value)
    assert len(found) >= count, f"{len(found)} change events of customer {customer}, expected {count}"
    return found


def _replica_identity(identity: str) -> None:
    postgres_sql(StackSettings(), f"ALTER TABLE customers REPLICA IDENTITY {identity}")


@pytest.fixture
def job(stack_env: StackEnv, tmp_path: Path) -> Iterator[tuple[Job, Topics]]:
    topics = Topics()
    names = create_topics(stack_env, topics)
    job = Job(stack_env, topics, tmp_path / "job", 2000).start()
    yield job, topics
    job.stop()
    delete_topics(stack_env, names)


def test_a_toasted_value_an_update_leaves_alone_stays_the_customers_under_any_replica_identity(
    stack_env: StackEnv, db: Any, job: tuple[Job, Topics]
) -> None:
    _, topics = job
    # Random text does not compress: PostgreSQL keeps it out of line (TOAST), and an update that
    # leaves it alone does not send it, unless the table's REPLICA IDENTITY is FULL.
    comments = secrets.token_urlsafe(12_000)
    customer = insert_customer(db, "silver")
    execute(db, "UPDATE customers SET comments = %s WHERE id = %s", comments, customer)
    try:
        execute(db, "UPDATE customers SET club_status = 'gold' WHERE id = %s", customer)
        _replica_identity("FULL")
        execute(db, "UPDATE customers SET club_status = 'platinum' WHERE id = %s", customer)
        _replica_identity("DEFAULT")
        execute(db, "UPDATE customers SET club_status = 'bronze' WHERE id = %s", customer)
    finally:
        _replica_identity("DEFAULT")
    events = _changes_of(stack_env, customer, 5)
    sent = [(e["after"]["club_status"], e["after"]["comments"]) for e in events[1:]]
    # What Debezium sends: the placeholder while the identity is DEFAULT, the value while FULL.
    assert sent == [
        ("silver", comments),
        ("gold", UNAVAILABLE),
        ("platinum", comments),
        ("bronze", UNAVAILABLE),
    ]
    rating_id = time.time_ns() // 1000
    produce(stack_env, topics.name("ratings"), [rating(rating_id, customer, 1, db_now_ms(db) + 1500)])
    enriched = by_rating(stack_env, topics.name("enriched"), {rating_id})[rating_id]
    assert (enriched["club_status"], enriched["customer_matched"]) == ("bronze", True)
    assert enriched["customer_version"] == f"lsn:{events[-1]['source']['lsn']}"
    published = [
        json.loads(r.value())
        for r in read_topic(stack_env, topics.name("customers"), timeout_s=30)
        if r.key() == str(customer).encode() and r.value() is not None
    ]
    history = [
        ("silver", "integration test"),
        ("silver", comments),
        ("gold", comments),
        ("platinum", comments),
        ("bronze", comments),
    ]
    # A transaction writes the latest row of each customer it changed: the topic holds the last
    # version of each batch that changed this customer, in order, ending with the last one,
    # and none of them with the placeholder.
    shown = [(p["club_status"], p["comments"]) for p in published]
    versions = iter(history)
    assert shown and shown[-1] == history[-1], shown
    assert all(version in versions for version in shown), shown


@pytest.mark.restarts_stack
def test_the_stack_starts_again_on_its_replication_slot_and_changes_go_on(
    stack_env: StackEnv, db: Any
) -> None:
    def slots() -> str:
        return postgres_sql(
            StackSettings(), "SELECT slot_name, plugin, active FROM pg_replication_slots"
        ).strip()

    assert slots() == f"{SLOT}|pgoutput|t"
    customer = insert_customer(db, "silver")
    db.close()
    assert "stack stopped" in stack_command("down")
    assert "stack is up" in stack_command("up")
    email = f"{uuid.uuid4().hex[:8]}@example.com"
    with app_db(stack_env) as again, again.cursor() as cur:
        cur.execute("UPDATE customers SET email = %s WHERE id = %s", (email, customer))
    events = _changes_of(stack_env, customer, 2)
    assert [e["op"] for e in events] == ["c", "u"]
    assert events[-1]["after"]["email"] == email
    assert slots() == f"{SLOT}|pgoutput|t"
