"""SUBSCRIBE through a cursor, as Materialize serves it to drivers that read a query's rows
rather than a COPY (JDBC, psycopg's cursors, any tool that sends SQL):

    BEGIN;
    DECLARE c CURSOR FOR SUBSCRIBE customer_ratings;     -- [WITH (SNAPSHOT = false)]
    FETCH ALL c;                                         -- FETCH 100 c WITH (timeout = '1s')
    ...
    COMMIT;                                              -- or CLOSE c

A cursor follows the view's stream (the one COPY (SUBSCRIBE ...) and `GET
/views/<name>/changes` give: the rows, then each change, gap-free, with their bounds). Each row
is `mz_state` (`upsert`, or `delete` with the key columns set and the others null), then the
view's columns, in their types (so a driver may ask for them in binary).

FETCH waits for at least one row (without a timeout, until one comes or the client cancels;
`timeout = '0s'`: not at all), then gives what has come, at most its count (ALL: at most
VIEWS_PG_MAX_ROWS). A stream the service ends (the view replaced by a new version, a subscriber
that fell too far behind) gives its rows up to there, then the next FETCH fails with 57000 and
why. A cursor lives in its transaction, as PostgreSQL's: DECLARE outside one is 25P01, and
COMMIT or ROLLBACK closes it.

A cursor over a query, as PostgreSQL's, for drivers that read a large result a page at a time
(psycopg's named cursors, SQLAlchemy's `stream_results`, pandas' `chunksize`):

    DECLARE c [NO SCROLL] CURSOR [WITH HOLD | WITHOUT HOLD] FOR SELECT ... ;  -- $1 in a driver's
    FETCH FORWARD 100 FROM c;  ...  CLOSE c;

The query runs at DECLARE, and FETCH hands its rows out in order, read from one snapshot of the
store as FETCH asks for them and written a page at a time as the client reads them: a result of
any size, a FETCH of any count (FETCH ALL too), their rows never all held. Only an Execute with a
row limit, which must hold a FETCH's rows to hand them out a few at a time, gives at most
VIEWS_PG_MAX_ROWS (one that would give more is refused with 54000 and the rows stay). A FETCH
left part way (canceled, the client gone) loses the cursor's place: its next FETCH fails with
57014. The cursor is closed VIEWS_PG_STREAM_TIMEOUT_S after its DECLARE. WITHOUT HOLD (the
default) needs a transaction and ends with it; WITH HOLD may be declared outside one and
outlives COMMIT (ROLLBACK of the transaction that declared it closes it). SCROLL and BINARY
cursors are refused (0A000): FETCH moves forward only, and a driver asks for binary rows in its
FETCH.
"""

import asyncio
import contextlib
import re
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from services.views import subscription
from services.views.sql import (
    IDENTIFIER,
    PAST_DEADLINE,
    Column,
    Result,
    SqlError,
    Stream,
    identifier,
    pg_column,
)

__all__ = [
    "MAX_CURSORS",
    "PAGE_ROWS",
    "Close",
    "Cursor",
    "Declare",
    "DeclareQuery",
    "Fetch",
    "Open",
    "Rows",
    "parse",
]

PAGE_ROWS = 1_000  # a FETCH's rows read from the store and written at a time
_PLACE_LOST = "a FETCH of this cursor was left part way: its place is lost"
MAX_CURSORS = 4  # a connection's cursors at once: a SUBSCRIBE's is one of the service's
# subscribers, a query's holds a snapshot of the store (and a page of its rows)
_AHEAD = 4  # pages of the stream read ahead of the FETCHes; then the stream waits (and its
# subscriber's queue, bounded, fills: a client that stops fetching is cut off as over SSE)
_NAME = IDENTIFIER
_DECLARE = re.compile(
    rf"\s*DECLARE\s+{_NAME}\s+((?:[A-Za-z]+\s+)*?)CURSOR\s+(?:(WITH|WITHOUT)\s+HOLD\s+)?FOR\s+(.*)",
    re.IGNORECASE | re.DOTALL,
)
_SUBSCRIBE = re.compile(
    rf"SUBSCRIBE\s+(?:TO\s+)?{_NAME}\s*(?:WITH\s*\(\s*SNAPSHOT\s*=?\s*(TRUE|FALSE)\s*\))?\s*;?\s*",
    re.IGNORECASE,
)
_OPTIONS = {"", "no scroll", "asensitive", "insensitive", "asensitive no scroll", "insensitive no scroll"}
_FETCH = re.compile(
    rf"\s*FETCH\s+(?:FORWARD\s+)?(?:(ALL|[0-9]+)\s+)?(?:(?:FROM|IN)\s+)?{_NAME}"
    r"\s*(?:WITH\s*\(\s*TIMEOUT\s*=?\s*'([^']*)'\s*\))?\s*;?\s*",
    re.IGNORECASE,
)
_CLOSE = re.compile(rf"\s*CLOSE\s+(ALL|{_NAME})\s*;?\s*", re.IGNORECASE)
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*")
_UNITS_S = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "": 1.0, "s": 1.0, "sec": 1.0}
_UNITS_S |= {"secs": 1.0, "second": 1.0, "seconds": 1.0, "min": 60.0, "mins": 60.0, "minute": 60.0}
_UNITS_S |= {"minutes": 60.0}


@dataclass(frozen=True)
class Declare:
    cursor: str
    view: str
    snapshot: bool


@dataclass(frozen=True)
class DeclareQuery:
    cursor: str
    sql: str  # the query, as a query of the views is given (its $1... bound by the driver)
    hold: bool  # WITH HOLD: it outlives its transaction's COMMIT


@dataclass(frozen=True)
class Fetch:
    cursor: str
    count: int | None  # None: ALL
    timeout_s: float | None  # None: until a row comes


@dataclass(frozen=True)
class Close:
    cursor: str | None  # None: ALL


def _seconds(text: str) -> float:
    asked = _DURATION.fullmatch(text)
    if asked is None or asked.group(2).lower() not in _UNITS_S:
        raise SqlError("22007", f"FETCH's timeout {text!r}: a duration such as '1s' or '500ms'")
    return float(asked.group(1)) * _UNITS_S[asked.group(2).lower()]


def parse(sql: str) -> Declare | DeclareQuery | Fetch | Close | None:
    """DECLARE ... CURSOR, FETCH or CLOSE; None for any other statement; SqlError for a cursor
    of a kind not served."""
    if not sql.lstrip()[:7].upper().startswith(("DECLARE", "FETCH", "CLOSE")):
        return None  # at once: every query of the views asks this first
    if (declared := _DECLARE.fullmatch(sql)) is not None:
        return _declared(
            identifier(declared.group(1)), declared.group(2), declared.group(3), declared.group(4)
        )
    if (fetched := _FETCH.fullmatch(sql)) is not None:
        count = fetched.group(1)
        timeout = fetched.group(3)
        return Fetch(
            identifier(fetched.group(2)),
            None if count is not None and count.upper() == "ALL" else int(count or 1),
            None if timeout is None else _seconds(timeout),
        )
    if (closed := _CLOSE.fullmatch(sql)) is not None:
        return Close(None if closed.group(1).upper() == "ALL" else identifier(closed.group(1)))
    return None


def _declared(cursor: str, options: str, hold: str | None, query: str) -> Declare | DeclareQuery:
    options = " ".join(options.split()).lower()
    if options not in _OPTIONS:
        raise SqlError(
            "0A000",
            f"{options.upper()} cursors are not served: a cursor moves forward only, "
            "its rows in the format FETCH asks",
        )
    held = (hold or "without").lower() == "with"
    if (subscribed := _SUBSCRIBE.fullmatch(query)) is None:
        return DeclareQuery(cursor, query, held)
    if held:
        raise SqlError("0A000", "a cursor FOR SUBSCRIBE lives in its transaction: WITH HOLD is not served")
    snapshot = (subscribed.group(2) or "true").lower() == "true"
    return Declare(cursor, identifier(subscribed.group(1)), snapshot)


class Rows:
    """A query's rows, handed out in order by FETCH: the few of a catalog's query or a pull by
    key, held; any other query's read from its stream (`sql.Stream`: one snapshot of the store)
    as FETCH asks for them. A stream still open at its deadline (VIEWS_PG_STREAM_TIMEOUT_S) is
    closed then, its snapshot let go, and the next FETCH fails with 57014."""

    def __init__(self, rows: Result | Stream, hold: bool) -> None:
        self.columns = rows.columns
        self.hold = hold
        self._ahead: deque[tuple[str | None, ...]] = deque()
        self._stream: Stream | None = None
        self._expiry: asyncio.TimerHandle | None = None
        if isinstance(rows, Result):
            self._ahead.extend(rows.rows)
        else:
            self._stream = rows
            self._expiry = asyncio.get_running_loop().call_at(rows.deadline, rows.close, PAST_DEADLINE)

    async def pages(self, count: int | None) -> AsyncGenerator[list[tuple[str | None, ...]], None]:
        """The next `count` rows (None: ALL) a page at a time (at most PAGE_ROWS rows and about
        a MiB of text), read from the stream as they are taken: a FETCH of any size, never held
        whole. A FETCH left part way (the client's cancel, its deadline, the client gone) loses
        the cursor's place: the stream is closed, and the next FETCH fails with 57014."""
        left = count
        if self._ahead:
            given = len(self._ahead) if left is None else min(left, len(self._ahead))
            yield [self._ahead.popleft() for _ in range(given)]
            left = None if left is None else left - given
        while (left is None or left > 0) and self._stream is not None:
            stream = self._stream
            try:
                page = await asyncio.to_thread(
                    stream.page, PAGE_ROWS if left is None else min(PAGE_ROWS, left)
                )
                if not page:
                    self._end()
                    return
                left = None if left is None else left - len(page)
                yield page
            except (asyncio.CancelledError, GeneratorExit):  # the FETCH ends part way
                stream.close(_PLACE_LOST)
                raise

    async def fetch(
        self, count: int | None, limit: int, timeout_s: float | None
    ) -> list[tuple[str | None, ...]]:
        """The next `count` rows (None: ALL) held, for an Execute that asks for them a few at
        a time: at most `limit` (VIEWS_PG_MAX_ROWS), and a FETCH that would give more is
        refused with 54000, never cut short (the rows stay). No wait for rows to come: the
        query has them."""
        wanted = count if count is not None and count <= limit else limit + 1  # one more: is it over?
        rows = [row async for page in self.pages(wanted) for row in page]
        if wanted > limit and len(rows) > limit:
            self._ahead.extendleft(reversed(rows))  # they stay, for FETCHes of at most `limit`
            raise SqlError(
                "54000",
                f"FETCH {'ALL' if count is None else count} gives more than {limit} rows (VIEWS_PG_MAX_ROWS)"
                f" to an Execute with a row limit: FETCH at most {limit} at a time",
            )
        return rows

    def _end(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        if self._stream is not None:
            self._stream.close()
        self._stream = self._expiry = None

    def close(self) -> None:
        self._ahead.clear()
        self._end()


class Cursor:
    """A view's stream, read ahead a few pages at most, handed out as rows by FETCH."""

    hold = False  # it lives in its transaction

    def __init__(self, stream: AsyncGenerator[str, None], columns: tuple[Column, ...]) -> None:
        self.columns = (pg_column(subscription.STATE_COLUMN, "string"), *columns)
        self._view_columns = columns
        self._stream = stream
        self._pages: deque[str] = deque()
        self._rows: deque[tuple[str | None, ...]] = deque()
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._finished = False
        self._started = False
        self.ended: str | None = None  # why the stream ended, once its rows have been taken
        self._reading = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        self._started = True
        try:
            async for page in self._stream:
                self._pages.append(page)
                self._arrived.set()
                while len(self._pages) >= _AHEAD:
                    self._room.clear()
                    await self._room.wait()
        finally:
            self._finished = True
            self._arrived.set()
            await self._stream.aclose()  # the subscriber leaves the hub

    def _take(self, wanted: int) -> None:
        """Pages into rows, until `wanted` rows wait or the stream's end is seen."""
        while self._pages and self.ended is None and len(self._rows) < wanted:
            found, self.ended = subscription.changes(self._pages.popleft())
            self._rows.extend(subscription.row_values(data, self._view_columns) for data in found)
            self._room.set()
        if self._finished and not self._pages and self.ended is None:
            self.ended = subscription.STREAM_ENDED

    async def fetch(
        self, count: int | None, limit: int, timeout_s: float | None
    ) -> list[tuple[str | None, ...]]:
        """At most `count` rows (None: ALL), and at most `limit`: those that have come, or the
        first that comes within `timeout_s` (None: however long), and those with it."""
        count = min(count or limit, limit)
        self._take(count)
        if not self._rows and self.ended is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    while not self._rows and self.ended is None:
                        self._arrived.clear()
                        if not self._pages and not self._finished:
                            await self._arrived.wait()
                        self._take(count)
        if not self._rows and self.ended is not None:
            raise SqlError("57000", self.ended)
        return [self._rows.popleft() for _ in range(min(count, len(self._rows)))]

    def close(self) -> None:
        """Stops reading; the stream is closed (its subscriber gone) as the reader ends, or at
        once when the reader never ran (DECLARE and CLOSE sent together)."""
        self._reading.cancel()
        if not self._started:
            _released.add(task := asyncio.get_running_loop().create_task(_release(self._stream)))
            task.add_done_callback(_released.discard)


Open = Cursor | Rows  # a session's cursor, of either kind

_released: set[asyncio.Task[None]] = set()  # the releases under way (the loop keeps weak references)


async def _release(stream: AsyncGenerator[str, None]) -> None:
    """A stream never read: started, so that its clean-up (the subscriber leaving the hub) runs
    as it closes (closing a generator that never started runs none of it)."""
    with contextlib.suppress(Exception):
        await anext(stream)
    await stream.aclose()
