"""The customer database side of the load: seeding the table and applying changes (as the
application's least-privilege user, so Debezium sees ordinary transactions)."""

import logging
import random
from typing import Any

import pymysql

from services.loadgen.config import LoadgenSettings
from services.loadgen.customers import Change, fake_customer, step_status

log = logging.getLogger(__name__)
INSERT = (
    "INSERT INTO customers (first_name, last_name, email, gender, club_status, region, comments)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s)"
)


class CustomerDb:
    def __init__(self, settings: LoadgenSettings) -> None:
        self.conn: Any = pymysql.connect(
            host=settings.db_host,
            port=settings.db_port,
            user=settings.db_user,
            password=settings.db_password.get_secret_value(),
            database=settings.db_name,
            autocommit=True,
        )

    def ids(self) -> list[int]:
        with self.conn.cursor() as cur:
            cur.execute("SELECT id FROM customers ORDER BY id")
            return [int(r[0]) for r in cur.fetchall()]

    def seed(self, count: int, rnd: random.Random, chunk: int = 2000) -> list[int]:
        """Insert customers until the table holds `count`; logs progress for big tables."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM customers")
            have = int(cur.fetchone()[0])
            missing = max(count - have, 0)
            for start in range(0, missing, chunk):
                rows = [fake_customer(rnd, have + i).row() for i in range(start, min(start + chunk, missing))]
                cur.executemany(INSERT, rows)
                log.info("customers: %d/%d inserted", start + len(rows), missing)
        return self.ids()

    def apply(self, change: Change) -> int | None:
        """Run one change; returns the id of a new customer, None otherwise."""
        with self.conn.cursor() as cur:
            if change.kind == "insert" and change.new_customer is not None:
                cur.execute(INSERT, change.new_customer.row())
                return int(cur.lastrowid)
            if change.kind == "delete":
                cur.execute("DELETE FROM customers WHERE id = %s", (change.customer_id,))
            elif change.kind == "email":
                cur.execute(
                    "UPDATE customers SET email = %s WHERE id = %s", (change.email, change.customer_id)
                )
            else:
                cur.execute("SELECT club_status FROM customers WHERE id = %s", (change.customer_id,))
                row = cur.fetchone()
                if row is not None:
                    status = step_status(str(row[0]), change.kind)
                    cur.execute(
                        "UPDATE customers SET club_status = %s WHERE id = %s", (status, change.customer_id)
                    )
        return None

    def close(self) -> None:
        self.conn.close()
