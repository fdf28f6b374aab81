"""Subscribers of the views' changes (SSE streams): each change goes to every subscriber of its
view (and key), in order, without the changelog thread ever waiting for a slow one.

The changelog thread applies a batch to the store and publishes it while holding `lock`; a new
subscriber registers and reads its snapshot while holding it too. So every change is either in
the snapshot or delivered after it, never both and never neither.
"""

import asyncio
import json
import threading
from dataclasses import dataclass, field

from services.views.store import Change


@dataclass(eq=False)
class Subscriber:
    loop: asyncio.AbstractEventLoop
    view: str
    key: str | None
    queue: "asyncio.Queue[Change]"
    overflowed: bool = False

    def push(self, changes: list[Change]) -> None:
        """From any thread: hands the changes to the subscriber's event loop, in one wake-up
        (one per change cost the changelog thread a write to the loop's pipe each)."""
        self.loop.call_soon_threadsafe(self._put, changes)

    def _put(self, changes: list[Change]) -> None:
        for change in changes:
            if self.overflowed:
                return
            try:
                self.queue.put_nowait(change)
            except asyncio.QueueFull:
                self.overflowed = True


@dataclass
class Hub:
    lock: threading.Lock = field(default_factory=threading.Lock)
    subscribers: dict[str, list[Subscriber]] = field(default_factory=dict)

    def add(self, subscriber: Subscriber) -> None:
        """Call with `lock` held, together with reading the snapshot."""
        self.subscribers.setdefault(subscriber.view, []).append(subscriber)

    def remove(self, subscriber: Subscriber) -> None:
        with self.lock:
            self.subscribers.get(subscriber.view, []).remove(subscriber)

    def publish(self, changes: list[Change]) -> None:
        """Call with `lock` held, right after the store applied the changes."""
        if not changes or not self.subscribers:
            return
        by_view: dict[str, list[Change]] = {}
        for change in changes:
            by_view.setdefault(change.view, []).append(change)
        for view, subs in self.subscribers.items():
            of_view = by_view.get(view)
            if not of_view:
                continue
            for sub in subs:
                picked = of_view if sub.key is None else [c for c in of_view if c.key == sub.key]
                if picked:
                    sub.push(picked)

    def count(self) -> int:
        return sum(len(subs) for subs in self.subscribers.values())


def sse(event: str, data: str, event_id: int | None = None) -> str:
    """One Server-Sent Event (data on one line: it is compact JSON)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {data}\n\n"


def change_data(change: Change) -> str:
    key = json.loads(change.key)
    named = dict(zip(change.key_columns, key, strict=False))
    return f'{{"key":{json.dumps(named, separators=(",", ":"))},"row":{change.value or "null"}}}'
