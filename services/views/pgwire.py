"""The views over PostgreSQL's wire protocol (version 3), read only: `psql -h 127.0.0.1 -p 6875
-c "SELECT * FROM customer_ratings WHERE user_id = 42"`, or any client that sends simple
queries. What a query may be is `sql`'s to say; this module speaks the protocol.

- Start-up: an SSL or GSS encryption request is answered "no" (the service listens on
  loopback by default; put a TLS proxy in front to serve a network). With VIEWS_TOKEN set, the
  client must give it as its password (cleartext, as over the HTTP API's bearer header);
  without it, any user name is let in.
- Simple queries only, one statement each. The extended protocol (Parse, Bind, Execute) is
  refused with SQLSTATE 0A000 until the client's Sync.
- Every refusal is an ErrorResponse with PostgreSQL's SQLSTATE: 25006 for a write, 54000 for
  a result over VIEWS_PG_MAX_ROWS, 57014 for a query over VIEWS_PG_TIMEOUT_S, 53300 for a
  connection over VIEWS_PG_MAX_CONNECTIONS, 28P01 for a wrong password.
"""

import asyncio
import contextlib
import hmac
import logging
import os
import secrets
import struct
from dataclasses import dataclass

from services.views import catalog
from services.views.sql import Result, SqlError, SqlReader

__all__ = [
    "CANCEL_REQUEST",
    "GSSENC_REQUEST",
    "MAX_MESSAGE_BYTES",
    "MAX_STARTUP_BYTES",
    "PROTOCOL_V3",
    "SERVER_VERSION",
    "SSL_REQUEST",
    "PgServer",
    "PgSettings",
    "error",
    "ready",
    "result_messages",
]

log = logging.getLogger("views.pgwire")

PROTOCOL_V3 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_STARTUP_BYTES = 10_000
MAX_MESSAGE_BYTES = 200_000  # a query's text, with room over sql's own limit
SERVER_VERSION = "15.0 (ratings views)"  # what psql reads to choose its catalog queries
_EXTENDED = set(b"PBDECHF")  # Parse, Bind, Describe, Execute, Close, Flush, FunctionCall


@dataclass(frozen=True)
class PgSettings:
    host: str
    port: int
    max_connections: int
    startup_timeout_s: float
    token: bytes | None  # the password a client must give; None: none asked


class _Closed(Exception):
    """The client went away, or broke the protocol: the connection ends."""


def _message(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + struct.pack("!I", len(payload) + 4) + payload


def _cstr(text: str) -> bytes:
    return text.encode().replace(b"\0", b"") + b"\0"


def error(sqlstate: str, text: str, severity: str = "ERROR") -> bytes:
    fields = b"S" + _cstr(severity) + b"V" + _cstr(severity) + b"C" + _cstr(sqlstate) + b"M" + _cstr(text)
    return _message(b"E", fields + b"\0")


def ready() -> bytes:
    return _message(b"Z", b"I")


def result_messages(result: Result) -> bytes:
    """RowDescription, a DataRow per row, CommandComplete."""
    head = struct.pack("!H", len(result.columns))
    for c in result.columns:
        head += _cstr(c.name) + struct.pack("!IhIhih", 0, 0, c.oid, c.size, -1, 0)
    out = [_message(b"T", head)]
    for row in result.rows:
        cells = [struct.pack("!H", len(row))]
        for value in row:
            if value is None:
                cells.append(struct.pack("!i", -1))
            else:
                data = value.encode()
                cells.append(struct.pack("!i", len(data)) + data)
        out.append(_message(b"D", b"".join(cells)))
    out.append(_message(b"C", _cstr(f"SELECT {len(result.rows)}")))
    return b"".join(out)


class PgServer:
    """Listens for PostgreSQL clients and answers their queries from `reader`, each query in
    a worker thread (a long one never holds the event loop, nor the HTTP pulls), but a pull by
    key, answered on the event loop as an HTTP pull is."""

    def __init__(self, reader: SqlReader, settings: PgSettings) -> None:
        self.reader = reader
        self.settings = settings
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        s = self.settings
        self._server = await asyncio.start_server(self._client, s.host, s.port, limit=MAX_MESSAGE_BYTES)
        log.info("serving the PostgreSQL wire protocol on %s:%d (read only)", s.host, self.port)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            async with asyncio.timeout(self.settings.startup_timeout_s):
                started = await self._startup(reader, writer)
            if started:
                await self._queries(reader, writer)
        except (_Closed, TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.connections -= 1
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _startup(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """The start-up exchange; False when the client is not let in (the reason sent)."""
        while True:
            (length,) = struct.unpack("!I", await reader.readexactly(4))
            if not 8 <= length <= MAX_STARTUP_BYTES:
                raise _Closed
            payload = await reader.readexactly(length - 4)
            (code,) = struct.unpack("!I", payload[:4])
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                writer.write(b"N")  # no encryption here: the client may go on in the clear
                continue
            if code == CANCEL_REQUEST:
                raise _Closed  # queries end at their own time limit
            if code != PROTOCOL_V3:
                writer.write(error("08P01", f"protocol {code >> 16}.{code & 0xFFFF} is not served; 3.0 is"))
                await writer.drain()
                return False
            break
        if self.connections > self.settings.max_connections:
            cap = self.settings.max_connections
            writer.write(error("53300", f"more than {cap} connections (VIEWS_PG_MAX_CONNECTIONS)", "FATAL"))
            await writer.drain()
            return False
        params = payload[4:].split(b"\0")
        user = dict(zip(params[0::2], params[1::2], strict=False)).get(b"user", b"").decode(errors="replace")
        if self.settings.token is not None:
            writer.write(_message(b"R", struct.pack("!I", 3)))  # cleartext password, please
            await writer.drain()
            kind, body = await _read_message(reader)
            given = body.rstrip(b"\0") if kind == b"p" else b""
            if not hmac.compare_digest(given, self.settings.token):
                writer.write(error("28P01", f'password authentication failed for user "{user}"', "FATAL"))
                await writer.drain()
                log.warning("a PostgreSQL client gave a wrong password (user %r)", user)
                return False
        out = [_message(b"R", struct.pack("!I", 0))]
        for name, value in (
            ("server_version", SERVER_VERSION),
            ("server_encoding", "UTF8"),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("integer_datetimes", "on"),
            ("standard_conforming_strings", "on"),
            ("TimeZone", "UTC"),
            ("default_transaction_read_only", "on"),
        ):
            out.append(_message(b"S", _cstr(name) + _cstr(value)))
        out.append(_message(b"K", struct.pack("!II", os.getpid() & 0x7FFFFFFF, secrets.randbits(31))))
        out.append(ready())
        writer.write(b"".join(out))
        await writer.drain()
        return True

    async def _queries(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            kind, body = await _read_message(reader)
            if kind == b"X":  # Terminate
                return
            if kind == b"Q":
                writer.write(await self._answer(body))
            elif kind[0] in _EXTENDED:
                writer.write(error("0A000", "the extended query protocol is not served: send simple queries"))
                while kind != b"S":  # the client's Sync ends the refused exchange
                    kind, _ = await _read_message(reader)
                writer.write(ready())
            elif kind == b"S":
                writer.write(ready())
            else:
                writer.write(error("08P01", f"message {kind!r} is not served"))
                writer.write(ready())
            await writer.drain()

    async def _answer(self, body: bytes) -> bytes:
        try:
            sql = body.rstrip(b"\0").decode()
        except UnicodeDecodeError:
            return error("22021", "the query is not valid UTF-8") + ready()
        if not sql.strip().strip(";").strip():
            return _message(b"I") + ready()  # EmptyQueryResponse
        try:
            # psql's \d and \d NAME, then a pull by key on the event loop, as over HTTP;
            # anything else in a worker thread (two thread switches a query, each a wait for
            # the GIL on a busy host).
            if "pg_catalog." in sql:
                result = catalog.answer(sql, self.reader.tables())
            elif (found := self.reader.key_lookup(sql)) is not None:
                result = found
            else:
                result = await asyncio.to_thread(self.reader.query, sql)
        except SqlError as err:
            return error(err.sqlstate, str(err)) + ready()
        except Exception:  # a bug: the client is told, the session goes on
            log.exception("a PostgreSQL query failed: %.200s", sql)
            return error("XX000", "internal error: the service's log has it") + ready()
        return result_messages(result) + ready()


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readexactly(5)
    (length,) = struct.unpack("!I", head[1:])
    if not 4 <= length <= MAX_MESSAGE_BYTES:
        raise _Closed
    return head[:1], await reader.readexactly(length - 4)
