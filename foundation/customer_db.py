"""The customer database as the application reaches it: MariaDB or PostgreSQL, the little that
differs between them (the client library, how an insert reports its id, the clock), behind one
DB-API connection with `%s` parameters and autocommit."""

from typing import Any, Literal

import psycopg
import pymysql

Kind = Literal["mariadb", "postgres"]
KINDS: tuple[Kind, ...] = ("mariadb", "postgres")

# What a dropped or refused connection raises, per client library.
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    pymysql.err.OperationalError,
    pymysql.err.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
CLIENT_ERRORS: tuple[type[Exception], ...] = (pymysql.err.Error, psycopg.Error)

# The database's clock now, in epoch milliseconds (the time its changes are stamped with).
_NOW_MS = {
    "mariadb": "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
    "postgres": "SELECT CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)",
}


def connect(  # noqa: PLR0917 - a DB-API connect's usual arguments
    kind: Kind, host: str, port: int, user: str, password: str, database: str, timeout_s: float = 5
) -> Any:
    """An autocommit connection: each statement is a transaction of its own, as the web site
    writes them."""
    common: dict[str, Any] = {
        "host": host,
        "port": port,
        "user": user,
        "password": password,
        "autocommit": True,
    }
    if kind == "postgres":  # psycopg names the database dbname and takes whole seconds
        return psycopg.connect(**common, dbname=database, connect_timeout=max(1, round(timeout_s)))
    return pymysql.connect(**common, database=database, connect_timeout=timeout_s)


def kind_of(conn: Any) -> Kind:
    return "postgres" if isinstance(conn, psycopg.Connection) else "mariadb"


def insert(cur: Any, table: str, row: dict[str, Any]) -> int:
    """INSERT one row (columns given as a dict, a None `id` left to the database); its id."""
    columns = [name for name, value in row.items() if not (name == "id" and value is None)]
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)})"  # noqa: S608 - names from the caller's code
        f" VALUES ({', '.join(['%s'] * len(columns))})"
    )
    values = tuple(row[name] for name in columns)
    if kind_of(cur.connection) == "postgres":
        cur.execute(sql + " RETURNING id", values)
        return int(cur.fetchone()[0])
    cur.execute(sql, values)
    return int(row.get("id") or cur.lastrowid)


def now_ms(conn: Any) -> int:
    """The database's clock, epoch milliseconds."""
    with conn.cursor() as cur:
        cur.execute(_NOW_MS[kind_of(conn)])
        return int(cur.fetchone()[0])
