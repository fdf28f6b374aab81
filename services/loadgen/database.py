"""The customer database side of the load: seeding the table and applying changes (as the
application's least-privilege user, so Debezium sees ordinary transactions)."""

import logging
import random
from typing import Any

from foundation import customer_db
from foundation.errors import RatingsError
from services.loadgen.config import LoadgenSettings
from services.loadgen.customers import Change, fake_customer, step_status

__all__ = ["COLUMNS", "INSERT", "CustomerDb", "DatabaseUnavailable"]

log = logging.getLogger(__name__)
COLUMNS = ("first_name", "last_name", "email", "gender", "club_status", "region", "comments")
INSERT = f"INSERT INTO customers ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"  # noqa: S608


class DatabaseUnavailable(RatingsError):
    """The customer database cannot be reached (restarted, down, the connection dropped)."""


class CustomerDb:
    def __init__(self, settings: LoadgenSettings) -> None:
        self.settings = settings
        self.conn: Any = self._connect()

    def _connect(self) -> Any:
        s = self.settings
        return customer_db.connect(
            s.db_kind, s.db_host, s.database_port, s.db_user, s.db_password.get_secret_value(), s.db_name
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
        except customer_db.CONNECTION_ERRORS as err:
            if self.conn is not None:
                try:
                    self.conn.close()
                except customer_db.CLIENT_ERRORS:
                    pass  # already gone
            self.conn = None
            where = f"{self.settings.db_kind} at {self.settings.db_host}:{self.settings.database_port}"
            raise DatabaseUnavailable(f"customer database ({where}): {err}") from err

    def _apply(self, change: Change) -> int | None:
        with self.conn.cursor() as cur:
            if change.kind == "insert" and change.new_customer is not None:
                return customer_db.insert(
                    cur, "customers", dict(zip(COLUMNS, change.new_customer.row(), strict=True))
                )
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
