"""The customer database side of the load: seeding the table and applying changes (as the
application's least-privilege user, so Debezium sees ordinary transactions)."""

import logging
import random
from typing import Any

import pymysql

from services.core.errors import ServiceError
from services.loadgen.config import LoadgenSettings
from services.loadgen.customers import Change, fake_customer, step_status

log = logging.getLogger(__name__)
INSERT = (
    "INSERT INTO customers (first_name, last_name, email, gender, club_status, region, comments)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s)"
)


class DatabaseUnavailable(ServiceError):
    """The customer database cannot be reached (restarted, down, the connection dropped)."""


class CustomerDb:
    def __init__(self, settings: LoadgenSettings) -> None:
        self.settings = settings
        self.conn: Any = self._connect()

    def _connect(self) -> Any:
        s = self.settings
        return pymysql.connect(
            host=s.db_host,
            port=s.db_port,
            user=s.db_user,
            password=s.db_password.get_secret_value(),
            database=s.db_name,
            autocommit=True,
            connect_timeout=5,
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
        """Run one change; returns the id of a new customer, None otherwise. When the database
        cannot be reached, DatabaseUnavailable: the change is not retried (it may have been
        applied before the connection dropped), and the next call connects again."""
        try:
            if self.conn is None:
                self.conn = self._connect()
            return self._apply(change)
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as err:
            if self.conn is not None:
                try:
                    self.conn.close()
                except pymysql.err.Error:
                    pass  # already gone
            self.conn = None
            where = f"{self.settings.db_host}:{self.settings.db_port}"
            raise DatabaseUnavailable(f"customer database at {where}: {err}") from err

    def _apply(self, change: Change) -> int | None:
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
        if self.conn is not None:
            self.conn.close()
