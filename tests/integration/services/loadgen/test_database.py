"""The load generator's customer changes against the real database (MariaDB, or PostgreSQL on
its stack): a dropped connection (what a restart of the database looks like to a client) pauses
changes, and the next one reconnects."""

import random
from typing import Any

import pytest

from services.loadgen.config import LoadgenSettings
from services.loadgen.customers import Change, Customer, fake_customer
from services.loadgen.database import CustomerDb, DatabaseUnavailable

StackEnv = dict[str, str]


def _settings(stack_env: StackEnv) -> LoadgenSettings:
    return LoadgenSettings(
        db_kind=stack_env["CUSTOMER_DB"],
        db_host=stack_env["CUSTOMER_DB_HOST"],
        db_port=int(stack_env["CUSTOMER_DB_PORT"]),
        db_name=stack_env["CUSTOMER_DB_NAME"],
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
        if stack_env["CUSTOMER_DB"] == "postgres":
            cur.execute("SELECT pg_terminate_backend(%s)", (customers.conn.info.backend_pid,))
        else:
            cur.execute(f"KILL {int(customers.conn.thread_id())}")
    where = f"{stack_env['CUSTOMER_DB']} at {stack_env['CUSTOMER_DB_HOST']}:{stack_env['CUSTOMER_DB_PORT']}"
    with pytest.raises(DatabaseUnavailable, match=f"customer database \\({where}\\)"):
        customers.apply(Change("email", customer, email="lost@example.com"))
    customers.apply(Change("email", customer, email="after.reconnect@example.com"))
    assert _email(db, customer) == "after.reconnect@example.com"
    customers.close()


def _new_customer() -> Customer:
    return fake_customer(random.Random(), 0)
