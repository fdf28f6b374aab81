"""The views over PostgreSQL's wire protocol, asked by the real psql (Debian's postgresql-client,
which the stack installs) and by a raw socket where psql cannot say what the server sent."""

import asyncio
import contextlib
import datetime
import functools
import json
import random
import re
import socket
import sqlite3
import struct
import subprocess
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from zoneinfo import ZoneInfo

import psycopg
import psycopg.types
import pytest
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.types.string import TextLoader

from foundation.view_marker import ViewMarker
from services.views.pgwire import PROTOCOL_V3, PgServer, PgSettings
from services.views.session import MAX_PORTALS, MAX_PREPARED_BYTES
from services.views.sql import SqlError, SqlReader
from services.views.store import Change, Store, key_of
from tests.support.psql import psql

COLUMNS = [
    {"name": "user_id", "type": "int"},
    {"name": "ratings", "type": "long"},
    {"name": "average_stars", "type": "double"},
    {"name": "club_status", "type": "string"},
    {"name": "customer_matched", "type": "boolean"},
]
MARKER = ViewMarker.decode({"view": "customer_ratings", "key": ["user_id"], "columns": COLUMNS})


def _row(user: int) -> Change:
    row = {
        "user_id": user,
        "ratings": user * 10,
        "average_stars": 2.5 if user % 2 else 4.0,
        "club_status": None if user == 3 else ("platinum" if user % 2 else "gold"),
        "customer_matched": user != 3,
    }
    return Change("customer_ratings", key_of([user]), ("user_id",), json.dumps(row))


@dataclass
class Served:
    port: int
    store: Store

    def psql(
        self, sql: str, password: str | None = None, zone: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return psql(self.port, sql, user="reader", password=password, zone=zone)

    def rows(self, sql: str) -> list[str]:
        done = self.psql(sql)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    def refused(self, sql: str) -> str:
        """The SQLSTATE psql reports for a refused query."""
        done = self.psql(sql)
        assert done.returncode != 0, done.stdout
        return done.stderr.split("ERROR:", 1)[1].split(":", 1)[0].strip()


def _serve(
    tmp_path: Path,
    token: bytes | None = None,
    max_connections: int = 5,
    follow: Callable[[str, bool], AsyncGenerator[str, None]] | None = None,
    stream_timeout_s: float = 60,
) -> Iterator[Served]:
    store = Store(tmp_path / "s.sqlite3")
    store.apply([_row(u) for u in range(1, 8)], {"customer_ratings": MARKER}, {})
    reader = SqlReader(store, max_rows=5, timeout_s=1)
    server = PgServer(reader, PgSettings("127.0.0.1", 0, max_connections, 5, token, stream_timeout_s), follow)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    try:
        yield Served(server.port, store)
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    yield from _serve(tmp_path)


def test_psql_reads_a_view_by_key_with_its_columns_typed_as_the_marker_names_them(served: Served) -> None:
    assert served.rows("SELECT * FROM customer_ratings WHERE user_id = 7") == ["7|70|2.5|platinum|t"]
    nulls = "SELECT club_status, customer_matched FROM customer_ratings WHERE user_id = 3"
    assert served.rows(nulls) == ["|f"]
    assert served.rows("SELECT count(*) FROM customer_ratings WHERE average_stars > 3") == ["3"]


def test_a_view_s_column_keeps_its_type_however_the_query_spells_it_and_with_no_row(served: Served) -> None:
    reader = SqlReader(served.store, max_rows=5, timeout_s=1)
    for sql in (
        "SELECT USER_ID, Average_Stars, club_status FROM customer_ratings WHERE ratings > 1000",
        "SELECT USER_ID, Average_Stars, club_status FROM customer_ratings WHERE user_id = 7",
    ):
        answer = reader.query(sql)
        assert [(c.name, c.pg_type) for c in answer.columns] == [
            ("user_id", "int4"),
            ("average_stars", "float8"),
            ("club_status", "text"),
        ], sql
    assert reader.column_kinds()["average_stars"] == "double"


def test_where_order_by_and_limit_work_and_an_empty_result_is_no_rows(served: Served) -> None:
    ranged = "SELECT user_id FROM customer_ratings WHERE ratings BETWEEN 20 AND 60 ORDER BY 1 DESC LIMIT 3"
    assert served.rows(ranged) == ["6", "5", "4"]
    assert served.rows("SELECT * FROM customer_ratings WHERE user_id = 42;") == []


def test_writes_and_reads_of_anything_but_the_views_are_refused_with_an_sqlstate(served: Served) -> None:
    assert served.refused("INSERT INTO customer_ratings VALUES (9, 1, 1.0, 'gold', 1)") == "25006"
    assert served.refused("DELETE FROM customer_ratings") == "25006"
    assert served.refused("CREATE TABLE t (a int)") == "25006"
    declared = served.psql("CREATE MATERIALIZED VIEW v AS SELECT user_id, count(*) FROM enriched GROUP BY 1")
    assert (
        "25006" in declared.stderr and "python -m enrichment_job.views create" in declared.stderr
    )  # where to
    assert "enrichment_job.views create|replace|drop" in served.psql("DROP VIEW customer_ratings").stderr
    assert served.refused("PRAGMA table_info(rows)") == "0A000"
    assert served.refused("ATTACH DATABASE '/tmp/x.db' AS x") == "0A000"
    assert served.refused("SELECT * FROM offsets") == "42501"  # the store's own tables
    assert served.refused("SELECT length(randomblob(1000000000))") == "42501"
    assert served.refused("SELECT 1; DELETE FROM rows") == "42601"
    assert served.rows("SELECT count(*) FROM customer_ratings") == ["7"]  # nothing changed


def test_long_or_large_queries_are_refused_not_cut_short(served: Served) -> None:
    assert served.refused("SELECT * FROM customer_ratings") == "54000"  # 7 rows, at most 5
    forever = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    assert served.refused(forever) == "57014"
    assert served.rows("SELECT user_id FROM customer_ratings LIMIT 5") == ["1", "2", "3", "4", "5"]


def test_mistakes_get_postgres_codes(served: Served) -> None:
    assert served.refused("SELEC * FROM customer_ratings") == "42601"
    assert served.refused("SELECT * FROM no_such_view") == "42P01"
    assert served.refused("SELECT stars_given FROM customer_ratings") == "42703"


def test_a_view_s_new_columns_are_served_once_its_marker_names_them(served: Served) -> None:
    marker = replace(MARKER, columns=[*COLUMNS, {"name": "last_channel", "type": "string"}])
    row = {"user_id": 1, "ratings": 11, "average_stars": 3.0, "club_status": "gold", "last_channel": "web"}
    change = Change("customer_ratings", key_of([1]), ("user_id",), json.dumps(row))
    served.store.apply([change], {"customer_ratings": marker}, {})
    assert served.rows("SELECT ratings, last_channel FROM customer_ratings WHERE user_id = 1") == ["11|web"]


def test_with_a_token_the_client_gives_it_as_its_password(tmp_path: Path) -> None:
    for served in _serve(tmp_path, token=b"s3cret"):
        denied = served.psql("SELECT 1", password="wrong")
        assert denied.returncode != 0 and "password authentication failed" in denied.stderr, denied.stderr
        assert served.psql("SELECT 1").returncode != 0  # none given
        assert served.psql("SELECT 1", password="s3cret").stdout.split() == ["1"]


def _started(port: int) -> socket.socket:
    """A raw client past the start-up exchange (ReadyForQuery read)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    params = b"user\0raw\0database\0views\0\0"
    sock.sendall(struct.pack("!II", len(params) + 8, PROTOCOL_V3) + params)
    _until(sock, b"Z")
    return sock


def _until(sock: socket.socket, kind: bytes) -> list[tuple[bytes, bytes]]:
    """Messages read up to and with the first of `kind`."""
    got: list[tuple[bytes, bytes]] = []
    buf = b""
    while not got or got[-1][0] != kind:
        while len(buf) < 5 or len(buf) < 1 + struct.unpack("!I", buf[1:5])[0]:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {got}"
            buf += chunk
        size = struct.unpack("!I", buf[1:5])[0]
        got.append((buf[:1], buf[5 : 1 + size]))
        buf = buf[1 + size :]
    return got


def _send(sock: socket.socket, *messages: tuple[bytes, bytes]) -> None:
    sock.sendall(b"".join(kind + struct.pack("!I", len(body) + 4) + body for kind, body in messages))


def _bind(portal: bytes, statement: bytes, *values: bytes, binary_rows: bool = False) -> tuple[bytes, bytes]:
    body = portal + b"\0" + statement + b"\0" + struct.pack("!hh", 0, len(values))
    body += b"".join(struct.pack("!i", len(v)) + v for v in values)
    return b"B", body + (struct.pack("!hh", 1, 1) if binary_rows else struct.pack("!h", 0))


SYNC = (b"S", b"")


class _Writes:
    """A stream writer that keeps each write apart."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    async def drain(self) -> None:
        return None


def test_an_extended_exchange_is_answered_in_one_write_at_its_sync(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.apply([_row(u) for u in range(1, 8)], {"customer_ratings": MARKER}, {})
    server = PgServer(SqlReader(store, max_rows=5, timeout_s=1), PgSettings("127.0.0.1", 0, 5, 5, None))
    exchange = [
        (b"P", b"\0SELECT ratings FROM customer_ratings WHERE user_id = $1\0\0\0"),
        _bind(b"", b"", b"3"),
        (b"D", b"P\0"),
        (b"E", b"\0\0\0\0\0"),
        SYNC,
        (b"P", b"\0SELECT 1\0\0\0"),
        (b"H", b""),  # Flush: what is held goes out
        (b"X", b""),
    ]

    async def run() -> list[bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(b"".join(kind + struct.pack("!I", len(body) + 4) + body for kind, body in exchange))
        writer = _Writes()
        await server._queries(reader, writer, 0)  # type: ignore[arg-type]
        return writer.writes

    writes = asyncio.run(run())
    assert len(writes) == 2, writes  # one for the exchange with its Sync, one at the Flush
    kinds = [writes[0][i : i + 1] for i in _offsets(writes[0])]
    assert kinds == [b"1", b"2", b"T", b"D", b"C", b"Z"]
    assert writes[1] == b"1\0\0\0\4"  # ParseComplete


def _offsets(data: bytes) -> list[int]:
    at, found = 0, []
    while at < len(data):
        found.append(at)
        at += 1 + struct.unpack("!I", data[at + 1 : at + 5])[0]
    return found


def test_an_error_in_the_extended_protocol_skips_to_sync_and_the_session_goes_on(served: Served) -> None:
    with _started(served.port) as sock:
        _send(
            sock,
            (b"P", b"\0DELETE FROM customer_ratings\0\0\0"),
            _bind(b"", b""),
            (b"E", b"\0\0\0\0\0"),
            SYNC,
        )
        answer = _until(sock, b"Z")
        assert [k for k, _ in answer] == [b"1", b"2", b"E", b"Z"]  # Parse and Bind done; Execute refused
        assert b"C25006" in answer[2][1] and answer[3][1] == b"I"
        _send(sock, (b"B", b"\0nope\0\0\0\0\0\0\0"), (b"E", b"\0\0\0\0\0"), SYNC)  # skipped after the error
        assert [k for k, _ in _until(sock, b"Z")] == [b"E", b"Z"]
        query = b"SELECT user_id FROM customer_ratings WHERE user_id = 2\0"
        sock.sendall(b"Q" + struct.pack("!I", len(query) + 4) + query)
        answer = _until(sock, b"Z")
        assert [k for k, _ in answer] == [b"T", b"D", b"C", b"Z"]
        (oid,) = struct.unpack("!I", answer[0][1][2:].split(b"\0", 1)[1][6:10])
        assert oid == 23  # int4, as the marker names user_id
        assert answer[2][1] == b"SELECT 1\0"


def test_a_statement_s_parameter_types_follow_its_view_s_columns_when_they_change(served: Served) -> None:
    """The types inferred for a statement's text are kept while the views stay the same (drivers
    send the same texts again and again), and inferred again once a view's columns change."""
    sql = b"SELECT * FROM customer_ratings WHERE ratings >= $1 AND user_id = $2"

    def described() -> bytes:
        with _started(served.port) as sock:
            _send(sock, (b"P", b"\0" + sql + b"\0\0\0"), (b"D", b"S\0"), SYNC)
            answer = _until(sock, b"Z")
        assert [k for k, _ in answer] == [b"1", b"t", b"T", b"Z"]
        return answer[1][1]

    assert described() == struct.pack("!hII", 2, 20, 23)  # ratings: int8, user_id: int4
    assert described() == struct.pack("!hII", 2, 20, 23)  # the same text again
    wider = [c | {"type": "long"} if c["name"] == "user_id" else c for c in COLUMNS]
    marker = ViewMarker.decode({"view": "customer_ratings", "key": ["user_id"], "columns": wider})
    served.store.apply([_row(9)], {"customer_ratings": marker}, {})
    assert described() == struct.pack("!hII", 2, 20, 20)  # user_id now int8


def test_a_prepared_statement_is_described_then_executed_in_parts_with_binary_rows(served: Served) -> None:
    sql = b"SELECT user_id, average_stars, customer_matched FROM customer_ratings WHERE ratings >= $1"
    sql += b" ORDER BY 1"
    with _started(served.port) as sock:
        _send(sock, (b"P", b"ranged\0" + sql + b"\0\0\0"), (b"D", b"Sranged\0"), SYNC)
        answer = _until(sock, b"Z")
        assert [k for k, _ in answer] == [b"1", b"t", b"T", b"Z"]
        assert answer[1][1] == struct.pack("!hI", 1, 20)  # $1, not declared: compared with ratings, int8
        described = answer[2][1]
        assert described[:2] == struct.pack("!H", 3) and b"user_id\0" in described
        _send(
            sock,
            _bind(b"p", b"ranged", b"40", binary_rows=True),
            (b"D", b"Pp\0"),
            (b"E", b"p\0" + struct.pack("!i", 2)),
            SYNC,
        )
        answer = _until(sock, b"Z")
        assert [k for k, _ in answer] == [b"2", b"T", b"D", b"D", b"s", b"Z"]  # two rows, then suspended
        # user 4 (ratings 40): int4, float8 and bool in their binary formats
        assert answer[2][1] == struct.pack("!Hii", 3, 4, 4) + struct.pack("!id", 8, 4.0) + struct.pack(
            "!iB", 1, 1
        )
        _send(sock, (b"E", b"p\0" + struct.pack("!i", 0)), SYNC)
        rest = _until(sock, b"Z")
        assert [k for k, _ in rest] == [b"D", b"D", b"C", b"Z"] and rest[2][1] == b"SELECT 2\0"
        _send(sock, (b"C", b"Sranged\0"), (b"C", b"Pp\0"), (b"E", b"p\0\0\0\0\0"), SYNC)
        closed = _until(sock, b"Z")
        assert [k for k, _ in closed] == [b"3", b"3", b"E", b"Z"] and b"C34000" in closed[2][1]


def test_a_connection_s_prepared_statements_are_bounded_in_bytes_and_its_portals_in_number(
    served: Served,
) -> None:
    padding = b"SELECT 1 -- " + b"x" * 190_000
    with _started(served.port) as sock:
        for n in range(MAX_PREPARED_BYTES // len(padding)):
            _send(sock, (b"P", f"s{n}".encode() + b"\0" + padding + b"\0\0\0"))
        _send(sock, (b"P", b"one_more\0" + padding + b"\0\0\0"), SYNC)
        answer = _until(sock, b"Z")
        assert [k for k, _ in answer][-2:] == [b"E", b"Z"] and b"C53000" in answer[-2][1]
        _send(sock, (b"C", b"Ss0\0"), (b"P", b"one_more\0" + padding + b"\0\0\0"), SYNC)  # room again
        assert [k for k, _ in _until(sock, b"Z")] == [b"3", b"1", b"Z"]
        binds = [_bind(f"p{n}".encode(), b"s1") for n in range(MAX_PORTALS + 1)]
        _send(sock, *binds, SYNC)
        answer = _until(sock, b"Z")
        assert [k for k, _ in answer].count(b"2") == MAX_PORTALS and b"C53000" in answer[-2][1]


def _described(payload: bytes) -> list[tuple[str, int]]:
    """A RowDescription's columns: name and type oid."""
    (count,) = struct.unpack_from("!H", payload)
    at, columns = 2, []
    for _ in range(count):
        end = payload.index(b"\0", at)
        (oid,) = struct.unpack_from("!I", payload, end + 7)
        columns.append((payload[at:end].decode(), oid))
        at = end + 19
    return columns


def test_a_described_statement_tells_the_types_of_its_parameters_and_computed_columns(served: Served) -> None:
    sql = (
        b"SELECT count(*), max(average_stars) AS top, sum(ratings) total, 'x' AS tag, club_status"
        b" FROM customer_ratings WHERE club_status = $1 AND ratings BETWEEN $2 AND $3 LIMIT $4\0"
    )
    with _started(served.port) as sock:
        _send(sock, (b"P", b"s\0" + sql + b"\0\0"), (b"D", b"Ss\0"), SYNC)
        answer = _until(sock, b"Z")
        assert [k for k, _ in answer] == [b"1", b"t", b"T", b"Z"]
        assert answer[1][1] == struct.pack("!h4I", 4, 25, 20, 20, 20)  # text, int8, int8, LIMIT's int8
        assert _described(answer[2][1]) == [
            ("count", 20),  # as PostgreSQL names it
            ("top", 701),  # max of a float8 column
            ("total", 20),  # sum of an int8 one
            ("tag", 25),
            ("club_status", 25),
        ]
        # the rows then keep the types told: count(*) in binary is an int8
        _send(
            sock,
            _bind(b"", b"s", b"gold", b"0", b"100", b"10", binary_rows=True),
            (b"E", b"\0\0\0\0\0"),
            SYNC,
        )
        rows = _until(sock, b"Z")
        assert [k for k, _ in rows] == [b"2", b"D", b"C", b"Z"]
        assert rows[1][1][:14] == struct.pack("!Hiq", 5, 8, 3)  # three gold customers


def test_malformed_extended_messages_get_errors_and_the_session_goes_on(served: Served) -> None:
    rng = random.Random(7)
    pieces = [
        b"\0",
        b"s\0",
        b"SELECT $1\0",
        b"\xff\xfe",
        struct.pack("!h", -1),
        struct.pack("!h", 3),
        b"S",
        b"P",
    ]
    with _started(served.port) as sock:
        for _ in range(300):
            kind = rng.choice([b"P", b"B", b"D", b"E", b"C"])
            body = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
            body += rng.randbytes(rng.randint(0, 12))
            _send(sock, (kind, body), SYNC)
            answer = _until(sock, b"Z")
            assert answer[-1] == (b"Z", b"I")
            assert all(k in b"123EntTsDCI" for k, _ in answer[:-1]), answer
            assert not [b for k, b in answer if k == b"E" and b"CXX000" in b], (kind, body)  # no bug's error
        query = b"SELECT ratings FROM customer_ratings WHERE user_id = 2\0"
        sock.sendall(b"Q" + struct.pack("!I", len(query) + 4) + query)
        assert [k for k, _ in _until(sock, b"Z")] == [b"T", b"D", b"C", b"Z"]


def test_a_simple_query_that_is_not_utf8_is_refused_and_the_session_goes_on(served: Served) -> None:
    with _started(served.port) as sock:
        for query in (b"SELECT 'caf\xe9'\0", b"COPY (SUBSCRIBE customer_ratings\xff) TO STDOUT\0"):
            sock.sendall(b"Q" + struct.pack("!I", len(query) + 4) + query)
            answer = _until(sock, b"Z")
            assert [k for k, _ in answer] == [b"E", b"Z"] and b"C22021\0" in answer[0][1], answer
        query = b"SELECT ratings FROM customer_ratings WHERE user_id = 2\0"
        sock.sendall(b"Q" + struct.pack("!I", len(query) + 4) + query)
        assert [k for k, _ in _until(sock, b"Z")] == [b"T", b"D", b"C", b"Z"]


def test_a_jdbc_tool_lists_the_views_their_columns_and_keys_and_reads_them_by_full_name(
    served: Served,
) -> None:
    queries = json.loads((Path(__file__).parent / "jdbc_metadata_queries.json").read_text())

    def asked(name: str, *params: str) -> list[tuple[object, ...]]:  # over the extended protocol
        sql = re.sub(r"\$[0-9]", "%s", queries[name])
        return [tuple(row) for row in conn.execute(sql, params).fetchall()]

    with _connect(served, autocommit=True) as conn:
        assert conn.execute("select current_catalog").fetchone() == ("views",)
        assert [(r[1], r[2], r[3]) for r in asked("getTables", "public", "cust%")] == [
            ("public", "customer_ratings", "VIEW")
        ]
        assert [(r[3], r[4]) for r in asked("getColumns", "public", "customer_ratings", "%")] == [
            ("user_id", 23),
            ("ratings", 20),
            ("average_stars", 701),
            ("club_status", 25),
            ("customer_matched", 16),
        ]
        assert [r[3] for r in asked("getPrimaryKeys", "public", "customer_ratings")] == ["user_id"]
        qualified = 'SELECT ratings FROM "public"."customer_ratings" WHERE user_id = %s'
        assert conn.execute(qualified, (3,)).fetchone() == (30,)
        assert conn.execute(
            "SELECT count(*) FROM public.customer_ratings c WHERE c.ratings > 20"
        ).fetchone() == (5,)
        with pytest.raises(psycopg.errors.UndefinedTable):  # another schema is not the views'
            conn.execute("SELECT * FROM other.customer_ratings")


def test_postgresql_casts_work_on_columns_literals_and_parameters(served: Served) -> None:
    assert served.rows(
        "SELECT ratings::float8 / 4, '7'::int + 1 FROM customer_ratings WHERE user_id = 3"
    ) == ["7.5|8"]
    with _connect(served, autocommit=True) as conn:
        by_key = "SELECT * FROM customer_ratings WHERE user_id = %s::INTEGER"  # SQLAlchemy's way
        assert conn.execute(by_key, ("3",)).fetchone() == (3, 30, 2.5, None, False)
        assert conn.execute(
            "SELECT count(*)::int FROM customer_ratings WHERE ratings > %s::bigint", ("20",)
        ).fetchone() == (5,)


def test_information_schema_lists_the_views_and_their_columns_for_any_query(served: Served) -> None:
    tables = (
        "SELECT table_schema, table_name, table_type FROM information_schema.tables"
        " WHERE table_schema = 'public'"
    )
    assert served.rows(tables) == ["public|customer_ratings|VIEW"]
    columns = (
        'SELECT column_name, data_type, udt_name FROM INFORMATION_SCHEMA."columns"'
        " WHERE table_name = 'customer_ratings' AND ordinal_position <= 3 ORDER BY ordinal_position"
    )
    assert served.rows(columns) == [
        "user_id|integer|int4",
        "ratings|bigint|int8",
        "average_stars|double precision|float8",
    ]
    assert served.rows("SELECT schema_name FROM information_schema.schemata") == ["public"]
    assert served.rows("SELECT 'information_schema.tables'") == [
        "information_schema.tables"
    ]  # a string stays
    assert served.refused("SELECT * FROM information_schema.routines") == "42P01"  # not served


def _connect(served: Served, **options: object) -> psycopg.Connection:
    return psycopg.connect(
        host="127.0.0.1", port=served.port, user="app", dbname="views", connect_timeout=5, **options
    )  # type: ignore[arg-type]


def test_psycopg_binds_parameters_in_a_transaction_and_reads_typed_values(served: Served) -> None:
    with _connect(served) as conn, conn.cursor() as cur:  # not autocommit: psycopg sends BEGIN first
        cur.execute("SELECT * FROM customer_ratings WHERE user_id = %s", (7,))
        assert cur.fetchall() == [(7, 70, 2.5, "platinum", True)]
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        ranged = (
            "SELECT user_id FROM customer_ratings WHERE club_status = %s AND average_stars < %s ORDER BY 1"
        )
        assert cur.execute(ranged, ("platinum", 3)).fetchall() == [(1,), (5,), (7,)]
        assert cur.execute(
            "SELECT user_id FROM customer_ratings WHERE customer_matched = %s", (False,)
        ).fetchall() == [(3,)]
        counted = cur.execute(
            "SELECT count(*) AS n, max(average_stars) AS top FROM customer_ratings"
        ).fetchone()
        assert counted == (7, 4.0)  # computed columns, typed by their values
        conn.commit()
        assert conn.info.transaction_status == TransactionStatus.IDLE
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            cur.execute("DELETE FROM customer_ratings WHERE user_id = %s", (1,))
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            cur.execute("SELECT 1")
        conn.rollback()
        with pytest.raises(psycopg.errors.ProtocolViolation, match="supplies 1 parameters, but"):
            psycopg.RawCursor(conn).execute("SELECT user_id FROM customer_ratings WHERE user_id = $2", (1,))
        conn.rollback()
        assert cur.execute("SELECT user_id FROM customer_ratings WHERE user_id = %s", ("4",)).fetchall() == [
            (4,)
        ]


def test_psycopg_in_binary_with_prepared_statements_and_autocommit(served: Served) -> None:
    with _connect(served, autocommit=True) as conn, conn.cursor(binary=True) as cur:
        between = "SELECT user_id, ratings, average_stars FROM customer_ratings"
        between += " WHERE ratings BETWEEN %b AND %b ORDER BY 1"
        for _ in range(3):  # prepared on the server from the second time on (psycopg's threshold)
            assert cur.execute(between, (20, 40), prepare=True).fetchall() == [
                (2, 20, 4.0),
                (3, 30, 2.5),
                (4, 40, 4.0),
            ]
        assert cur.execute(
            "SELECT user_id FROM customer_ratings WHERE average_stars = %b ORDER BY 1 LIMIT 2", (2.5,)
        ).fetchall() == [(1,), (3,)]
        assert cur.execute("SELECT ratings FROM customer_ratings WHERE user_id = %t", (6,)).fetchall() == [
            (60,)
        ]
        assert conn.info.transaction_status == TransactionStatus.IDLE
        with pytest.raises(psycopg.errors.ProgramLimitExceeded):  # 7 rows, at most 5
            cur.execute("SELECT * FROM customer_ratings WHERE user_id > %s", (0,))
        assert cur.execute("SELECT count(*) FROM customer_ratings").fetchone() == (7,)


def test_what_sqlalchemy_and_psycopg_ask_as_they_connect_is_answered(served: Served) -> None:
    with _connect(served) as conn:
        assert conn.execute("select pg_catalog.version()").fetchone()[0].startswith("PostgreSQL 15.0")  # type: ignore[index]
        assert conn.execute("select current_schema(), current_database(), version()").fetchone()[:2] == (  # type: ignore[index]
            "public",
            "views",
        )
        assert conn.execute("show standard_conforming_strings").fetchone() == ("on",)
        assert conn.execute("show transaction isolation level").fetchone() == ("read committed",)
        assert psycopg.types.TypeInfo.fetch(conn, "hstore") is None  # a SAVEPOINT, pg_type, a RELEASE
        with conn.transaction():  # nested: a savepoint
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction), conn.transaction():
                conn.execute("DELETE FROM customer_ratings")
            assert conn.execute("SELECT count(*) FROM customer_ratings").fetchone() == (
                7,
            )  # rolled back to it


def test_subscribe_streams_the_rows_and_changes_as_copy_rows_until_the_client_cancels(tmp_path: Path) -> None:
    asked: list[tuple[str, bool]] = []
    closed: list[bool] = []

    async def follow(view: str, with_rows: bool) -> AsyncGenerator[str, None]:
        asked.append((view, with_rows))
        try:
            yield 'event: snapshot\ndata: {"key":{"user_id":1},"row":' + _row(1).value + "}\n\n"  # type: ignore[operator]
            yield "event: live\ndata: {}\n\n: keep-alive\n\n"
            yield 'id: 1\nevent: change\ndata: {"key":{"user_id":3},"row":null}\n\n'
            await asyncio.Event().wait()  # no more changes: until the client cancels
        finally:
            closed.append(True)

    for served in _serve(tmp_path, follow=follow):
        with _connect(served, autocommit=True) as conn:
            got: list[tuple[str | None, ...]] = []
            with (
                pytest.raises(psycopg.errors.QueryCanceled),
                conn.cursor().copy("COPY (SUBSCRIBE customer_ratings) TO STDOUT") as copy,
            ):
                for row in copy.rows():
                    got.append(row)
                    if len(got) == 2:
                        conn.cancel_safe()  # psql's Ctrl-C
            assert got == [
                ("upsert", "1", "10", "2.5", "platinum", "t"),
                ("delete", "3", None, None, None, None),
            ]
            assert asked == [("customer_ratings", True)] and closed == [True]
            assert conn.execute("SELECT count(*) FROM customer_ratings").fetchone() == (
                7,
            )  # the session goes on


def test_subscribe_is_refused_without_the_stream_or_for_a_view_the_service_refuses(tmp_path: Path) -> None:
    for served in _serve(tmp_path):  # no stream to follow
        assert served.refused("COPY (SUBSCRIBE customer_ratings) TO STDOUT") == "0A000"

    def follow(view: str, with_rows: bool) -> AsyncGenerator[str, None]:
        raise SqlError("42P01", f"view {view!r} does not exist")

    for served in _serve(tmp_path / "b", follow=follow):
        assert served.refused("COPY (SUBSCRIBE nope WITH (SNAPSHOT = false)) TO STDOUT") == "42P01"


def _followed(closed: list[str], tail: str = "") -> Callable[[str, bool], AsyncGenerator[str, None]]:
    """A view's stream: row 1, live, row 3 deleted, then `tail` (an event ending it), or nothing
    more until it is closed (each close noted in `closed`)."""

    async def follow(view: str, with_rows: bool) -> AsyncGenerator[str, None]:
        try:
            yield 'event: snapshot\ndata: {"key":{"user_id":1},"row":' + _row(1).value + "}\n\n"  # type: ignore[operator]
            yield "event: live\ndata: {}\n\n: keep-alive\n\n"
            yield 'id: 1\nevent: change\ndata: {"key":{"user_id":3},"row":null}\n\n'
            if tail:
                yield tail
                return
            await asyncio.Event().wait()
        finally:
            closed.append(view)

    return follow


def _eventually(check: Callable[[], bool]) -> bool:
    for _ in range(100):
        if check():
            return True
        threading.Event().wait(0.02)
    return check()


def test_a_cursor_for_subscribe_fetches_rows_then_changes_typed_and_waits_at_most_its_timeout(
    tmp_path: Path,
) -> None:
    closed: list[str] = []
    for served in _serve(tmp_path, follow=_followed(closed)):
        with _connect(served) as conn:  # not autocommit: psycopg begins, as DECLARE needs
            conn.execute("DECLARE c CURSOR FOR SUBSCRIBE customer_ratings")
            fetched = conn.execute("FETCH 1 c WITH (timeout = '1s')")
            assert [d.name for d in fetched.description or []][:2] == ["mz_state", "user_id"]
            assert fetched.fetchall() == [("upsert", 1, 10, 2.5, "platinum", True)]
            assert fetched.statusmessage == "FETCH 1"  # PostgreSQL's tag, over the extended protocol
            with conn.cursor(binary=True) as binary:  # typed values in binary too
                binary.execute("FETCH ALL c WITH (timeout = '1s')")
                assert binary.fetchall() == [("delete", 3, None, None, None, None)]
            waited = time.monotonic()
            assert conn.execute("FETCH ALL c WITH (timeout = '300ms')").fetchall() == []  # none came
            assert 0.25 < time.monotonic() - waited < 5
            assert closed == []
            conn.commit()  # the cursor ends with its transaction, its subscriber with it
            assert _eventually(lambda: closed == ["customer_ratings"])
            with pytest.raises(psycopg.errors.InvalidCursorName):
                conn.execute("FETCH 1 c")


def test_a_fetch_without_a_timeout_waits_until_the_client_cancels_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    closed: list[str] = []
    for served in _serve(tmp_path, follow=_followed(closed)):
        with _connect(served) as conn:
            conn.execute("DECLARE c CURSOR FOR SUBSCRIBE customer_ratings WITH (SNAPSHOT = false)")
            assert len(conn.execute("FETCH ALL c").fetchall()) == 2  # what has come, at once
            threading.Timer(0.3, conn.cancel_safe).start()
            with pytest.raises(psycopg.errors.QueryCanceled):
                conn.execute("FETCH ALL c")  # nothing more comes: it waits
            conn.rollback()
            assert _eventually(lambda: closed == ["customer_ratings"])
            assert conn.execute("SELECT count(*) FROM customer_ratings").fetchone() == (7,)


def test_a_stream_the_service_ends_gives_its_rows_then_fetch_says_why(tmp_path: Path) -> None:
    ended = 'event: error\ndata: {"error": "fell more than 10000 changes behind"}\n\n'
    closed: list[str] = []
    for served in _serve(tmp_path, follow=_followed(closed, ended)):
        with _connect(served) as conn:
            conn.execute("DECLARE c CURSOR FOR SUBSCRIBE customer_ratings")
            assert len(conn.execute("FETCH ALL c").fetchall()) == 2
            with pytest.raises(psycopg.errors.OperatorIntervention, match="10000 changes behind"):
                conn.execute("FETCH ALL c")
            assert _eventually(lambda: closed == ["customer_ratings"])  # read to its end


def test_a_named_cursor_reads_a_query_a_page_at_a_time_as_psycopg_and_sqlalchemy_do(served: Served) -> None:
    with _connect(served) as conn:
        with conn.cursor("pages") as cur:  # DECLARE (extended, $1 bound), Describe, FETCH FORWARD
            cur.itersize = 2
            cur.execute("SELECT user_id, ratings FROM customer_ratings WHERE user_id >= %s ORDER BY 1", (3,))
            assert [d.name for d in cur.description or []] == ["user_id", "ratings"]
            assert cur.fetchone() == (3, 30)
            assert list(cur) == [(4, 40), (5, 50), (6, 60), (7, 70)]  # three more FETCHes of 2
            assert cur.fetchall() == []
        with conn.cursor("typed", binary=True) as cur:
            cur.execute("SELECT average_stars, customer_matched FROM customer_ratings WHERE user_id = 7")
            assert cur.fetchall() == [(2.5, True)]
        conn.commit()
        with conn.cursor("held", withhold=True) as cur:  # outlives the COMMIT, as PostgreSQL's
            cur.execute("SELECT user_id FROM customer_ratings WHERE user_id < 3 ORDER BY 1")
            conn.commit()
            assert cur.fetchall() == [(1,), (2,)]
        with conn.cursor("plain") as cur:  # ends with its transaction
            cur.execute("SELECT user_id FROM customer_ratings WHERE user_id = 1")
            conn.commit()
            with pytest.raises(psycopg.errors.InvalidCursorName):
                conn.execute("FETCH 1 plain")
        conn.rollback()
        with conn.cursor("big") as cur:  # 7 rows, past VIEWS_PG_MAX_ROWS 5: read as FETCH asks
            cur.itersize = 4
            cur.execute("SELECT user_id FROM customer_ratings ORDER BY 1")
            assert [u for (u,) in cur] == list(range(1, 8))
        conn.rollback()
        with conn.cursor("chunk") as cur:  # pandas' chunksize past the cap: FETCH FORWARD 6
            cur.execute("SELECT user_id FROM customer_ratings ORDER BY 1")
            assert cur.fetchmany(6) == [(u,) for u in range(1, 7)]
            assert cur.fetchall() == [(7,)]  # FETCH ALL: the rest
        conn.rollback()
        with conn.cursor("whole", binary=True) as cur:  # fetchall() at once: FETCH ALL of 7 > 5
            cur.execute("SELECT user_id, average_stars FROM customer_ratings ORDER BY 1")
            assert cur.fetchall() == [(u, 2.5 if u % 2 else 4.0) for u in range(1, 8)]
        conn.rollback()
        with conn.cursor("write") as cur, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            cur.execute("DELETE FROM customer_ratings")
        conn.rollback()
        with (
            conn.cursor("back", scrollable=True) as cur,
            pytest.raises(psycopg.errors.FeatureNotSupported, match="SCROLL"),
        ):
            cur.execute("SELECT 1")


def _simple_query(sock: socket.socket, sql: str) -> list[tuple[bytes, bytes]]:
    _send(sock, (b"Q", sql.encode() + b"\0"))
    return _until(sock, b"Z")


def _sqlstate(answer: list[tuple[bytes, bytes]]) -> str:
    """The SQLSTATE of an answer that starts with an ErrorResponse."""
    assert answer[0][0] == b"E", answer
    fields = dict((f[:1], f[1:]) for f in answer[0][1].split(b"\0") if f)
    return fields[b"C"].decode()


def test_cursors_over_the_simple_protocol_and_what_is_refused(tmp_path: Path) -> None:
    closed: list[str] = []
    for served in _serve(tmp_path, follow=_followed(closed)):
        sock = _started(served.port)
        simple = functools.partial(_simple_query, sock)
        try:
            assert _sqlstate(simple("DECLARE c CURSOR FOR SUBSCRIBE customer_ratings")) == "25P01"
            assert simple("BEGIN")[-1] == (b"Z", b"T")
            assert [k for k, _ in simple("declare C cursor for subscribe customer_ratings;")] == [b"C", b"Z"]
            assert _sqlstate(simple("DECLARE c CURSOR FOR SUBSCRIBE customer_ratings")) == "42P03"
            simple("ROLLBACK")
            simple("BEGIN")
            for name in "abcd":
                assert simple(f"DECLARE {name} CURSOR FOR SUBSCRIBE customer_ratings")[0][0] == b"C"
            assert _sqlstate(simple("DECLARE e CURSOR FOR SUBSCRIBE customer_ratings")) == "53000"
            simple("ROLLBACK")
            simple("BEGIN")
            simple("DECLARE c CURSOR FOR SUBSCRIBE customer_ratings")
            fetched = simple("FETCH FORWARD 5 FROM c WITH (TIMEOUT = '2 seconds')")
            assert [k for k, _ in fetched] == [b"T", b"D", b"D", b"C", b"Z"]
            assert fetched[3][1] == b"FETCH 2\0"
            assert simple("CLOSE c")[0] == (b"C", b"CLOSE CURSOR\0")
            assert _sqlstate(simple("FETCH c")) == "34000"
            simple("ROLLBACK")
            simple("BEGIN")
            simple("DECLARE c CURSOR FOR SUBSCRIBE customer_ratings")
            assert _sqlstate(simple("FETCH 1 c WITH (timeout = 'soon')")) == "22007"
        finally:
            sock.close()
        assert _eventually(
            lambda: len(closed) == 7
        )  # every cursor's subscriber gone, the last with its client


def test_past_the_connection_cap_a_client_is_refused_with_53300(tmp_path: Path) -> None:
    for served in _serve(tmp_path, max_connections=2):
        held = [_started(served.port) for _ in range(2)]
        try:
            refused = served.psql("SELECT 1")
            assert refused.returncode != 0 and "more than 2 connections" in refused.stderr, refused.stderr
        finally:
            for sock in held:
                sock.close()


def _psql_lines(served: Served, command: str) -> list[str]:
    done = served.psql(command)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_psql_lists_the_one_database_the_one_schema_and_no_type_of_its_own(served: Served) -> None:
    assert _psql_lines(served, "\\l") == ["views|views|UTF8|C|C||libc|"]
    assert _psql_lines(served, "\\l+")[0].startswith("views|views|UTF8|")
    assert _psql_lines(served, "\\dn") == ["public|views"]
    assert _psql_lines(served, "\\dn+") == ["public|views||"]
    assert _psql_lines(served, "\\dT") == []


def test_psql_describe_lists_the_views_and_a_view_s_columns_with_their_types(served: Served) -> None:
    assert _psql_lines(served, "\\d") == ["public|customer_ratings|view|views"]
    assert _psql_lines(served, "\\dt") == []  # tables: none, views only
    assert _psql_lines(served, "\\dm") == ["public|customer_ratings|materialized view|views"]  # what they are
    assert _psql_lines(served, "\\dm+ cust*")[0].startswith("public|customer_ratings|materialized view|")
    columns = _psql_lines(served, "\\d customer_ratings")
    assert columns == [
        "user_id|integer|||",
        "ratings|bigint|||",
        "average_stars|double precision|||",
        "club_status|text|||",
        "customer_matched|boolean|||",
    ]
    assert _psql_lines(served, "\\d cust*") == columns  # psql's pattern
    verbose = _psql_lines(served, "\\d+ customer_ratings")  # its footer, the definition, not in -t
    assert verbose[0] == "user_id|integer||||plain|" and verbose[3] == "club_status|text||||extended|"
    definition = _psql_lines(served, "SELECT pg_catalog.pg_get_viewdef('16384'::pg_catalog.oid, true)")
    assert "kept by the views job" in definition[0]
    missing = served.psql("\\d no_such_view")
    assert 'Did not find any relation named "no_such_view"' in missing.stderr
    other = served.psql("SELECT datname FROM pg_catalog.pg_database")
    assert other.returncode != 0 and "0A000" in other.stderr


def test_psql_copies_a_query_or_a_view_to_a_csv_file_and_a_driver_copies_with_a_parameter(
    served: Served, tmp_path: Path
) -> None:
    out = tmp_path / "ratings.csv"
    copied = served.psql(
        f"\\copy (SELECT user_id, club_status FROM customer_ratings WHERE user_id < 4) TO '{out}' CSV HEADER"  # noqa: S608 (a path of the test's)
    )
    assert copied.returncode == 0, copied.stderr
    assert out.read_text() == "user_id,club_status\n1,platinum\n2,gold\n3,\n"  # 3's status is null
    view = served.rows("COPY customer_ratings (user_id, customer_matched) TO STDOUT WITH (FORMAT text)")
    assert view == [f"{u}\t{'f' if u == 3 else 't'}" for u in range(1, 8)]  # all 7: past VIEWS_PG_MAX_ROWS 5
    assert served.refused("SELECT * FROM customer_ratings") == "54000"  # a query's rows are held: capped
    assert served.rows(
        "COPY (SELECT user_id, club_status FROM customer_ratings WHERE user_id = 3) TO STDOUT"
    ) == ["3\t\\N"]
    assert served.refused("COPY customer_ratings FROM STDIN") == "25006"
    assert served.refused("COPY customer_ratings TO '/tmp/views.csv'") == "0A000"
    with _connect(served, autocommit=True) as conn, conn.cursor() as cur:  # the extended protocol
        query = "COPY (SELECT user_id, average_stars FROM customer_ratings WHERE user_id >= %s) TO STDOUT"
        with cur.copy(query, (6,)) as copy:
            got = b"".join(bytes(data) for data in copy)
        assert got == b"6\t4\n7\t2.5\n"  # a double as PostgreSQL writes it
        assert cur.rowcount == 2  # from the command's tag, COPY 2
        assert conn.execute("SELECT count(*) FROM customer_ratings").fetchone() == (7,)  # the session goes on


def test_psql_lists_the_one_role_the_views_privileges_and_no_object_of_other_kinds(served: Served) -> None:
    assert _psql_lines(served, "\\du") == ["views||{}"]
    assert _psql_lines(served, "\\du+") == ["views||{}|"]
    assert _psql_lines(served, "\\dp") == ["public|customer_ratings|view|views=r/views", "=r/views||"]
    assert _psql_lines(served, "\\dp nothing*") == []
    for command in ("\\df", "\\df+", "\\dx", "\\do", "\\dD", "\\dd", "\\dC", "\\dL", "\\db", "\\dy", "\\dl"):
        assert _psql_lines(served, command) == [], command  # functions, extensions...: none here
    other = served.psql("SELECT name FROM pg_catalog.pg_settings")
    assert other.returncode != 0 and "0A000" in other.stderr


# psql's tab completion runs only at a terminal: the queries psql 15 sends for it, as it sent them.
# SELECT * FROM cu<Tab>: relations of the kinds a query reads, and schemas, named so far
FROM_CU = (
    "SELECT c.relname, NULL::pg_catalog.text FROM pg_catalog.pg_class c WHERE c.relkind IN ('r', "
    "'S', 'v', 'm', 'f', 'p') AND (c.relname) LIKE 'cu%' AND pg_catalog.pg_table_is_visible(c.oid) "
    "AND c.relnamespace <> (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'pg_catalog') "
    "UNION ALL SELECT NULL::pg_catalog.text, n.nspname FROM pg_catalog.pg_namespace n WHERE "
    "n.nspname LIKE 'cu%' AND n.nspname NOT LIKE E'pg\\\\_%' LIMIT 1000"
)
# \d cu<Tab>: relations of any kind
ANY_CU = (
    "SELECT c.relname, NULL::pg_catalog.text FROM pg_catalog.pg_class c WHERE (c.relname) LIKE "
    "'cu%' AND pg_catalog.pg_table_is_visible(c.oid) AND c.relnamespace <> (SELECT oid FROM "
    "pg_catalog.pg_namespace WHERE nspname = 'pg_catalog') UNION ALL SELECT NULL::pg_catalog.text, "
    "n.nspname FROM pg_catalog.pg_namespace n WHERE n.nspname LIKE 'cu%' AND n.nspname NOT LIKE "
    "E'pg\\\\_%' LIMIT 1000"
)
# SELECT * FROM customer_ratings WHERE cl<Tab>
WHERE_CL = (
    "SELECT a.attname, NULL::pg_catalog.text FROM pg_catalog.pg_attribute a, pg_catalog.pg_class c "
    "WHERE c.oid = a.attrelid and a.attnum > 0 and not a.attisdropped AND (a.attname) LIKE 'cl%' "
    "AND c.relname = 'customer_ratings' AND pg_catalog.pg_table_is_visible(c.oid) LIMIT 1000"
)


def test_psql_s_tab_completion_finds_a_view_by_what_was_typed_and_its_columns(served: Served) -> None:
    def completed(sql: str) -> list[str]:
        return _psql_lines(served, sql)

    assert completed(FROM_CU) == ["customer_ratings|"]
    assert completed(ANY_CU) == ["customer_ratings|"]
    assert completed(FROM_CU.replace("'cu%'", "'customer\\_r%'")) == ["customer_ratings|"]  # _ escaped
    assert completed(FROM_CU.replace("'cu%'", "'cust_mer%'")) == ["customer_ratings|"]  # _: any one
    assert completed(FROM_CU.replace("'cu%'", "'customer\\_x%'")) == []
    assert completed(FROM_CU.replace("'cu%'", "'pu%'")) == ["|public"]  # the schema, to type public.
    assert completed(FROM_CU.replace("('r', 'S', 'v', 'm', 'f', 'p')", "('r', 'p')")) == []  # tables only
    assert completed(WHERE_CL) == ["club_status|"]
    assert len(completed(WHERE_CL.replace("'cl%'", "'%'"))) == 5  # every column
    assert completed(WHERE_CL.replace("'customer_ratings'", "'no_such_view'")) == []


def test_a_view_s_sql_is_shown_by_psql_and_by_materialize_s_show_commands(served: Served) -> None:
    sql = "-- trigger: 1 second\nSELECT user_id, count(*) AS ratings FROM enriched GROUP BY user_id\n"
    served.store.apply([], {"customer_ratings": replace(MARKER, sql=sql)}, {})
    assert _psql_lines(served, "SHOW VIEWS") == ["customer_ratings"]
    assert _psql_lines(served, "show materialized views in public;") == ["customer_ratings"]
    assert _psql_lines(served, "SHOW COLUMNS FROM customer_ratings")[:2] == [
        "user_id|t|integer|",
        "ratings|t|bigint|",
    ]
    created = _psql_lines(served, "SHOW CREATE MATERIALIZED VIEW public.customer_ratings")
    assert created == [
        "views.public.customer_ratings|CREATE MATERIALIZED VIEW public.customer_ratings AS",
        "-- trigger: 1 second",
        "SELECT user_id, count(*) AS ratings FROM enriched GROUP BY user_id",
        "",
    ]
    assert _psql_lines(served, "\\sv customer_ratings") == [
        "CREATE OR REPLACE VIEW public.customer_ratings AS",
        "-- trigger: 1 second",
        "SELECT user_id, count(*) AS ratings FROM enriched GROUP BY user_id",
    ]
    definition = _psql_lines(served, "SELECT pg_catalog.pg_get_viewdef('16384'::pg_catalog.oid, true)")
    assert definition[:2] == [
        " -- trigger: 1 second",
        "SELECT user_id, count(*) AS ratings FROM enriched GROUP BY user_id",
    ]
    assert served.refused("SHOW CREATE VIEW no_such_view") == "42P01"
    assert served.refused("SHOW CREATE TABLE customer_ratings") == "0A000"
    assert _psql_lines(served, "SHOW TimeZone") == ["UTC"]  # the session's settings stay the session's
    with _connect(served, autocommit=True) as conn:  # a driver's extended protocol: the same answers
        shown = conn.execute("SHOW COLUMNS FROM customer_ratings")
        assert [d.name for d in shown.description or []] == ["name", "nullable", "type", "comment"]
        assert shown.fetchone() == ("user_id", True, "integer", None)


def test_a_key_lookup_reads_the_view_s_key_index_not_every_row(served: Served) -> None:
    reader = SqlReader(served.store, max_rows=5, timeout_s=1)
    lookup = "EXPLAIN QUERY PLAN SELECT * FROM customer_ratings WHERE user_id = 3"
    plan = " ".join(str(r[3]) for r in reader._connection().execute(lookup))
    assert "USING INDEX key_of_" in plan, plan
    assert served.rows("SELECT ratings FROM customer_ratings WHERE user_id = 3") == ["30"]
    # The key's type changes: its index is made again, the older one dropped.
    retyped = replace(MARKER, columns=[{"name": "user_id", "type": "string"}])
    served.store.apply([], {"customer_ratings": retyped}, {})
    with contextlib.closing(sqlite3.connect(served.store.path)) as conn:
        listed = "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'key_of_%'"
        assert len(conn.execute(listed).fetchall()) == 1


def test_a_key_lookup_from_the_stored_row_gives_what_sqlite_gives(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    odd = {"user_id": 9, "ratings": 2.7, "average_stars": 4, "club_status": True, "customer_matched": "true"}
    nested = {
        "user_id": 10,
        "ratings": 1,
        "average_stars": 1,
        "club_status": ["a"],
        "customer_matched": False,
    }
    changes = [_row(u) for u in range(1, 8)]
    changes += [
        Change("customer_ratings", key_of([r["user_id"]]), ("user_id",), json.dumps(r)) for r in (odd, nested)
    ]
    store.apply(changes, {"customer_ratings": MARKER}, {})
    reader = SqlReader(store, max_rows=5, timeout_s=1)
    spellings = (
        "SELECT * FROM customer_ratings WHERE user_id = %d",
        "select *  from customer_ratings where user_id=%d;",
    )
    for user in (1, 2, 3, 7, 9, 42):
        for spelling in spellings:
            sql = spelling % user
            fast = reader.key_lookup(sql)
            assert fast is not None, sql
            assert fast == reader._run(sql), sql
    nested_sql = "SELECT * FROM customer_ratings WHERE user_id = 10"
    assert reader.key_lookup(nested_sql) is None  # left to SQLite
    assert reader.query(nested_sql).rows == [("10", "1", "1", '["a"]', "f")]
    assert reader.key_lookup("SELECT * FROM customer_ratings WHERE ratings = 10") is None  # not the key
    assert reader.key_lookup("SELECT * FROM nothing WHERE user_id = 1") is None


def test_the_reader_keeps_its_connection_while_only_markers_change(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.apply([_row(u) for u in range(1, 4)], {"customer_ratings": MARKER}, {})
    reader = SqlReader(store, max_rows=5, timeout_s=1)
    first = reader._connection()
    later = replace(MARKER, error="")  # a new marker, the same columns: the descriptions are new
    store.apply([_row(4)], {"customer_ratings": later}, {})
    assert store.infos()["customer_ratings"]["marker"] == later
    assert reader._connection() is first
    assert reader.query("SELECT count(*) FROM customer_ratings").rows == [("4",)]
    fewer = replace(MARKER, columns=COLUMNS[:2])  # the columns change: the view's table too
    store.apply([], {"customer_ratings": fewer}, {})
    assert reader._connection() is not first
    assert [c.name for c in reader.query("SELECT * FROM customer_ratings WHERE ratings = 20").columns] == [
        "user_id",
        "ratings",
    ]


def test_a_pull_by_key_over_the_wire_is_answered_without_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real = asyncio.to_thread

    async def counted(func, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        threads.append(getattr(func, "__name__", "?"))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    for served in _serve(tmp_path):
        assert served.rows("SELECT * FROM customer_ratings WHERE user_id = 7") == ["7|70|2.5|platinum|t"]
        with _connect(served) as conn:  # a parameter bound to an integer: the same path
            assert conn.execute("SELECT * FROM customer_ratings WHERE user_id = %s", (7,)).fetchone() == (
                7,
                70,
                2.5,
                "platinum",
                True,
            )
        assert threads == []
        assert served.rows("SELECT user_id FROM customer_ratings WHERE ratings = 70") == ["7"]
        assert threads == ["query"]


def test_a_query_that_reads_a_view_still_loading_is_refused_with_57p03(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.apply([_row(u) for u in range(1, 8)], {"customer_ratings": MARKER}, {})
    loading = [frozenset({"customer_ratings", "segment_hourly"})]
    reader = SqlReader(store, max_rows=5, timeout_s=1, loading=lambda: loading[0])
    for sql in (
        "SELECT * FROM customer_ratings WHERE user_id = 7",  # the key look-up's own path
        "SELECT count(*) FROM Customer_Ratings",
        'WITH c AS (SELECT * FROM "customer_ratings") SELECT count(*) FROM c',
        "SELECT 1 WHERE EXISTS (SELECT 1 FROM customer_ratings)",
    ):
        with pytest.raises(SqlError) as refused:
            reader.query(sql)
        assert refused.value.sqlstate == "57P03" and "'customer_ratings' is loading" in str(refused.value)
    assert reader.query("SELECT 'customer_ratings'").rows == [("customer_ratings",)]  # a string reads nothing
    loading[0] = frozenset({"segment_hourly"})
    assert reader.query("SELECT * FROM customer_ratings WHERE user_id = 7").rows[0][:2] == ("7", "70")
    assert reader.query("SELECT count(*) FROM customer_ratings").rows == [("7",)]
    # a name spelt as the view loading, but no read of it: answered
    spelt = 'SELECT ratings AS segment_hourly FROM customer_ratings AS "Segment_Hourly" WHERE user_id = 7'
    assert reader.query(spelt).rows == [("70",)]
    assert reader.query("WITH segment_hourly AS (SELECT 1 AS n) SELECT n FROM segment_hourly").rows == [
        ("1",)
    ]
    loading[0] = frozenset({"segment_hourly", "customer_ratings"})  # a local copy rebuilt: refused again
    with pytest.raises(SqlError, match="'segment_hourly' is loading"):  # no row of it yet, so no table
        reader.query("SELECT count(*) FROM main.Segment_Hourly")
    with pytest.raises(SqlError) as unknown:
        reader.query("SELECT count(*) FROM no_such_view")
    assert unknown.value.sqlstate == "42P01"
    with pytest.raises(SqlError, match="is loading"):
        reader.query("SELECT count(*) FROM customer_ratings")


def test_a_fetch_of_a_query_cursor_gives_any_number_of_rows_and_only_a_limited_execute_is_capped(
    tmp_path: Path,
) -> None:
    for served in _serve(tmp_path):  # 7 rows, VIEWS_PG_MAX_ROWS 5
        sock = _started(served.port)
        simple = functools.partial(_simple_query, sock)
        try:
            assert simple("DECLARE c CURSOR WITH HOLD FOR SELECT user_id FROM customer_ratings ORDER BY 1")[
                0
            ] == (
                b"C",
                b"DECLARE CURSOR\0",
            )
            served.store.apply([_row(8)], {"customer_ratings": MARKER}, {})  # after DECLARE: not in its rows
            first = simple("FETCH 6 FROM c")  # past the cap: the rows are written as they are read
            assert first[0][0] == b"T"
            assert [body for kind, body in first if kind == b"D"] == [
                struct.pack("!hi", 1, 1) + str(u).encode() for u in range(1, 7)
            ]
            assert (b"C", b"FETCH 6\0") in first
            rest = simple("FETCH ALL FROM c")
            assert [body[6:] for kind, body in rest if kind == b"D"] == [b"7"]
            assert (b"C", b"FETCH 1\0") in rest
            assert (b"C", b"FETCH 0\0") in simple("FETCH ALL FROM c")
            assert simple("CLOSE c")[0] == (b"C", b"CLOSE CURSOR\0")
            # An Execute with a row limit holds the FETCH's rows to hand them out: capped, not cut short.
            assert simple("DECLARE d CURSOR WITH HOLD FOR SELECT user_id FROM customer_ratings ORDER BY 1")
            _send(
                sock,
                (b"P", b"\0FETCH ALL FROM d\0\0\0"),
                _bind(b"", b""),
                (b"E", b"\0" + struct.pack("!i", 2)),  # at most 2 rows an Execute
                (b"S", b""),
            )
            limited = _until(sock, b"Z")
            assert _sqlstate([m for m in limited if m[0] not in (b"1", b"2")]) == "54000"
            assert [body[6:] for kind, body in simple("FETCH 5 FROM d") if kind == b"D"] == [
                str(u).encode() for u in range(1, 6)
            ]  # the rows stayed
        finally:
            sock.close()


def test_a_copy_streams_from_one_snapshot_and_a_cursor_is_closed_at_its_deadline(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    rows = 20_000
    store.apply([_row(u) for u in range(1, rows + 1)], {"customer_ratings": MARKER}, {})
    reader = SqlReader(store, max_rows=5, timeout_s=1)
    stream = reader.stream("SELECT user_id FROM customer_ratings", lasts_s=60)  # in the keys' order
    first = stream.page(1_000)
    store.apply([_row(u) for u in range(rows + 1, rows + 501)], {"customer_ratings": MARKER}, {})
    read = first + [row for page in iter(lambda: stream.page(3_000), []) for row in page]
    assert sorted(int(u or 0) for (u,) in read) == list(range(1, rows + 1))  # the snapshot of its start
    assert stream.page(10) == []
    stream.close()
    small = reader.stream("SELECT club_status FROM customer_ratings", lasts_s=60)
    assert len(small.page(rows, max_bytes=10_000)) < 2_000  # a page is bounded in bytes too
    small.close()
    with pytest.raises(SqlError) as closed:
        small.page(10)
    assert closed.value.sqlstate == "57014"
    late = reader.stream("SELECT user_id FROM customer_ratings", lasts_s=0.2)
    time.sleep(0.3)
    with pytest.raises(SqlError, match="VIEWS_PG_STREAM_TIMEOUT_S") as timed_out:
        late.page(10)
    assert timed_out.value.sqlstate == "57014"
    late.close()
    with pytest.raises(SqlError) as refused:
        reader.stream("DELETE FROM customer_ratings", lasts_s=60)
    assert refused.value.sqlstate == "25006"


def test_a_cursor_still_open_at_its_deadline_is_closed_and_a_copy_past_it_fails(tmp_path: Path) -> None:
    for served in _serve(tmp_path, stream_timeout_s=0.5):
        sock = _started(served.port)
        simple = functools.partial(_simple_query, sock)
        try:
            simple("DECLARE c CURSOR WITH HOLD FOR SELECT user_id FROM customer_ratings")
            assert [k for k, _ in simple("FETCH 2 c")] == [b"T", b"D", b"D", b"C", b"Z"]
            time.sleep(0.8)  # its snapshot let go at the deadline, not at the next FETCH
            assert _sqlstate(simple("FETCH 2 c")) == "57014"
            assert simple("CLOSE c")[0] == (b"C", b"CLOSE CURSOR\0")
            assert [k for k, _ in simple("COPY customer_ratings TO STDOUT")][-3:] == [b"c", b"C", b"Z"]
        finally:
            sock.close()


def test_a_client_gone_part_way_through_a_copy_is_no_error_of_the_service(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    served.store.apply([_row(u) for u in range(8, 60_000)], {"customer_ratings": MARKER}, {})
    sock = _started(served.port)
    _send(sock, (b"Q", b"COPY customer_ratings TO STDOUT\0"))
    assert sock.recv(1)[:1] == b"H"  # CopyOutResponse: the rows are on their way
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, unread
    sock.close()
    assert len(served.rows("COPY (SELECT user_id FROM customer_ratings WHERE user_id < 100) TO STDOUT")) == 99
    time.sleep(0.2)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


def test_explain_says_whether_a_query_reads_the_key_index_or_every_row_of_the_view(served: Served) -> None:
    assert _psql_lines(served, "EXPLAIN SELECT * FROM customer_ratings WHERE user_id = 3") == [
        "Key Lookup: one row read through the view's key index, as an HTTP pull"
    ]
    keyed = _psql_lines(served, "EXPLAIN VERBOSE SELECT ratings FROM customer_ratings WHERE user_id = 3")
    assert "USING INDEX key_of_" in keyed[0], keyed  # not the pull's path: SQLite's
    assert keyed[-1].endswith(": the key index of customer_ratings (user_id)"), keyed
    scanned = _psql_lines(
        served, "EXPLAIN (COSTS false, FORMAT text) SELECT club_status FROM customer_ratings ORDER BY ratings"
    )
    assert "USING PRIMARY KEY (view=?)" in scanned[0] and "ORDER BY" in scanned[1], scanned  # every row
    assert scanned[-1].startswith("SQLite's plan over main.rows"), scanned
    assert served.refused("EXPLAIN ANALYZE SELECT * FROM customer_ratings") == "0A000"
    assert served.refused("EXPLAIN (FORMAT json) SELECT * FROM customer_ratings") == "0A000"
    assert served.refused("EXPLAIN (COLOUR on) SELECT 1") == "42601"
    assert served.refused("EXPLAIN DELETE FROM customer_ratings") == "25006"
    assert served.refused("EXPLAIN SELECT * FROM nope") == "42P01"
    assert served.refused("COPY (EXPLAIN SELECT 1) TO STDOUT") == "0A000"  # as PostgreSQL: not a query
    with _connect(served, autocommit=True) as conn:  # a driver's Parse, Describe, Bind, Execute
        planned = conn.execute("EXPLAIN SELECT * FROM customer_ratings WHERE ratings > %s", (30,))
        assert [d.name for d in planned.description or []] == ["QUERY PLAN"]
        assert "USING PRIMARY KEY" in planned.fetchall()[0][0]
        assert conn.execute("SELECT count(*) FROM customer_ratings").fetchone() == (7,)


def test_a_session_s_statement_timeout_ends_its_queries_sooner_never_later(served: Served) -> None:
    slow = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"  # never ends
    )
    sock = _started(served.port)
    simple = functools.partial(_simple_query, sock)
    try:
        assert simple("SET statement_timeout = '100ms'")[0] == (b"C", b"SET\0")
        timed_out = simple(slow)  # the session's bound, not the server's 1 s (VIEWS_PG_TIMEOUT_S)
        assert _sqlstate(timed_out) == "57014" and b"due to statement timeout" in timed_out[0][1]
        simple("SET statement_timeout = '1h'")  # above the server's bound: that bound stays
        assert b"VIEWS_PG_TIMEOUT_S" in simple(slow)[0][1]
        assert [k for k, _ in simple("SELECT count(*) FROM customer_ratings")] == [b"T", b"D", b"C", b"Z"]
    finally:
        sock.close()


def test_a_range_of_the_key_is_read_through_the_key_index_not_the_whole_view(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    for start in range(1, 30_001, 10_000):  # the planner's statistics: after the key index is made
        store.apply([_row(u) for u in range(start, start + 10_000)], {"customer_ratings": MARKER}, {})
    reader = SqlReader(store, max_rows=50, timeout_s=1)
    ranged = "SELECT user_id, ratings FROM customer_ratings WHERE user_id BETWEEN 10 AND 20 ORDER BY user_id"
    plan = " ".join(detail for _, _, detail in reader.plan(ranged))
    assert "USING INDEX key_of_" in plan and "TEMP B-TREE" not in plan, plan  # not every row, sorted
    assert [row[0] for row in reader.query(ranged).rows] == [str(u) for u in range(10, 21)]
    counted = "SELECT count(*) FROM customer_ratings WHERE user_id BETWEEN 10 AND 20"  # no order to keep
    assert "USING INDEX key_of_" in reader.plan(counted)[0][2]


HOURLY = ViewMarker.decode(
    {
        "view": "hourly",
        "key": ["hour_start"],
        "columns": [
            {"name": "hour_start", "type": "timestamp"},
            {"name": "day", "type": "date"},
            {"name": "ratings", "type": "long"},
        ],
    }
)


def _hours(served: Served, *hours: datetime.datetime) -> None:
    """Rows of `hourly` as the views job writes them (Spark's JSON: ISO 8601, UTC), ratings 1, 2..."""
    changes = []
    for i, hour in enumerate(hours):
        start = hour.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        row = {"hour_start": start, "day": hour.date().isoformat(), "ratings": i + 1}
        changes.append(Change("hourly", key_of([start]), ("hour_start",), json.dumps(row)))
    served.store.apply(changes, {"hourly": HOURLY}, {})


def test_timestamps_are_timestamptz_in_utc_compared_by_instant_whatever_the_literal_s_spelling(
    served: Served,
) -> None:
    utc = datetime.UTC
    recent = datetime.datetime.now(utc).replace(minute=0, second=0, microsecond=0) - datetime.timedelta(
        hours=1
    )
    _hours(
        served,
        datetime.datetime(2026, 11, 7, 3, tzinfo=utc),
        datetime.datetime(2026, 11, 7, 4, tzinfo=utc),
        recent,
    )
    assert served.rows("SELECT * FROM hourly WHERE ratings = 1") == ["2026-11-07 03:00:00+00|2026-11-07|1"]
    later = "SELECT ratings FROM hourly WHERE hour_start > {} ORDER BY hour_start"
    for half_past_three in ("'2026-11-07 03:30'", "'2026-11-07T03:30:00Z'", "'2026-11-07 05:30:00+02'"):
        assert served.rows(later.format(half_past_three)) == ["2", "3"], half_past_three
    assert served.rows("SELECT ratings FROM hourly WHERE hour_start = '2026-11-07 04:00:00+00'") == ["2"]
    assert served.rows("SELECT ratings FROM hourly WHERE hour_start > now() - interval '2 hours'") == ["3"]
    assert served.rows("SELECT count(*) FROM hourly WHERE hour_start >= '2026-11-07'::timestamptz") == ["3"]
    assert served.rows("SELECT hour_start::date FROM hourly WHERE ratings < 3") == [
        "2026-11-07",
        "2026-11-07",
    ]
    assert served.rows("SELECT min(hour_start) FROM hourly") == ["2026-11-07 03:00:00+00"]  # computed: typed
    by_day = (
        "SELECT date_trunc('day', hour_start) AS d, sum(ratings) FROM hourly GROUP BY 1 ORDER BY 1 LIMIT 1"
    )
    assert served.rows(by_day) == ["2026-11-07 00:00:00+00|3"]  # a BI tool's time grain
    grafana = (  # $__timeGroupAlias(hour_start, '2h') and $__timeFilter(hour_start), as Grafana writes them
        'SELECT floor(extract(epoch from hour_start)/7200)*7200 AS "time", sum(ratings) FROM hourly'
        " WHERE hour_start BETWEEN '2026-11-07T00:00:00Z' AND '2026-11-08T00:00:00Z' GROUP BY 1 ORDER BY 1"
    )
    two_hours = int(datetime.datetime(2026, 11, 7, 2, tzinfo=utc).timestamp())
    assert served.rows(grafana) == [f"{two_hours}|1", f"{two_hours + 7200}|2"]
    clock = served.rows("SELECT now(), now() - interval '1 day' AS yesterday")[0].split("|")
    apart = datetime.datetime.fromisoformat(clock[0]) - datetime.datetime.fromisoformat(clock[1])
    assert abs(apart - datetime.timedelta(days=1)) < datetime.timedelta(seconds=1), clock
    described = served.rows("\\d hourly")
    assert described[:2] == ["hour_start|timestamp with time zone|||", "day|date|||"], described
    with _connect(served) as conn:
        rows = conn.execute(
            "SELECT hour_start, day FROM hourly WHERE hour_start BETWEEN %s AND %s ORDER BY hour_start",
            (datetime.datetime(2026, 11, 7, 2, 59, tzinfo=utc), "2026-11-07 04:00:00+00"),
        ).fetchall()
        assert rows == [
            (datetime.datetime(2026, 11, 7, 3, tzinfo=utc), datetime.date(2026, 11, 7)),
            (datetime.datetime(2026, 11, 7, 4, tzinfo=utc), datetime.date(2026, 11, 7)),
        ]
        with conn.cursor(binary=True) as cur:  # the values in binary, the parameter too (%b)
            cur.execute("SELECT hour_start, day FROM hourly WHERE hour_start < %b ORDER BY 1", (recent,))
            assert cur.fetchall() == rows


def test_a_session_s_time_zone_shows_reads_truncates_and_casts_timestamps_as_postgresql_does(
    served: Served,
) -> None:
    utc = datetime.UTC
    _hours(
        served, datetime.datetime(2026, 11, 7, 22, tzinfo=utc), datetime.datetime(2026, 11, 7, 23, tzinfo=utc)
    )
    berlin = ZoneInfo("Europe/Berlin")  # UTC+1 in November
    # the start-up's TimeZone (libpq's PGTZ; JDBC sends its JVM's): shown in it, with its offset
    shown = served.psql(
        "SELECT hour_start, hour_start::date, ratings FROM hourly ORDER BY 1", zone="Europe/Berlin"
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "2026-11-07 23:00:00+01|2026-11-07|1",
        "2026-11-08 00:00:00+01|2026-11-08|2",
    ]
    by_day = "SELECT date_trunc('day', hour_start), sum(ratings) FROM hourly GROUP BY 1 ORDER BY 1"
    assert served.psql(by_day, zone="Europe/Berlin").stdout.splitlines() == [
        "2026-11-07 00:00:00+01|1",
        "2026-11-08 00:00:00+01|2",
    ]
    assert served.rows(by_day) == ["2026-11-07 00:00:00+00|3"]  # the default: UTC
    refused = served.psql("SELECT 1", zone="Mars/Olympus_Mons")
    assert refused.returncode != 0
    assert "FATAL:  invalid value for parameter \"TimeZone\": 'Mars/Olympus_Mons'" in refused.stderr
    with _connect(served, autocommit=True) as conn:
        conn.adapters.register_loader("timestamptz", TextLoader)  # the server's text, not psycopg's reading
        conn.execute("SET TIME ZONE 'Asia/Kolkata'")
        assert conn.info.parameter_status("TimeZone") == "Asia/Kolkata"  # ParameterStatus, as JDBC follows it
        assert conn.execute("SELECT min(hour_start) FROM hourly").fetchone() == ("2026-11-08 03:30:00+05:30",)
        conn.execute("SET TimeZone TO 'Europe/Berlin'")
        # a literal without a zone is the session's: 23:30 in Berlin is 22:30 UTC
        after = conn.execute("SELECT hour_start FROM hourly WHERE hour_start > '2026-11-07 23:30'").fetchall()
        assert after == [("2026-11-08 00:00:00+01",)]
        hour = conn.execute("SELECT extract(hour FROM hour_start) FROM hourly ORDER BY 1").fetchall()
        assert hour == [(0.0,), (23.0,)]
        assert conn.execute("SHOW TimeZone").fetchone() == ("Europe/Berlin",)
        conn.execute("SET TIME ZONE -7")  # a number of hours: ISO's sign
        assert conn.execute("SELECT min(hour_start) FROM hourly").fetchone() == ("2026-11-07 15:00:00-07",)
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="is not a time zone"):
            conn.execute("SET TimeZone = 'Europe/Nowhere'")
        conn.execute("RESET TimeZone")
        assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)
        assert conn.info.parameter_status("TimeZone") == "UTC"
    with _connect(served, autocommit=True) as conn:  # a timestamp psycopg reads: the same instant
        conn.execute("SET TimeZone TO 'Europe/Berlin'")
        first = conn.execute("SELECT min(hour_start) FROM hourly").fetchone()
        assert first == (datetime.datetime(2026, 11, 7, 22, tzinfo=utc),)
        assert first[0].utcoffset() == datetime.timedelta(hours=1) and first[0].tzinfo == berlin


def test_to_char_labels_a_time_in_the_session_s_zone_and_refuses_a_number_with_its_reason(
    served: Served,
) -> None:
    _hours(served, datetime.datetime(2026, 11, 7, 22, tzinfo=datetime.UTC))
    label = "SELECT to_char(hour_start, 'Dy DD Mon HH24:MI') FROM hourly"
    assert served.rows(label) == ["Sat 07 Nov 22:00"]
    assert served.psql(label, zone="Europe/Berlin").stdout.splitlines() == ["Sat 07 Nov 23:00"]
    refused = served.psql("SELECT to_char(ratings, '999') FROM hourly")
    assert (
        refused.returncode != 0 and "22007" in refused.stderr and "numbers are not served" in refused.stderr
    )
    assert served.rows("SELECT to_char(hour_start, 'YYYY') FROM hourly") == ["2026"]  # the session goes on


def test_the_user_functions_postgresql_calls_without_parentheses_name_the_client_s_user(
    served: Served,
) -> None:
    # DBeaver asks this as it connects; psql's user is "reader" (Served.psql)
    assert served.rows("SELECT current_schema(), session_user") == ["public|reader"]
    assert served.rows("SELECT current_user, current_role, current_catalog, 'current_user'") == [
        "reader|reader|views|current_user"
    ]
    assert served.rows("SHOW session_authorization") == ["reader"]
    assert served.rows(
        "SELECT user_id FROM customer_ratings WHERE current_user = 'reader' AND user_id = 2"
    ) == ["2"]
    with _connect(served, autocommit=True) as conn:  # psycopg's user is "app"
        assert conn.execute("SELECT session_user, current_setting('session_authorization')").fetchone() == (
            "app",
            "app",
        )


def test_current_setting_gives_the_client_s_own_settings(served: Served) -> None:
    with _connect(served, autocommit=True) as conn, _connect(served, autocommit=True) as other:
        version = "SELECT current_setting('server_version_num')::int / 100"  # Grafana's version check
        assert conn.execute(version).fetchone() == (1500,)
        conn.execute("SET application_name = 'grafana'")
        asked = "SELECT current_setting('APPLICATION_NAME'), current_setting('no_such_setting', true)"
        assert conn.execute(asked).fetchone() == ("grafana", None)
        assert other.execute("SELECT current_setting('application_name')").fetchone() == ("",)  # its own


def test_grafana_s_query_builder_finds_the_views_and_their_columns_over_the_wire(served: Served) -> None:
    # its table picker's query (the schemas of search_path read with arrays) and its column picker's
    in_path = (
        "quote_ident(table_schema) IN (SELECT CASE WHEN trim(s[i]) = '\"$user\"' THEN user"
        " ELSE trim(s[i]) END FROM generate_series("
        "array_lower(string_to_array(current_setting('search_path'),','),1),"
        " array_upper(string_to_array(current_setting('search_path'),','),1)) as i,"
        " string_to_array(current_setting('search_path'),',') s)"
    )
    tables = (
        f"SELECT CASE WHEN {in_path} THEN quote_ident(table_name) ELSE quote_ident(table_schema) || '.' ||"  # noqa: S608
        ' quote_ident(table_name) END AS "table" FROM information_schema.tables WHERE'
        f" quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog') ORDER BY 1"
    )
    assert served.rows(tables) == ["customer_ratings"]
    columns = (
        'SELECT quote_ident(column_name) AS "column", data_type AS "type" FROM information_schema.columns'  # noqa: S608
        " WHERE CASE WHEN array_length(parse_ident('customer_ratings'),1) = 2"
        " THEN quote_ident(table_schema) = (parse_ident('customer_ratings'))[1]"
        f" ELSE quote_ident(table_name) = 'customer_ratings' AND {in_path} END"
    )
    assert served.rows(columns)[:2] == ["user_id|integer", "ratings|bigint"]
    assert served.rows("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'") == []
    with _connect(served, autocommit=True) as conn:  # an array's text, as psycopg reads it
        assert conn.execute("SELECT string_to_array('a,b c', ',')").fetchone() == ('{a,"b c"}',)
        by_list = "SELECT user_id FROM customer_ratings WHERE user_id = ANY(%s) ORDER BY 1"
        for binary in (False, True):  # a list bound as an array parameter
            assert conn.cursor(binary=binary).execute(by_list, ([2, 4, 99],)).fetchall() == [(2,), (4,)]


def test_bi_tools_time_grains_and_relative_filters_shift_timestamps_by_intervals(served: Served) -> None:
    utc = datetime.UTC
    yesterday = datetime.datetime.now(utc).replace(minute=0, second=0, microsecond=0) - datetime.timedelta(
        days=1
    )
    _hours(served, datetime.datetime(2026, 1, 31, 3, tzinfo=utc), yesterday)
    first = "FROM hourly WHERE ratings = 1"
    # Superset's and Metabase's week starting on Sunday, Metabase's day grouping
    sunday = f"SELECT date_trunc('week', hour_start + interval '1 day') - interval '1 day' {first}"
    assert served.rows(sunday) == ["2026-01-25 00:00:00+00"]
    assert served.rows(f"SELECT CAST(hour_start AS date), CAST(hour_start AS timestamp) {first}") == [
        "2026-01-31|2026-01-31 03:00:00+00"
    ]
    assert served.rows(
        f"SELECT hour_start + interval '1 mon', hour_start - interval '90 minutes' {first}"
    ) == ["2026-02-28 03:00:00+00|2026-01-31 01:30:00+00"]
    # Metabase's "previous 30 days" (the interval's number signed), compared by instant
    recent = "SELECT ratings FROM hourly WHERE hour_start >= date_trunc('day', now() + INTERVAL '-30 day')"
    assert served.rows(recent) == ["2"]
    assert served.rows(
        "SELECT count(*) FROM hourly WHERE hour_start + interval '1 hour' > '2026-01-31 03:30Z'"
    ) == ["2"]
    assert served.refused(f"SELECT hour_start + interval '1 fortnight' {first}") == "22007"
    # how long ago the view's last row came (Grafana's freshness stat), and a span between two rows
    ago = served.rows(
        "SELECT extract(epoch FROM now() - max(hour_start)), now() - max(hour_start) FROM hourly"
    )
    seconds, interval = ago[0].split("|")
    assert 86_400 <= float(seconds) < 90_000 and interval.startswith("1 day ")
    spans = (
        "SELECT extract(hour FROM max(hour_start) - '2026-01-30 23:00Z'::timestamptz),"
        " date_part('epoch', max(hour_start) - '2026-01-30 23:00Z') FROM hourly WHERE ratings = 1"
    )
    assert served.rows(spans) == ["4|14400"]
    # a difference anywhere: SQLite would subtract the texts' years and give 0 or 2026 - 2025
    two = f"SELECT hour_start - '2026-01-30 23:00Z'::timestamptz, day - '2025-12-31'::date, day - day {first}"
    assert served.rows(two) == ["04:00:00|31|0"]
    assert served.rows(f"SELECT day + 1, day - 31, 1 + day {first}") == ["2026-02-01|2025-12-31|2026-02-01"]
    assert served.refused(f"SELECT hour_start + 1 {first}") == "42883"  # as in PostgreSQL, not 2027
    assert served.rows(f"SELECT age(hour_start, '2025-10-31 06:30Z'), age(now(), now()) {first}") == [
        "2 mons 30 days 20:30:00|00:00:00"
    ]
    # now() is the statement's start in every row, as PostgreSQL's is its transaction's
    assert served.rows("SELECT count(DISTINCT now()) FROM generate_series(1, 3000)") == ["1"]
    assert served.rows("SELECT current_date = CAST(now() AS date), current_timestamp <= now()") == ["t|t"]
    noon = "'2026-03-28 12:00'::timestamptz"  # in Berlin, the day before the clocks change
    spring = f"SELECT {noon} + interval '1 day', {noon} + interval '24h'"
    assert served.psql(spring, zone="Europe/Berlin").stdout.split() == [
        "2026-03-29",
        "12:00:00+02|2026-03-29",
        "13:00:00+02",
    ]


def _two_hours(served: Served) -> None:
    """Rows of `hourly` at 03:00 and 05:00 UTC on 31 January 2026 (ratings 1 and 2)."""
    _hours(
        served,
        datetime.datetime(2026, 1, 31, 3, tzinfo=datetime.UTC),
        datetime.datetime(2026, 1, 31, 5, tzinfo=datetime.UTC),
    )


def test_a_driver_s_timestamp_or_date_parameter_takes_part_in_time_arithmetic(served: Served) -> None:
    _two_hours(served)
    since = datetime.datetime(2026, 1, 30, 23, tzinfo=datetime.UTC)
    with _connect(served, autocommit=True) as conn:
        for binary in (False, True):  # psycopg declares timestamptz, date: typed as PostgreSQL types them
            cur = conn.cursor(binary=binary)
            cur.execute("SELECT max(hour_start) - %s, %s - min(hour_start) FROM hourly", (since, since))
            assert cur.fetchone() == ("06:00:00", "-04:00:00")  # not 0, SQLite's difference of the years
            cur.execute(
                "SELECT %s - min(day), min(day) - %s FROM hourly", (datetime.date(2026, 3, 2), since.date())
            )
            assert cur.fetchone() == (30, 1)
            with pytest.raises(psycopg.errors.UndefinedFunction):  # 42883, as PostgreSQL: no number
                cur.execute("SELECT %s + 1 FROM hourly", (since,))


def test_a_nested_query_s_timestamps_are_timestamptz_and_subtract_as_postgresql_s(served: Served) -> None:
    _two_hours(served)
    nested = (
        "SELECT last, last - first, d + 1"
        " FROM (SELECT max(hour_start) AS last, min(hour_start) AS first, min(day) AS d FROM hourly) s"
    )
    # the raw stored text (2026-01-31T05:00:00.000Z) and 0 (the years' difference) before
    assert served.rows(nested) == ["2026-01-31 05:00:00+00|02:00:00|2026-02-01"]
    assert served.rows("SELECT x FROM (SELECT hour_start AS x FROM hourly) a ORDER BY x DESC LIMIT 1") == [
        "2026-01-31 05:00:00+00"
    ]


def test_intervals_compare_by_length_and_move_timestamps_as_in_postgresql(served: Served) -> None:
    _two_hours(served)
    # a staleness alert's condition: before, `interval '1 day'` was no column, `'1 day'::interval` was 1
    stale = (
        "SELECT now() - max(hour_start) > interval '1 day', now() - max(hour_start) < '10 min'::interval"
        " FROM hourly"
    )
    assert served.rows(stale) == ["t|f"]
    spans = (
        "SELECT max(hour_start) - min(hour_start) BETWEEN interval '1 hour' AND '3 hours'::interval"
        " FROM hourly"
    )
    assert served.rows(spans) == ["t"]
    moved = "SELECT max(hour_start) - '1 day'::interval, interval '2 hours' + max(hour_start) FROM hourly"
    assert served.rows(moved) == ["2026-01-30 05:00:00+00|2026-01-31 07:00:00+00"]
    assert served.rows("SELECT interval '90 minutes', CAST('1 mon 2 days' AS interval)") == [
        "01:30:00|1 mon 2 days"
    ]
    assert served.refused("SELECT '1 day'::interval * 2") == "0A000"  # SQLite would say 2
    assert served.refused("SELECT interval 'banana'") == "22007"


def test_code_written_against_postgresql_reads_columns_by_postgresql_s_names(served: Served) -> None:
    with _connect(served, autocommit=True, row_factory=dict_row) as conn:
        counted = conn.execute(
            "SELECT count(*), max(ratings) AS Most, ratings > 20 FROM customer_ratings"
        ).fetchone()
        assert counted == {"count": 7, "most": 70, "?column?": True}


def test_a_portal_executed_a_few_rows_at_a_time_reads_any_number_of_rows_without_the_row_cap(
    served: Served,
) -> None:
    # JDBC's fetch size and asyncpg's cursors: 7 rows through a server capped at 5 a result
    with _started(served.port) as sock:
        query = b"SELECT user_id FROM customer_ratings ORDER BY user_id\0"
        _send(
            sock, (b"P", b"s\0" + query + b"\0\0"), _bind(b"c", b"s"), (b"E", b"c\0" + struct.pack("!i", 3))
        )
        _send(sock, (b"E", b"c\0" + struct.pack("!i", 3)), (b"E", b"c\0" + struct.pack("!i", 3)), SYNC)
        answer = _until(sock, b"Z")
        kinds = [k for k, _ in answer]
        assert kinds == [b"1", b"2", *[b"D"] * 3, b"s", *[b"D"] * 3, b"s", b"D", b"C", b"Z"]
        assert [int(body[6:]) for k, body in answer if k == b"D"] == [1, 2, 3, 4, 5, 6, 7]
        assert answer[-2][1] == b"SELECT 1\0"
        # a row limit, then the rest (Execute with 0), from the same snapshot
        _send(sock, _bind(b"d", b"s"), (b"E", b"d\0" + struct.pack("!i", 2)), (b"E", b"d\0\0\0\0\0"), SYNC)
        rest = _until(sock, b"Z")
        assert [k for k, _ in rest] == [b"2", b"D", b"D", b"s", *[b"D"] * 5, b"C", b"Z"]
        assert rest[-2][1] == b"SELECT 5\0"
        # described first, as JDBC describes its portal before it executes it with its fetch size
        _send(sock, _bind(b"e", b"s"), (b"D", b"Pe\0"), (b"E", b"e\0" + struct.pack("!i", 4)), SYNC)
        described = _until(sock, b"Z")
        assert [k for k, _ in described] == [b"2", b"T", *[b"D"] * 4, b"s", b"Z"]
        _send(sock, (b"E", b"e\0" + struct.pack("!i", 4)), SYNC)
        assert [k for k, _ in _until(sock, b"Z")] == [*[b"D"] * 3, b"C", b"Z"]
        # whole, as before, without a row limit: refused past the cap
        _send(sock, _bind(b"", b"s"), (b"E", b"\0\0\0\0\0"), SYNC)
        assert b"C54000" in _until(sock, b"Z")[-2][1]


def test_a_portal_described_past_the_row_cap_is_typed_by_its_rows_as_within_it(served: Served) -> None:
    # JDBC describes its portal, then executes it with its fetch size. A column the query computes
    # was typed from the statement's text past the cap and by its values within it: the same
    # statement's types changed with its number of rows
    query = b"SELECT user_id, abs(user_id - 10) AS distance FROM customer_ratings ORDER BY user_id\0"
    typed = [("user_id", 23), ("distance", 20)]  # the view's int4; by its values, int8: as under the cap
    with _started(served.port) as sock:
        _send(sock, (b"P", b"s\0" + query + b"\0\0"), _bind(b"c", b"s"), (b"D", b"Pc\0"), SYNC)
        assert b"C54000" not in b"".join(body for _, body in _until(sock, b"Z"))  # 7 rows: past the cap
        small = b"SELECT user_id, abs(user_id - 10) AS distance FROM customer_ratings WHERE user_id < 3\0"
        _send(sock, (b"P", b"w\0" + small + b"\0\0"), _bind(b"", b"w"), (b"D", b"P\0"), SYNC)
        assert _described(dict(_until(sock, b"Z"))[b"T"]) == typed
        _send(sock, _bind(b"e", b"s"), (b"D", b"Pe\0"), (b"E", b"e\0" + struct.pack("!i", 4)), SYNC)
        answer = _until(sock, b"Z")
        assert [k for k, _ in answer] == [b"2", b"T", *[b"D"] * 4, b"s", b"Z"]
        assert _described(answer[1][1]) == typed
        _send(sock, (b"E", b"e\0" + struct.pack("!i", 4)), SYNC)
        rest = _until(sock, b"Z")
        assert [k for k, _ in rest] == [*[b"D"] * 3, b"C", b"Z"]
        assert [body[-1:] for k, body in rest if k == b"D"] == [b"5", b"4", b"3"]  # users 5 to 7
        # described, then executed whole without a row limit: refused past the cap, as before
        _send(sock, _bind(b"", b"s"), (b"D", b"P\0"), (b"E", b"\0\0\0\0\0"), SYNC)
        assert b"C54000" in _until(sock, b"Z")[-2][1]


def test_an_array_parameter_sent_in_binary_is_read_as_its_text_would_be(served: Served) -> None:
    # pgx and Npgsql send a list bound to `$1::int[]` in binary, as the type they are told
    with _started(served.port) as sock:
        query = b"SELECT user_id FROM customer_ratings WHERE user_id = ANY($1::int[]) ORDER BY 1\0"
        _send(sock, (b"P", b"a\0" + query + b"\0\0"), (b"D", b"Sa\0"), SYNC)
        described = _until(sock, b"Z")
        assert described[1] == (b"t", struct.pack("!hI", 1, 1007))  # int4[], as PostgreSQL infers it
        elements = [struct.pack("!ii", 4, 2), struct.pack("!i", -1), struct.pack("!ii", 4, 5)]  # 2, NULL, 5
        array = struct.pack("!iiIii", 1, 1, 23, 3, 1) + b"".join(elements)
        bind = b"\0a\0" + struct.pack("!hhhi", 1, 1, 1, len(array)) + array + struct.pack("!h", 0)
        _send(sock, (b"B", bind), (b"E", b"\0\0\0\0\0"), SYNC)
        rows = _until(sock, b"Z")
        assert [body[6:] for kind, body in rows if kind == b"D"] == [b"2", b"5"]
        empty = struct.pack("!iiI", 0, 0, 23)
        bind = b"\0a\0" + struct.pack("!hhhi", 1, 1, 1, len(empty)) + empty + struct.pack("!h", 0)
        _send(sock, (b"B", bind), (b"E", b"\0\0\0\0\0"), SYNC)
        assert [k for k, _ in _until(sock, b"Z")] == [b"2", b"C", b"Z"]  # = ANY ('{}'): no row


def test_typed_time_literals_and_to_timestamp_filter_timestamps_as_postgresql_does(served: Served) -> None:
    _two_hours(served)  # 03:00 and 05:00 on 2026-01-31, UTC
    # SQLite read `timestamptz '...'` as a column named timestamptz; Superset's time filters
    # call TO_TIMESTAMP, which SQLite does not have
    assert served.rows("SELECT count(*) FROM hourly WHERE hour_start > timestamptz '2026-01-31 04:30Z'") == [
        "1"
    ]
    superset = "TO_TIMESTAMP('2026-01-31 04:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US')"
    assert served.rows(f"SELECT count(*) FROM hourly WHERE hour_start >= {superset}") == ["1"]  # noqa: S608
    assert served.rows("SELECT count(*) FROM hourly WHERE day = TO_DATE('2026-01-31', 'YYYY-MM-DD')") == ["2"]
    assert served.rows(
        "SELECT timestamp with time zone '2026-01-01 13:00+01', date '2026-01-02', to_timestamp(0)"
    ) == ["2026-01-01 12:00:00+00|2026-01-02|1970-01-01 00:00:00+00"]
    assert served.refused("SELECT to_timestamp('Jan 2026', 'Mon YYYY')") == "22007"
    with _connect(served, autocommit=True) as conn:
        cur = conn.execute(
            "SELECT timestamptz '2026-01-01 13:00Z', date '2026-01-02', to_date('2026-01-31', 'YYYY-MM-DD')"
        )
        assert [(d.name, d.type_code) for d in cur.description] == [
            ("timestamptz", 1184),
            ("date", 1082),
            ("to_date", 1082),
        ]
        assert cur.fetchone() == (
            datetime.datetime(2026, 1, 1, 13, tzinfo=datetime.UTC),
            datetime.date(2026, 1, 2),
            datetime.date(2026, 1, 31),
        )


def test_a_minus_before_an_interval_negates_every_part_of_it(served: Served) -> None:
    _two_hours(served)  # 03:00 and 05:00 on 2026-01-31, UTC
    # SQLite read `- interval '1 hour'` as minus a column named interval (42703)
    assert served.rows("SELECT -interval '1 hour', - interval '1 day 02:00', -interval '2 hours ago'") == [
        "-01:00:00|-1 days -02:00:00|02:00:00"
    ]
    assert served.rows("SELECT hour_start + -interval '1 hour' FROM hourly ORDER BY 1") == [
        "2026-01-31 02:00:00+00",
        "2026-01-31 04:00:00+00",
    ]
    assert served.rows(
        "SELECT now() - -interval '1 hour' > now(), (-interval '1 hour') < interval '0 s'"
    ) == ["t|t"]


def test_like_is_case_sensitive_with_a_backslash_escape_and_ilike_is_not(served: Served) -> None:
    # SQLite's LIKE matched 'gold' to 'Gold%' and had no ILIKE: other rows than PostgreSQL's
    assert served.rows("SELECT count(*) FROM customer_ratings WHERE club_status LIKE 'Gold%'") == ["0"]
    assert served.rows("SELECT count(*) FROM customer_ratings WHERE club_status LIKE 'gold%'") == ["3"]
    assert served.rows("SELECT count(*) FROM customer_ratings WHERE club_status ILIKE 'GOLD%'") == ["3"]
    assert served.rows("SELECT count(*) FROM customer_ratings WHERE club_status NOT ILIKE 'g%'") == ["3"]
    assert served.rows(
        "SELECT 'a_c' LIKE 'a\\_c', 'abc' LIKE 'a\\_c', club_status ILIKE 'P%'"
        " FROM customer_ratings WHERE user_id = 7"
    ) == ["t|f|t"]
    assert served.refused("SELECT 'a' LIKE 'a\\'") == "22025"
