"""The SQL each database gets from the customer database helpers (no server: a recording
cursor); tests/integration runs them against both real databases."""

from typing import Any

import pytest

from foundation import customer_db


class _Cursor:
    def __init__(self, connection: Any = None) -> None:
        self.connection = connection
        self.executed: list[tuple[str, tuple[Any, ...]]] = []
        self.lastrowid = 41

    def execute(self, sql: str, values: tuple[Any, ...] = ()) -> None:
        self.executed.append((sql, values))

    def fetchone(self) -> tuple[int]:
        return (42,)


def test_an_insert_leaves_a_missing_id_to_the_database_and_reports_the_new_one() -> None:
    cur = _Cursor()
    assert (
        customer_db.insert(cur, "customers", {"id": None, "first_name": "Ada", "club_status": "gold"}) == 41
    )
    assert cur.executed == [
        ("INSERT INTO customers (first_name, club_status) VALUES (%s, %s)", ("Ada", "gold"))
    ]
    assert customer_db.insert(cur, "customers", {"id": 7, "first_name": "Bo"}) == 7


def test_postgres_reports_the_new_id_with_returning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(customer_db, "kind_of", lambda conn: "postgres")
    cur = _Cursor()
    assert customer_db.insert(cur, "customers", {"first_name": "Ada"}) == 42
    assert cur.executed == [("INSERT INTO customers (first_name) VALUES (%s) RETURNING id", ("Ada",))]
