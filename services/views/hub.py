"""Subscribers of the views' changes (SSE streams): each change goes to every subscriber of its
view (and key), in order, without the changelog process ever waiting for a slow one.

Everything here runs on the HTTP server's event loop. The changelog process numbers each batch
it applies to the store (`seq`, committed with the rows) and sends the batch's changes here; a
new subscriber reads its snapshot with the number of the last batch in it and gets only the
batches after that. So every change is either in the snapshot or delivered after it, never
both and never neither.

The changelog process sends changes only while someone subscribes (the count `on_count`
shares with it): a subscriber is counted before it reads its snapshot, and the process reads
the count after it commits a batch, so a batch the snapshot missed always comes with its
changes.
"""

import asyncio
import functools
import json
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.views.store import Change

__all__ = [
    "OVERFLOWED",
    "REPLACED",
    "Hub",
    "RowFilter",
    "Subscriber",
    "Turns",
    "change_data",
    "events_of",
    "sse",
]

# A change as it reaches subscribers: view, key (the key's values as a JSON array), and the
# SSE event's data (`change_data`), made in the changelog process.
Event = tuple[str, str, str]
OVERFLOWED = ""  # what an overflowed subscriber's queue holds: its stream ends
REPLACED = "replaced"  # an event's data: the view's new version took over (key "": every subscriber)


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    ">=": lambda a, b: a is not None and a >= b,
    ">": lambda a, b: a is not None and a > b,
    "<=": lambda a, b: a is not None and a <= b,
    "<": lambda a, b: a is not None and a < b,
}


@dataclass
class RowFilter:
    """A subscription's filters, (column, op, value) as a scan takes them, and the keys of the
    rows it has shown that match: a row that stops matching is sent once more, removed."""

    filters: list[tuple[str, str, Any]]
    key_columns: tuple[str, ...]
    shown: set[str] = field(default_factory=set)

    def matches(self, row: dict[str, Any]) -> bool:
        try:
            return all(_COMPARE[op](row.get(column), value) for column, op, value in self.filters)
        except TypeError:  # a value of another type than the column's: no match
            return False

    def show(self, row: dict[str, Any]) -> None:
        """A snapshot row that matches."""
        self.shown.add(_compact({c: row.get(c) for c in self.key_columns}))

    def passing(self, data: str) -> str | None:
        """What a change becomes for this subscriber: itself, a removal, or nothing."""
        change = json.loads(data)
        key, row = _compact(change["key"]), change["row"]
        if row is not None and self.matches(row):
            self.shown.add(key)
            return data
        if key in self.shown:
            self.shown.discard(key)
            return f'{{"key":{key},"row":null}}'
        return None


@dataclass(eq=False)
class Subscriber:
    view: str
    key: str | None
    queue: "asyncio.Queue[str]"  # SSE data of the changes, in order
    after: int = 0  # the last batch in the subscriber's snapshot
    overflowed: bool = False
    rows: RowFilter | None = None  # filters on the rows (all rows without)
    replaced: bool = False  # the view's new version took over: what follows is its snapshot
    snapshot: bool = True  # the rows first (false: the changes from the subscription on only)
    max_bytes: int = 0  # the memory its waiting changes may hold (0: the queue's count alone)
    held_bytes: int = 0  # the memory they hold now (each change's string, shared with others)

    def put(self, events: list[Event]) -> None:
        for _, _, data in events:
            if self.overflowed or self.replaced:
                return
            size = sys.getsizeof(data)
            try:
                if self.max_bytes and self.held_bytes + size > self.max_bytes:
                    raise asyncio.QueueFull
                self.queue.put_nowait(data)
            except asyncio.QueueFull:
                # It gets no more: the changes it holds are dropped now, not when its client
                # goes (one that stopped reading may never go), and its stream wakes to end.
                self.overflowed = True
                while not self.queue.empty():
                    self.queue.get_nowait()
                self.held_bytes = 0
                self.queue.put_nowait(OVERFLOWED)
                return
            self.held_bytes += size
            self.replaced = data == REPLACED

    def taken(self, data: str) -> None:
        """A change its stream took from the queue: the memory it held no longer waits."""
        self.held_bytes = max(0, self.held_bytes - sys.getsizeof(data))


@dataclass
class Hub:
    subscribers: dict[str, list[Subscriber]] = field(default_factory=dict)
    on_count: Callable[[int], None] = lambda _: None  # told how many subscribe, on each change

    def add(self, subscriber: Subscriber) -> None:
        """Before the subscriber reads its snapshot."""
        self.subscribers.setdefault(subscriber.view, []).append(subscriber)
        self.on_count(self.count())

    def remove(self, subscriber: Subscriber) -> None:
        self.subscribers.get(subscriber.view, []).remove(subscriber)
        self.on_count(self.count())

    def publish(self, seq: int, events: list[Event]) -> None:
        """Batch `seq`'s changes, to the subscribers whose snapshot does not hold it."""
        if not events or not self.subscribers:
            return
        by_view: dict[str, list[Event]] = {}
        for event in events:
            by_view.setdefault(event[0], []).append(event)
        for view, subs in self.subscribers.items():
            of_view = by_view.get(view)
            if not of_view:
                continue
            for sub in subs:
                if seq <= sub.after:
                    continue
                picked = of_view if sub.key is None else [e for e in of_view if e[1] in (sub.key, "")]
                if picked:
                    sub.put(picked)

    def count(self) -> int:
        return sum(len(subs) for subs in self.subscribers.values())


class Turns:
    """Subscribers' writes take turns with everything else on the event loop: at most
    `per_turn` of them (a page of a snapshot, or of changes, each) between two polls for I/O,
    the waiting subscribers in the order they asked.

    A loop turn runs every task that is ready. With 15 subscribers reading their snapshots at
    once, each turn formatted 15 pages (40 ms here), and each pull on a connection waited a
    whole turn: pulls over 8 connections went at 200 a second, and a client sending 1,000 a
    second saw answers 4 to 8 s late until the snapshots were out. Now a pull waits for
    `per_turn` pages at most; the subscribers still share every turn the loop has to spare."""

    def __init__(self, per_turn: int = 1) -> None:
        self.per_turn = per_turn
        self._left = per_turn
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._scheduled = False

    async def take(self) -> None:
        """Returns when a turn has room for this write: at once, or after the writes that asked
        before it."""
        if self._left > 0 and not self._waiting:
            self._use()
            return
        granted = asyncio.get_running_loop().create_future()
        self._waiting.append(granted)
        try:
            await granted
        except asyncio.CancelledError:  # its client went: it leaves the line
            if granted in self._waiting:
                self._waiting.remove(granted)
            raise

    def _use(self) -> None:
        self._left -= 1
        if not self._scheduled:  # the next turn starts afresh (call_soon: after the next poll)
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._new_turn)

    def _new_turn(self) -> None:
        self._scheduled = False
        self._left = self.per_turn
        while self._left > 0 and self._waiting:
            granted = self._waiting.popleft()
            if not granted.done():
                granted.set_result(None)
                self._use()


def sse(event: str, data: str, event_id: int | None = None) -> str:
    """One Server-Sent Event (data on one line: it is compact JSON)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {data}\n\n"


_compact = json.JSONEncoder(separators=(",", ":")).encode  # json.dumps with these makes an encoder a call


def change_data(change: Change) -> str:
    """`{"key": {<column>: <value>, ...}, "row": <the row or null>}`, compact."""
    key = change.key
    one_value = len(key) > 2 and key[0] == "[" and key[-1] == "]" and '"' not in key and "," not in key
    if one_value and len(change.key_columns) == 1:
        # One column, a value that is not a string (an id): spelled as it is, without parsing the
        # key and encoding it again, which was most of a change's cost here (7.7 us against 0.9).
        named = f"{{{_column(change.key_columns[0])}:{key[1:-1]}}}"
    else:
        named = _compact(dict(zip(change.key_columns, json.loads(key), strict=False)))
    return f'{{"key":{named},"row":{change.value or "null"}}}'


@functools.lru_cache(maxsize=256)
def _column(name: str) -> str:
    return _compact(name)


def events_of(changes: list[Change]) -> list[Event]:
    return [(c.view, c.key, change_data(c)) for c in changes]
