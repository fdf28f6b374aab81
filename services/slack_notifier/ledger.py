"""The ledger: a small SQLite file (WAL, synchronous=FULL) of the rating ids the notifier has
posted, so a replayed alert is never posted twice.

An id is written `pending` before its message is sent and `posted` (with the message's channel
and ts) once Slack confirmed it; both are committed before the Kafka offset. A `pending` id after a
crash means "Slack may or may not have it": the sink looks in the channel's history to decide.
Each id keeps a digest of its rating (`Alert.rating`), so that another rating under the same id
is told from a replay.
"""

import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

__all__ = ["Ledger", "ledger_path"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    rating_id INTEGER PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('pending', 'posted')),
    channel TEXT,
    ts TEXT,
    updated_at REAL NOT NULL,
    rating TEXT
)
"""
CHUNK = 500


def _chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    items = list(ids)
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


def ledger_path(state_dir: Path) -> Path:
    return state_dir / "ledger.sqlite3"


class Ledger:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.conn = sqlite3.connect(path, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        with self.conn:
            self.conn.execute(SCHEMA)
            columns = {row[1] for row in self.conn.execute("PRAGMA table_info(alerts)")}
            if "rating" not in columns:  # a ledger from before the digests: its ids have none
                self.conn.execute("ALTER TABLE alerts ADD COLUMN rating TEXT")

    def _select(self, state: str, ids: Iterable[int]) -> dict[int, float]:
        found: dict[int, float] = {}
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            rows = self.conn.execute(
                f"SELECT rating_id, updated_at FROM alerts WHERE state = ? AND rating_id IN ({marks})",  # noqa: S608
                [state, *chunk],
            )
            found.update((int(r[0]), float(r[1])) for r in rows)
        return found

    def posted(self, ids: Iterable[int]) -> set[int]:
        return set(self._select("posted", ids))

    def ratings(self, ids: Iterable[int]) -> dict[int, str | None]:
        """The posted ids among `ids`, with the digest of the rating each was posted for (None:
        posted before the ledger kept digests)."""
        found: dict[int, str | None] = {}
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            rows = self.conn.execute(
                f"SELECT rating_id, rating FROM alerts WHERE state = 'posted' AND rating_id IN ({marks})",  # noqa: S608
                chunk,
            )
            found.update((int(r[0]), r[1]) for r in rows)
        return found

    def posted_between(self, low: int, high: int) -> dict[int, float]:
        """Posted ids within [low, high] with when they were posted (epoch s): how `make demo`
        counts this run's Slack posts and measures alert latency."""
        rows = self.conn.execute(
            "SELECT rating_id, updated_at FROM alerts WHERE state = 'posted' AND rating_id BETWEEN ? AND ?",
            (low, high),
        )
        return {int(r[0]): float(r[1]) for r in rows}

    def pending(self) -> dict[int, float]:
        """Every pending id with the time it was marked (a crash left them undecided)."""
        rows = self.conn.execute("SELECT rating_id, updated_at FROM alerts WHERE state = 'pending'")
        return {int(r[0]): float(r[1]) for r in rows}

    def mark_pending(self, ids: Iterable[int], ratings: Mapping[int, str] | None = None) -> None:
        """`ratings`: the digest of each id's rating, kept with it."""
        now, digests = time.time(), ratings or {}
        with self.conn:
            self.conn.executemany(
                "INSERT OR REPLACE INTO alerts (rating_id, state, channel, ts, updated_at, rating) "
                "VALUES (?, 'pending', NULL, NULL, ?, ?)",
                [(i, now, digests.get(i)) for i in ids],
            )

    def mark_posted(self, ids: Iterable[int], channel: str | None, ts: str | None) -> None:
        """Posted, keeping the digest the id was marked pending with."""
        now = time.time()
        with self.conn:
            self.conn.executemany(
                "INSERT INTO alerts (rating_id, state, channel, ts, updated_at) "
                "VALUES (?, 'posted', ?, ?, ?) ON CONFLICT (rating_id) DO UPDATE SET state = 'posted', "
                "channel = excluded.channel, ts = excluded.ts, updated_at = excluded.updated_at",
                [(i, channel, ts, now) for i in ids],
            )

    def forget(self, ids: Iterable[int]) -> None:
        with self.conn:
            self.conn.executemany("DELETE FROM alerts WHERE rating_id = ?", [(i,) for i in ids])

    def last_channel(self) -> str | None:
        """The channel ID Slack returned for the latest post (history needs an ID, not a name)."""
        row = self.conn.execute(
            "SELECT channel FROM alerts WHERE channel IS NOT NULL ORDER BY updated_at DESC LIMIT 1"
        ).fetchone()
        return str(row[0]) if row else None

    def prune(self, keep_days: int) -> int:
        with self.conn:
            cur = self.conn.execute(
                "DELETE FROM alerts WHERE state = 'posted' AND updated_at < ?",
                (time.time() - keep_days * 86400,),
            )
        return cur.rowcount

    def close(self) -> None:
        self.conn.close()
