"""The load generator's customer changes against the real MariaDB: a dropped connection (what a
restart of the database looks like to a client) pauses changes, and the next one reconnects."""

import random
from typing import Any

import pytest

from services.loadgen.config import LoadgenSettings
from services.loadgen.customers import Change, Customer, fake_customer
from services.loadgen.database import CustomerDb, DatabaseUnavailable

StackEnv = dict[str, str]


def _settings(stack_env: StackEnv) -> LoadgenSettings:
    return LoadgenSettings(
        db_host=stack_env["MARIADB_HOST"],
        db_port=int(stack_env["MARIADB_PORT"]),
        db_name=stack_env["MARIADB_DATABASE"],
        db_user=stack_env["APP_DB_USER"],
        db_password=stack_env["APP_DB_PASSWORD"],
    )


def _email(db: Any, customer_id: int) -> str:
    with db.cursor() as cur:
        cur.execute("SELECT email FROM customers WHERE id = %s", (customer_id,))
        return str(cur.fetchone()[0])


def test_a_dropped_connection_fails_one_change_and_the_next_one_reconnects(
    stack_env: StackEnv, db: Any
) -> None:
    customers = CustomerDb(_settings(stack_env))
    customer = customers.apply(Change("insert", None, new_customer=_new_customer()))
    assert customer is not None
    with db.cursor() as cur:  # the server drops the generator's connection, as a restart does
        cur.execute(f"KILL {int(customers.conn.thread_id())}")
    with pytest.raises(DatabaseUnavailable, match="customer database at"):
        customers.apply(Change("email", customer, email="lost@example.com"))
    customers.apply(Change("email", customer, email="after.reconnect@example.com"))
    assert _email(db, customer) == "after.reconnect@example.com"
    customers.close()


def _new_customer() -> Customer:
    return fake_customer(random.Random(), 0)
