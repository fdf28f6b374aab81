"""The views over PostgreSQL's wire protocol (version 3), read only: `psql -h 127.0.0.1 -p 6875
-c "SELECT * FROM customer_ratings WHERE user_id = 42"`, or an application's driver (psycopg,
JDBC, pgx). What a query may be is `sql`'s to say, what a session's own statements (BEGIN, SET,
SHOW...) do is `session`'s; this module speaks the protocol.

- Start-up: an SSL or GSS encryption request is answered "no" (the service listens on
  loopback by default; put a TLS proxy in front to serve a network). With VIEWS_TOKEN set, the
  client must give it as its password (cleartext, as over the HTTP API's bearer header);
  without it, any user name is let in.
- Simple queries, one statement each, and the extended protocol (Parse, Bind, Describe,
  Execute, Close, Sync: what psycopg, JDBC and pgx send), with `$1`, `$2`... parameters in text
  or binary (`portals`) and rows in text or binary. A portal executed with a row limit sends
  that many rows, then PortalSuspended, as PostgreSQL does; first executed so, its rows are
  read from one snapshot a page at a time (any number of them, as a cursor's). A connection
  holds at most MAX_PREPARED_BYTES of prepared statements and MAX_PORTALS portals (SQLSTATE
  53000 past them). After an error in the extended protocol, messages are skipped until the client's Sync.
- Every ReadyForQuery carries the session's transaction state (idle, in a transaction, or in
  a failed one), as drivers that open a transaction before their first query expect.
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
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from services.views import catalog, cursors, exports, plans, subscription, timestamps
from services.views.portals import (
    Portal,
    Statement,
    bound,
    data_rows,
    inferred_types,
    parameter_count,
    parameter_description,
    read_bind,
    read_cstr,
    read_parse,
    row_description,
)
from services.views.session import Session, reported, time_zone_refusal
from services.views.sql import (
    PAST_DEADLINE,
    SETTINGS,
    Column,
    Params,
    Result,
    SqlError,
    SqlReader,
    Stream,
    first_word,
    pg_column,
)

__all__ = [
    "CANCEL_REQUEST",
    "GSSENC_REQUEST",
    "MAX_MESSAGE_BYTES",
    "MAX_STARTUP_BYTES",
    "PROTOCOL_V3",
    "SSL_REQUEST",
    "PgServer",
    "PgSettings",
    "copy_messages",
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
_EXTENDED = set(b"PBDEC")  # Parse, Bind, Describe, Execute, Close
_HELD_BYTES = 65_536  # answers held for the Sync are written once they reach this size
_PAGE_ROWS = 1_000  # a COPY's rows read from the store at a time (at most sql.PAGE_BYTES of text)
# Statement texts whose parameters' types are kept (drivers send the same few texts again and
# again, as unnamed statements): the texts' bytes, at most.
_TYPED_TEXTS_BYTES = 1_048_576


@dataclass(frozen=True)
class PgSettings:
    host: str
    port: int
    max_connections: int
    startup_timeout_s: float
    token: bytes | None  # the password a client must give; None: none asked
    stream_timeout_s: float = 300  # a COPY TO STDOUT's or a query cursor's rows, read at most this long


class _Closed(Exception):
    """The client went away, or broke the protocol: the connection ends."""


def _message(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + struct.pack("!I", len(payload) + 4) + payload


def _cstr(text: str) -> bytes:
    return text.encode().replace(b"\0", b"") + b"\0"


def error(sqlstate: str, text: str, severity: str = "ERROR") -> bytes:
    fields = b"S" + _cstr(severity) + b"V" + _cstr(severity) + b"C" + _cstr(sqlstate) + b"M" + _cstr(text)
    return _message(b"E", fields + b"\0")


def ready(state: bytes = b"I") -> bytes:
    """ReadyForQuery: idle (I), in a transaction (T), or in a failed one (E)."""
    return _message(b"Z", state)


def _copy_out(count: int) -> bytes:
    """CopyOutResponse: `count` columns, all in text format."""
    return _message(b"H", struct.pack(f"!bh{count}h", 0, count, *([0] * count)))


def _copy_done(count: int) -> bytes:
    """CopyDone, then CommandComplete's COPY tag for `count` rows."""
    return _message(b"c") + _message(b"C", _cstr(f"COPY {count}"))


def copy_messages(result: Result, export: exports.Export) -> bytes:
    """CopyOutResponse (text, every column), a CopyData a line, CopyDone, CommandComplete."""
    out = [_copy_out(len(result.columns))]
    out.extend(_message(b"d", line) for line in exports.lines(result, export))
    out.append(_copy_done(len(result.rows)))
    return b"".join(out)


def result_messages(result: Result) -> bytes:
    """RowDescription, a DataRow per row, CommandComplete."""
    out = [_message(b"T", row_description(result.columns))]
    out.extend(_message(b"D", row) for row in data_rows(result, (), 0, len(result.rows)))
    out.append(_message(b"C", _cstr(result.tag(len(result.rows)))))
    return b"".join(out)


class PgServer:
    """Listens for PostgreSQL clients and answers their queries from `reader`, each query in
    a worker thread (a long one never holds the event loop, nor the HTTP pulls), but a pull by
    key, answered on the event loop as an HTTP pull is."""

    def __init__(
        self,
        reader: SqlReader,
        settings: PgSettings,
        follow: Callable[[str, bool], AsyncGenerator[str, None]] | None = None,
    ) -> None:
        """`follow`: a view's SSE stream (`api.Api.follow`; SqlError when the view is not
        served), for SUBSCRIBE; without it, SUBSCRIBE is refused."""
        self.reader = reader
        self.settings = settings
        self.follow = follow
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._pid = os.getpid() & 0x7FFFFFFF  # BackendKeyData's process id, with a secret per connection
        self._streaming: dict[int, asyncio.Task[None]] = {}  # secret -> a connection in a SUBSCRIBE
        self._cancelled: set[int] = set()  # the secrets a CancelRequest named
        # Each statement text's parameter types, as long as the views' columns stay the same.
        self._typed: dict[tuple[str, tuple[int, ...]], tuple[int, ...]] = {}
        self._typed_bytes = 0
        self._typed_for: object = None

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
        secret = secrets.randbits(31)
        try:
            async with asyncio.timeout(self.settings.startup_timeout_s):
                started = await self._startup(reader, writer, secret)
            if started is not None:
                await self._queries(reader, writer, secret, *started)
        except (_Closed, TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.connections -= 1
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _startup(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: int
    ) -> tuple[str, str] | None:
        """The start-up exchange: the session's TimeZone (the client's, as JDBC sends its JVM's,
        or UTC) and user name; None when the client is not let in (the reason sent)."""
        while True:
            (length,) = struct.unpack("!I", await reader.readexactly(4))
            if not 8 <= length <= MAX_STARTUP_BYTES:
                raise _Closed
            payload = await reader.readexactly(length - 4)
            (code,) = struct.unpack("!I", payload[:4])
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                writer.write(b"N")  # no encryption here: the client may go on in the clear
                continue
            if code == CANCEL_REQUEST:  # a SUBSCRIBE ends; queries end at their own time limit
                pid, named = struct.unpack_from("!II", payload, 4) if len(payload) >= 12 else (0, 0)
                task = self._streaming.get(named) if pid == self._pid else None
                if task is not None:
                    self._cancelled.add(named)
                    task.cancel()
                raise _Closed
            if code != PROTOCOL_V3:
                writer.write(error("08P01", f"protocol {code >> 16}.{code & 0xFFFF} is not served; 3.0 is"))
                await writer.drain()
                return None
            break
        if self.connections > self.settings.max_connections:
            cap = self.settings.max_connections
            writer.write(error("53300", f"more than {cap} connections (VIEWS_PG_MAX_CONNECTIONS)", "FATAL"))
            await writer.drain()
            return None
        params = payload[4:].split(b"\0")
        named = dict(zip(params[0::2], params[1::2], strict=False))
        user = named.get(b"user", b"").decode(errors="replace")
        # JDBC names its JVM's zone; libpq sends PGTZ as `timezone` (a setting's name in any case)
        zone = next((v for k, v in named.items() if k.lower() == b"timezone"), b"").decode(errors="replace")
        zone = zone or "UTC"
        if (refusal := time_zone_refusal(zone)) is not None:
            writer.write(error("22023", refusal, "FATAL"))
            await writer.drain()
            return None
        if self.settings.token is not None:
            writer.write(_message(b"R", struct.pack("!I", 3)))  # cleartext password, please
            await writer.drain()
            kind, body = await _read_message(reader)
            given = body.rstrip(b"\0") if kind == b"p" else b""
            if not hmac.compare_digest(given, self.settings.token):
                writer.write(error("28P01", f'password authentication failed for user "{user}"', "FATAL"))
                await writer.drain()
                log.warning("a PostgreSQL client gave a wrong password (user %r)", user)
                return None
        out = [_message(b"R", struct.pack("!I", 0))]
        for name, value in reported(zone).items():
            out.append(_message(b"S", _cstr(name) + _cstr(value)))
        out.append(_message(b"K", struct.pack("!II", self._pid, secret)))
        out.append(ready())
        writer.write(b"".join(out))
        await writer.drain()
        return zone, user[:63]

    async def _queries(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        secret: int,
        zone: str = "UTC",
        user: str = "",
    ) -> None:
        session = Session(secret, zone, user)
        SETTINGS.set(session.setting)  # current_setting(): this connection's task and its threads
        timestamps.ZONE.set(session.time_zone)  # so are the zone's timestamps
        held = _Held(writer)  # the extended protocol's answers, sent together at Sync or Flush
        try:
            while True:
                kind, body = await _read_message(reader)
                if kind == b"X":  # Terminate
                    return
                if kind[0] in _EXTENDED:
                    if not session.skipping:
                        held.add(await self._extended(session, kind, body, held))
                    if held.size < _HELD_BYTES:
                        continue  # as PostgreSQL: one write for the exchange, not one a message
                if kind == b"Q":  # a simple query after messages not synced: theirs first
                    held.write()
                held.add(await self._answer(session, kind, body, writer))
                held.write()
                await writer.drain()
        finally:
            session.close_cursors()  # their subscribers leave with the client
            session.close_portals()  # their streams' snapshots too

    async def _answer(
        self, session: Session, kind: bytes, body: bytes, writer: asyncio.StreamWriter
    ) -> bytes:
        """The answer to a message other than the extended protocol's (whose answers are held
        until this one): a simple query (a subscription writes its own), Sync, Flush, or one
        that is not served."""
        if kind == b"Q":
            session.skipping = False
            try:
                sql = body.rstrip(b"\0").decode()
            except UnicodeDecodeError:
                session.failed()
                return error("22021", "the query is not valid UTF-8") + ready(session.state)
            if (asked := subscription.parse(sql)) is not None:
                await self._subscribe(session, asked, writer)
                return b""
            return await self._simple(session, sql, writer)
        if kind == b"S":  # Sync: the end of an extended exchange
            session.skipping = False
            session.close_portal("")
            return ready(session.state)
        if kind == b"H" or kind[0] in _EXTENDED:  # Flush, or answers past the bound: nothing more
            return b""
        session.failed()  # FunctionCall, CopyData...: refused, and the client may go on
        return error("0A000" if kind == b"F" else "08P01", f"message {kind!r} is not served") + ready(
            session.state
        )

    async def _simple(self, session: Session, sql: str, writer: asyncio.StreamWriter) -> bytes:
        if not sql.strip().strip(";").strip():
            return _message(b"I") + ready(session.state)  # EmptyQueryResponse
        answer: str | Result | bytes  # a command's tag, rows, or what ends the rows written
        status = b""  # a ParameterStatus of a reported setting the command changed
        try:
            if (export := exports.parse(sql)) is not None:
                answer = await self._export(session, export, {}, writer)
            elif isinstance(asked := cursors.parse(sql), cursors.Fetch) and (
                fetched := _query_rows(session, asked)
            ):
                answer = await self._fetched(session, fetched, asked, (), writer, describe=True)
            elif asked is not None:
                answer = await self._cursor(session, asked, {})
            elif _about_session(session, sql):
                answer, status = _command(session, sql)
            else:
                session.refuse_if_aborted()
                answer = await self._result(sql, {}, session.statement_timeout_s)
        except SqlError as err:
            session.failed()
            return error(err.sqlstate, str(err)) + ready(session.state)
        except ConnectionError:  # the client went away part way through a COPY's or a FETCH's rows
            raise
        except Exception:  # a bug: the client is told, the session goes on
            log.exception("a PostgreSQL query failed: %.200s", sql)
            session.failed()
            return error("XX000", "internal error: the service's log has it") + ready(session.state)
        if isinstance(answer, str):  # a command's tag
            return status + _message(b"C", _cstr(answer)) + ready(session.state)
        return (answer if isinstance(answer, bytes) else result_messages(answer)) + ready(session.state)

    async def _subscribe(
        self, session: Session, asked: subscription.Subscribe, writer: asyncio.StreamWriter
    ) -> None:
        """COPY (SUBSCRIBE ...) TO STDOUT: the view's rows and changes as COPY rows, until the
        client cancels (57014, then the session goes on), goes away, or the stream ends (57000)."""
        try:
            session.refuse_if_aborted()
            if self.follow is None:
                raise SqlError("0A000", "SUBSCRIBE is not served here")
            columns = self.reader.tables().get(asked.view, ())
            stream = self.follow(asked.view, asked.snapshot)  # SqlError for a view not served
            try:
                with self._cancellable(session):
                    writer.write(_copy_out(1 + len(columns)))  # mz_state, then the view's columns
                    ended = await self._copied(stream, columns, writer)
            finally:
                await stream.aclose()  # the subscriber leaves the hub
            raise SqlError("57000", ended)
        except SqlError as err:
            session.failed()
            writer.write(error(err.sqlstate, str(err)) + ready(session.state))

    async def _export(
        self, session: Session, export: exports.Export, params: Params, writer: asyncio.StreamWriter
    ) -> bytes:
        """COPY ... TO STDOUT: CopyOutResponse and the rows as CopyData, written as they are read
        from the store, a page at a time (a view of any size, never held whole); then CopyDone
        and CommandComplete, returned to go out with what follows. An error part way (the
        client's cancel, VIEWS_PG_STREAM_TIMEOUT_S) follows the rows already sent, as
        PostgreSQL's does."""
        session.refuse_if_aborted()
        rows = await self._rows(export.sql, params)
        if isinstance(rows, Result):  # the catalog's few rows, or a pull by key
            return copy_messages(rows, export)
        count = 0
        try:
            with self._cancellable(session):
                try:
                    async with asyncio.timeout_at(rows.deadline):  # the loop's clock is monotonic's
                        writer.write(_copy_out(len(rows.columns)))
                        if export.header:
                            writer.write(_message(b"d", exports.header(rows.columns, export)))
                        plain = replace(export, header=False)
                        while page := await asyncio.to_thread(rows.page, _PAGE_ROWS):
                            lines = exports.lines(Result(rows.columns, page), plain)
                            writer.write(b"".join(_message(b"d", line) for line in lines))
                            count += len(page)
                            await writer.drain()  # the client reads as fast as it likes, and no faster
                except TimeoutError:
                    raise SqlError("57014", PAST_DEADLINE) from None
        finally:
            rows.close()
        return _copy_done(count)

    @contextlib.contextmanager
    def _cancellable(self, session: Session) -> Iterator[None]:
        """A statement that waits for a view's changes (SUBSCRIBE, a cursor's FETCH) or a
        client's reads (COPY TO STDOUT): a CancelRequest naming the session ends it with 57014,
        and the session goes on."""
        task = asyncio.current_task()
        assert task is not None
        self._streaming[session.secret] = task
        try:
            yield
        except asyncio.CancelledError:
            if session.secret not in self._cancelled:
                raise  # the service stops
            task.uncancel()
            raise SqlError("57014", "canceling statement due to user request") from None
        finally:
            self._streaming.pop(session.secret, None)
            self._cancelled.discard(session.secret)

    @staticmethod
    async def _copied(
        stream: AsyncIterator[str], columns: tuple[Column, ...], writer: asyncio.StreamWriter
    ) -> str:
        """Writes the stream's rows and changes as CopyData until it ends; why it ended."""
        async for text in stream:
            found, ended = subscription.changes(text)
            writer.write(b"".join(_message(b"d", subscription.copy_line(data, columns)) for data in found))
            if ended is not None:
                return ended
            await writer.drain()
        return subscription.STREAM_ENDED

    async def _cursor(
        self,
        session: Session,
        asked: cursors.Declare | cursors.DeclareQuery | cursors.Fetch | cursors.Close,
        params: Params,
    ) -> str | Result:
        """DECLARE ... CURSOR (for SUBSCRIBE or a query), FETCH and CLOSE (`cursors`): a
        command's tag, or FETCH's rows. `params`: the DECLARE's query's, from its Bind."""
        session.refuse_if_aborted()
        if isinstance(asked, cursors.Close):
            session.close_cursors(asked.cursor)
            return "CLOSE CURSOR" if asked.cursor is not None else "CLOSE CURSOR ALL"
        if isinstance(asked, cursors.Fetch):
            cursor = session.cursor(asked.cursor)
            with self._cancellable(session):
                rows = await cursor.fetch(asked.count, self.reader.max_rows, asked.timeout_s)
                return Result(cursor.columns, rows, "FETCH")
        held = isinstance(asked, cursors.DeclareQuery) and asked.hold
        if session.state != b"T" and not held:
            raise SqlError("25P01", "DECLARE CURSOR can only be used in transaction blocks")
        if asked.cursor in session.cursors:
            raise SqlError("42P03", f'cursor "{asked.cursor}" already exists')
        if len(session.cursors) >= cursors.MAX_CURSORS:
            raise SqlError("53000", f"this connection has {cursors.MAX_CURSORS} cursors open: close some")
        if isinstance(asked, cursors.DeclareQuery):
            session.declare(asked.cursor, cursors.Rows(await self._rows(asked.sql, params), asked.hold))
            return "DECLARE CURSOR"
        if self.follow is None:
            raise SqlError("0A000", "SUBSCRIBE is not served here")
        columns = self.reader.tables().get(asked.view, ())
        stream = self.follow(asked.view, asked.snapshot)  # SqlError for a view not served
        session.declare(asked.cursor, cursors.Cursor(stream, columns))
        return "DECLARE CURSOR"

    async def _fetched(
        self,
        session: Session,
        rows: cursors.Rows,
        asked: cursors.Fetch,
        formats: Sequence[int],
        writer: asyncio.StreamWriter,
        *,
        describe: bool,
    ) -> bytes:
        """FETCH from a cursor over a query: RowDescription when `describe` (the simple
        protocol's), its rows as DataRows a page at a time, written as the client reads them (a
        count of any size, never held whole), then CommandComplete, returned to go out with what
        follows. An error part way (the client's cancel, the cursor's deadline) follows the rows
        already sent, as PostgreSQL's does."""
        head = _message(b"T", row_description(rows.columns)) if describe else b""  # with the first rows
        sent, head = await self._pages_out(session, rows, asked.count, formats, writer, head=head)
        return head + _message(b"C", _cstr(f"FETCH {sent}"))

    async def _pages_out(
        self,
        session: Session,
        rows: cursors.Rows,
        count: int | None,
        formats: Sequence[int],
        writer: asyncio.StreamWriter,
        *,
        head: bytes = b"",
    ) -> tuple[int, bytes]:
        """The next `count` of `rows` (None: all) as DataRows, written a page at a time as the
        client reads them, `head` with the first: how many went, and `head` if none did."""
        sent = 0
        with self._cancellable(session):
            async with contextlib.aclosing(rows.pages(count)) as pages:
                async for page in pages:
                    data = data_rows(Result(rows.columns, page), formats, 0, len(page))
                    writer.write(head + b"".join(_message(b"D", row) for row in data))
                    head, sent = b"", sent + len(page)
                    await writer.drain()  # the client reads as fast as it likes, and no faster
        return sent, head

    async def _result(self, sql: str, params: Params, timeout_s: float | None = None) -> Result:
        """psql's \\d and \\d NAME, then a pull by key on the event loop, as over HTTP; anything else
        in a worker thread (two thread switches a query, each a wait for the GIL on a busy host),
        for at most `timeout_s` (the session's statement_timeout) when it is set."""
        found = self._at_hand(sql, params)
        if found is not None:
            return found
        if (asked := plans.parse(sql)) is not None:
            return await asyncio.to_thread(plans.explain, self.reader, asked, params)
        return await asyncio.to_thread(self.reader.query, sql, params, timeout_s)

    async def _rows(self, sql: str, params: Params) -> Result | Stream:
        """A COPY's or a query cursor's rows: the catalog's and a pull by key's at once, any
        other query's as a stream of its rows, opened in a worker thread."""
        found = self._at_hand(sql, params)
        if found is not None:
            return found
        lasts = self.settings.stream_timeout_s
        return await asyncio.to_thread(self.reader.stream, sql, params, lasts_s=lasts)

    def _at_hand(self, sql: str, params: Params) -> Result | None:
        """The answer of a catalog's query or a pull by key, made on the event loop; None for
        any other query."""
        if catalog.asks(sql):
            return catalog.answer(
                sql, self.reader.tables(), self.reader.keys(), params, self.reader.definitions()
            )
        return self.reader.key_lookup(sql, params)

    async def _extended(self, session: Session, kind: bytes, body: bytes, held: "_Held") -> bytes:
        """The answer to one message of the extended protocol; on an error, the error, and the
        messages that follow are skipped until Sync. `held`: the answers before it, not sent
        yet (an Execute of COPY sends them before its rows)."""
        handlers = {
            b"P": self._parse,
            b"B": self._bind,
            b"D": self._describe,
            b"C": self._close,
        }
        try:
            if kind == b"E":
                return await self._execute(session, body, held)
            return await handlers[kind](session, body)
        except SqlError as err:
            session.skipping = True
            session.failed()
            return error(err.sqlstate, str(err))
        except ConnectionError:  # the client went away part way through a COPY's or a FETCH's rows
            raise
        except Exception:  # a bug: the client is told, the session goes on after its Sync
            log.exception("a PostgreSQL message %r failed", kind)
            session.skipping = True
            session.failed()
            return error("XX000", "internal error: the service's log has it")

    async def _parse(self, session: Session, body: bytes) -> bytes:
        parsed = read_parse(body)
        session.prepare(parsed.name, Statement(parsed.sql, self._parameter_types(parsed.sql, parsed.types)))
        return _message(b"1")  # ParseComplete

    def _parameter_types(self, sql: str, types: tuple[int, ...]) -> tuple[int, ...]:
        """The statement's parameters' types: as declared, else as its text says where it does.
        Kept by text while the views stay the same: it took a third of a Parse's time."""
        infos = self.reader.infos()
        if infos is not self._typed_for:  # a view came, went or changed its columns
            self._typed, self._typed_bytes, self._typed_for = {}, 0, infos
        if (known := self._typed.get((sql, types))) is not None:
            return known
        count = parameter_count(sql, types)
        declared = types + (0,) * (count - len(types))
        if 0 in declared:
            columns = {name: pg_column(name, kind).oid for name, kind in self.reader.column_kinds().items()}
            inferred = inferred_types(sql, columns)
            declared = tuple(oid or inferred.get(i + 1, 0) for i, oid in enumerate(declared))
        if self._typed_bytes + len(sql) > _TYPED_TEXTS_BYTES:
            self._typed, self._typed_bytes = {}, 0
        self._typed[sql, types] = declared
        self._typed_bytes += len(sql)
        return declared

    async def _bind(self, session: Session, body: bytes) -> bytes:
        bind = read_bind(body)
        statement = self._statement(session, bind.statement)
        described = session.described.get(bind.statement)
        session.open(bind.portal, Portal(statement, bound(statement, bind), bind.result_formats, described))
        return _message(b"2")  # BindComplete

    @staticmethod
    async def _close(session: Session, body: bytes) -> bytes:
        what, name = body[:1], read_cstr(body, 1)[0]
        if what == b"S":
            session.close_statement(name)
        else:
            session.close_portal(name)
        return _message(b"3")  # CloseComplete

    @staticmethod
    def _statement(session: Session, name: str) -> Statement:
        if name not in session.statements:
            raise SqlError("26000", f'prepared statement "{name}" does not exist')
        return session.statements[name]

    async def _describe(self, session: Session, body: bytes) -> bytes:
        what, name = body[:1], read_cstr(body, 1)[0]
        if what == b"S":
            statement = self._statement(session, name)
            described = _message(b"t", parameter_description(statement))
            if (columns := self._described(session, statement.sql)) is not None:
                return described + (_message(b"T", row_description(columns)) if columns else _message(b"n"))
            columns = await asyncio.to_thread(self.reader.describe, statement.sql)
            session.described[name] = columns
            return described + _message(b"T", row_description(columns))
        if name and name not in session.portals and name in session.cursors:  # a cursor is a portal
            return _message(b"T", row_description(session.cursors[name].columns))
        portal = self._portal(session, name)
        known = self._described(session, portal.statement.sql)
        if known is not None:
            return _message(b"T", row_description(known, portal.result_formats)) if known else _message(b"n")
        if portal.result is None and portal.rows is None:
            # Run once, here, within the cap; past it, its stream is opened now and typed by its
            # first rows, as within the cap, and an Execute with a row limit (JDBC's fetch size,
            # after this Describe) reads on from it; one without is refused, as before.
            try:
                await self._ran(session, portal)
            except SqlError as err:
                if err.sqlstate != "54000":
                    raise
                if portal.ahead is None:
                    portal.ahead = cursors.Rows(
                        await self._rows(portal.statement.sql, portal.params), hold=False
                    )
                    if (told := _told(portal.ahead.columns, portal.described)) is not None:
                        portal.ahead.columns = told  # what the statement's Describe said
                portal.described = portal.ahead.columns
                return _message(b"T", row_description(portal.described, portal.result_formats))
        result = await self._ran(session, portal)
        return _message(b"T", row_description(result.columns, portal.result_formats))

    def _described(self, session: Session, sql: str) -> tuple[Column, ...] | None:
        """The columns of what is answered without the views' store (none: NoData): an empty
        statement, one about the session (SHOW's one column), psql's catalog queries; None for a
        query of the views."""
        if not sql.strip().strip(";").strip():
            return ()
        if exports.parse(sql) is not None:  # COPY TO STDOUT: no rows, CopyData
            return ()
        if (asked := cursors.parse(sql)) is not None:  # FETCH's columns are its cursor's
            return session.cursor(asked.cursor).columns if isinstance(asked, cursors.Fetch) else ()
        if _about_session(session, sql):
            shown = session.command(sql) if first_word(sql) == "SHOW" else None  # no other has rows
            return shown.columns if isinstance(shown, Result) else ()
        if catalog.asks(sql):
            return catalog.answer(sql, self.reader.tables()).columns
        return plans.COLUMNS if plans.parse(sql) is not None else None  # EXPLAIN's QUERY PLAN

    @staticmethod
    def _portal(session: Session, name: str) -> Portal:
        portal = session.portals.get(name)
        if portal is None:
            raise SqlError("34000", f'portal "{name}" does not exist')
        return portal

    async def _ran(self, session: Session, portal: Portal) -> Result:
        """The portal's rows, run once (at its Describe or its first Execute)."""
        if portal.result is None:
            session.refuse_if_aborted()
            result = await self._result(portal.statement.sql, portal.params, session.statement_timeout_s)
            if (told := _told(result.columns, portal.described)) is not None:
                result = replace(result, columns=told)
            portal.result = result
        return portal.result

    async def _execute(self, session: Session, body: bytes, held: "_Held") -> bytes:
        name, at = read_cstr(body, 0)
        (limit,) = struct.unpack_from("!i", body, at) if len(body) >= at + 4 else (0,)
        portal = self._portal(session, name)
        sql = portal.statement.sql
        if not sql.strip().strip(";").strip():
            return _message(b"I")  # EmptyQueryResponse
        if (export := exports.parse(sql)) is not None:
            held.write()  # the exchange's answers so far, then the rows
            return await self._export(session, export, portal.params, held.writer)
        if portal.result is None and (asked := cursors.parse(sql)) is not None:
            if limit <= 0 and isinstance(asked, cursors.Fetch) and (fetched := _query_rows(session, asked)):
                held.write()  # the exchange's answers so far, then the rows
                return await self._fetched(
                    session, fetched, asked, portal.result_formats, held.writer, describe=False
                )
            answer = await self._cursor(session, asked, portal.params)
            if isinstance(answer, str):
                return _message(b"C", _cstr(answer))
            portal.result = answer
        if _about_session(session, sql) and portal.result is None:
            answer, status = _command(session, sql)
            if isinstance(answer, str):
                return status + _message(b"C", _cstr(answer))
            portal.result = answer
        return await self._rows_out(session, portal, limit, held)

    async def _rows_out(self, session: Session, portal: Portal, limit: int, held: "_Held") -> bytes:
        """An Execute's rows: `limit` of them (0: the rest), then PortalSuspended or
        CommandComplete; streamed (`_paged`) for a query first executed with a row limit."""
        if portal.result is None and (limit > 0 or portal.rows is not None):
            held.write()  # the exchange's answers so far, then the rows
            return await self._paged(session, portal, limit, held.writer)
        result = await self._ran(session, portal)
        end = len(result.rows) if limit <= 0 else min(len(result.rows), portal.sent + limit)
        rows = data_rows(result, portal.result_formats, portal.sent, end)
        out = [_message(b"D", row) for row in rows]
        portal.sent = end
        if end < len(result.rows):
            out.append(_message(b"s"))  # PortalSuspended: Execute again for more
        else:
            out.append(_message(b"C", _cstr(result.tag(len(rows)))))
            portal.result, portal.sent = replace(result, rows=[]), 0  # run out: an Execute again gets none
        return b"".join(out)

    async def _paged(
        self, session: Session, portal: Portal, limit: int, writer: asyncio.StreamWriter
    ) -> bytes:
        """An Execute with a row limit (JDBC's fetch size, asyncpg's cursors): `limit` rows of
        the portal's query (0: the rest), read from one snapshot a page at a time as the client
        reads them, never the whole result held (nor capped at VIEWS_PG_MAX_ROWS); then
        PortalSuspended, or CommandComplete once the rows have run out."""
        if portal.rows is None:
            session.refuse_if_aborted()
            rows, portal.ahead = portal.ahead, None  # opened by a Describe past the cap
            if rows is None:
                rows = cursors.Rows(await self._rows(portal.statement.sql, portal.params), hold=False)
            if (told := _told(rows.columns, portal.described)) is not None:
                rows.columns = told
            portal.rows = rows
        rows = portal.rows
        sent, _ = await self._pages_out(
            session, rows, limit if limit > 0 else None, portal.result_formats, writer
        )
        if limit > 0 and sent == limit:
            return _message(b"s")  # PortalSuspended: Execute again for more
        portal.close()
        portal.result = Result(rows.columns, [])  # run out: an Execute again gets none
        return _message(b"C", _cstr(portal.result.tag(sent)))


def _told(columns: tuple[Column, ...], told: tuple[Column, ...] | None) -> tuple[Column, ...] | None:
    """The columns the client was told (`told`), for rows that have `columns`: their types
    are kept when they are the same columns; None when nothing was told or the columns differ."""
    return told if told is not None and [c.name for c in told] == [c.name for c in columns] else None


class _Held:
    """Answers held to go out in one write (the extended protocol's, until Sync or Flush)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.size = 0
        self._parts: list[bytes] = []

    def add(self, answer: bytes) -> None:
        self._parts.append(answer)
        self.size += len(answer)

    def write(self) -> None:
        if self._parts:
            self.writer.write(b"".join(self._parts))
            self._parts, self.size = [], 0


def _query_rows(session: Session, asked: cursors.Fetch) -> cursors.Rows | None:
    """The cursor over a query a FETCH names (whose rows are written as they are read); None
    for a SUBSCRIBE's cursor, or in a failed transaction (where FETCH is refused as any other)."""
    if session.state == b"E":
        return None
    found = session.cursors.get(asked.cursor)
    return found if isinstance(found, cursors.Rows) else None


def _command(session: Session, sql: str) -> tuple[str | Result, bytes]:
    """`session.command(sql)`, and the ParameterStatus PostgreSQL sends before its tag when it
    changed TimeZone (a reported setting: JDBC follows it)."""
    before = session.settings["TimeZone"]
    answer = session.command(sql)
    now = session.settings["TimeZone"]
    return answer, _message(b"S", _cstr("TimeZone") + _cstr(now)) if now != before else b""


def _about_session(session: Session, sql: str) -> bool:
    """A statement the session answers (BEGIN, SET, SHOW of a setting...), not SHOW of the views."""
    return session.is_command(sql) and not catalog.asks(sql)


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readexactly(5)
    (length,) = struct.unpack("!I", head[1:])
    if not 4 <= length <= MAX_MESSAGE_BYTES:
        raise _Closed
    return head[:1], await reader.readexactly(length - 4)
