"""The embedded store: SQLite, one file that is also the local copy a restart starts from.

Rows are kept as the JSON text the views job wrote (a pull by key returns it as it is), keyed by
view and the key's values as a JSON array. The offsets consumed per topic-partition are written
in the same transaction as the rows, so after a restart the store and its offsets agree and
only the topics' tail is read.

One writer (the changelog process) and any number of readers (the HTTP server's), each thread
with its own connection (WAL: readers see the last committed transaction and never wait for the
writer). Each batch applied gets the next number (`seq`), committed with it: a reader's
snapshot says which batch it holds.
"""

import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation.view_marker import ViewMarker

__all__ = [
    "ANALYZE_EVERY",
    "READER_CACHE_KIB",
    "STAGED",
    "WRITER_CACHE_KIB",
    "Change",
    "Snapshot",
    "Store",
    "column_sql",
    "infer_columns",
    "key_index_prefix",
    "key_of",
    "served",
    "still_loading",
    "utf8_bytes",
    "view_literal",
]

_IN_CHUNK = 500  # keys per `IN (...)` look-up of stored values

SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (view TEXT, key TEXT, value TEXT NOT NULL, PRIMARY KEY (view, key))
  WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS offsets (topic TEXT, part INTEGER, next INTEGER NOT NULL,
  PRIMARY KEY (topic, part)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS views (view TEXT PRIMARY KEY, key_columns TEXT, columns TEXT, marker TEXT,
  applied_at_ms INTEGER);
CREATE TABLE IF NOT EXISTS batches (one INTEGER PRIMARY KEY CHECK (one = 1), seq INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class Change:
    """One changelog record: the row's new JSON text (None: the row is deleted)."""

    view: str
    key: str  # the key's values as a compact JSON array
    key_columns: tuple[str, ...]
    value: str | None


_CASTS = {"int": "INTEGER", "long": "INTEGER", "double": "REAL"}
_OPERATORS = ("=", ">=", ">", "<=", "<")


STAGED = "@"  # a view's new version backfilling beside it is stored as <view>@<created_at_ms>


def still_loading(view: str) -> str:
    """What a query of a view still loading (`Changelog.loading`) is told, over HTTP and SQL."""
    return (
        f"view {view!r} is loading: the query service has not yet read its changelog topic to its"
        " end, and does not answer from part of its rows; try again shortly"
    )


def served(infos: dict[str, dict[str, Any]]) -> list[str]:
    """The views that answer queries: not a new version still backfilling, nor a view refused
    before it had columns."""
    return [v for v, info in infos.items() if STAGED not in v and info.get("columns")]


def key_index_prefix(view: str) -> str:
    """How the names of a view's key indexes start (SQLite's plans name them)."""
    return f"key_of_{hashlib.sha256(view.encode()).hexdigest()[:12]}_"


def _index_name(view: str, exprs: list[str]) -> tuple[str, str]:
    """The prefix of a view's key indexes, and the name of the one on these expressions."""
    prefix = key_index_prefix(view)
    return prefix, prefix + hashlib.sha256(json.dumps(exprs).encode()).hexdigest()[:12]


def column_sql(name: str, kind: str) -> str:
    """A view's column as an SQL expression over a stored row, typed. The SQL side's tables
    (`sql`) and the key indexes below use this one text: SQLite uses an index on an expression
    only for the very same expression."""
    path = "'$.\"" + name.replace("'", "''") + "\"'"
    extract = f"json_extract(value, {path})"
    cast = _CASTS.get(kind)
    return f"CAST({extract} AS {cast})" if cast else extract


def view_literal(view: str) -> str:
    return "'" + view.replace("'", "''") + "'"


def key_of(values: list[Any]) -> str:
    return json.dumps(values, separators=(",", ":"))


def infer_columns(row: dict[str, Any]) -> list[dict[str, str]]:
    """Column types from a row's JSON values, until a marker of the views job names them."""

    def kind(value: Any) -> str:
        if isinstance(value, bool):
            return "boolean"
        if isinstance(value, int):
            return "long"
        return "double" if isinstance(value, float) else "string"

    return [{"name": name, "type": kind(value)} for name, value in row.items()]


# SQLite's page cache per connection, KiB. The writer's (VIEWS_STORE_CACHE_BYTES): a batch of
# changes lands on pages all over the table, but the operating system caches the file's pages
# too, and a page SQLite does not hold costs a read from that cache. On a 92 MB store a change
# cost 53 us with 16 MiB and 50 with 128 MiB, which held 70 MB more of the service's memory.
# The checkpoint (and its fsync) every 40 MB of log rather than every 4 MB (`wal_autocheckpoint`)
# came with the larger cache, and the two halved a change's cost: the cache's share is small.
WRITER_CACHE_KIB = 16_384
# The planner's statistics (`Store.analyze`) are made again after this many changes, as a view
# is created (its key index), and once the changelog process has caught up; each index sampled
# over at most _ANALYSIS_ROWS rows.
ANALYZE_EVERY = 200_000
_ANALYSIS_ROWS = 2_000
# A reader's (the event loop's pulls, each worker thread's scans): the operating system's cache
# holds the file's pages already, and a large cache per reading thread copies the whole table
# into the service's memory once per thread. A pull or a scan page reads a few pages.
READER_CACHE_KIB = 8_192


class Store:
    def __init__(self, path: Path, writer_cache_kib: int = WRITER_CACHE_KIB) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        self.path = path
        self._local = threading.local()
        self._writer = self._connect(writer_cache_kib)
        self._writer.executescript(SCHEMA)
        self._info = self._load_info()
        self._indexed: dict[str, str] = {}  # view -> its key index's name, made this run
        self._unanalyzed = 0  # changes applied since the planner's statistics were made
        self._new_index = False
        row = self._writer.execute("SELECT seq FROM batches").fetchone()
        self.seq: int = int(row[0]) if row else 0  # the last batch applied

    def _connect(self, cache_kib: int) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # a power cut may lose the last commits: Kafka has them
        conn.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
        conn.execute("PRAGMA wal_autocheckpoint=10000")  # pages
        return conn

    @property
    def _reader(self) -> sqlite3.Connection:
        """This thread's connection for pulls and scans, with a small page cache."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect(READER_CACHE_KIB)
        return conn

    # the writer's side (the changelog process)
    def offsets(self) -> dict[tuple[str, int], int]:
        rows = self._writer.execute("SELECT topic, part, next FROM offsets").fetchall()
        return {(topic, part): nxt for topic, part, nxt in rows}

    def reset(self) -> None:
        with self._transaction():
            for table in ("rows", "offsets", "views"):
                self._writer.execute(f"DELETE FROM {table}")  # noqa: S608 (a fixed name)
        self._info = {}

    def apply(
        self,
        changes: list[Change],
        markers: dict[str, ViewMarker],
        offsets: dict[tuple[str, int], int],
        dropped: dict[str, str] | None = None,
        promoted: dict[str, tuple[str, str | None]] | None = None,
    ) -> list[Change]:
        """Writes the changes, the markers and the offsets in one transaction, and forgets the
        `dropped` views (view -> its topic: rows, description and offsets); returns the changes
        that changed a row (a value equal to the stored one is no change), in order.
        `promoted`: a view's new version (staged under a name of its own while it backfilled)
        that takes over: staged name -> (view, the topic of the version it replaces); the view's
        rows become the new version's in the same transaction.

        The stored values of the batch's keys are read in a few `IN` queries and the rows written
        with one `executemany` per kind: two or three statements a change cost 76 us a change
        against 46 (python -m infra.bench.store), a fifth of a core at 5,000 changes a second."""
        applied: list[Change] = []
        now_ms = int(time.time() * 1000)
        with self._transaction():
            w = self._writer
            current = self._stored({(c.view, c.key) for c in changes})
            learned: dict[str, Change] = {}
            for change in changes:
                ident = (change.view, change.key)
                if current.get(ident) == change.value:
                    continue
                current[ident] = change.value
                applied.append(change)
                if change.value is not None and change.view not in self._info and change.view not in learned:
                    learned[change.view] = change
            final = {(c.view, c.key): c.value for c in applied}
            w.executemany(
                "INSERT INTO rows (view, key, value) VALUES (?, ?, ?)"
                " ON CONFLICT (view, key) DO UPDATE SET value = excluded.value",
                [(view, key, value) for (view, key), value in final.items() if value is not None],
            )
            w.executemany(
                "DELETE FROM rows WHERE view = ? AND key = ?",
                [(view, key) for (view, key), value in final.items() if value is None],
            )
            info = dict(self._info)
            for view, change in learned.items():
                info[view] = self._learn(change, now_ms)
            for view, marker in markers.items():
                key, columns = list(marker.key or ()), marker.columns or []
                if key:  # none: a view refused before it had rows
                    self._index(view, key, columns)
                info[view] = {"key": key, "columns": columns, "marker": marker, "applied_at_ms": now_ms}
                w.execute(
                    "INSERT INTO views (view, key_columns, columns, marker, applied_at_ms)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (view) DO UPDATE SET"
                    " key_columns = excluded.key_columns, columns = excluded.columns,"
                    " marker = excluded.marker, applied_at_ms = excluded.applied_at_ms",
                    (
                        view,
                        json.dumps(key),
                        json.dumps(columns),
                        json.dumps(marker.as_json()),
                        now_ms,
                    ),
                )
            for view, topic in (dropped or {}).items():
                w.execute("DELETE FROM rows WHERE view = ?", (view,))
                w.execute("DELETE FROM views WHERE view = ?", (view,))
                w.execute("DELETE FROM offsets WHERE topic = ?", (topic,))
                info.pop(view, None)
                applied = [c for c in applied if c.view != view]
            for staged, (view, old_topic) in (promoted or {}).items():
                w.execute("DELETE FROM rows WHERE view = ?", (view,))
                w.execute("UPDATE rows SET view = ? WHERE view = ?", (view, staged))
                w.execute("DELETE FROM views WHERE view = ?", (staged,))
                if old_topic is not None:
                    w.execute("DELETE FROM offsets WHERE topic = ?", (old_topic,))
                info.pop(staged, None)
                applied = [c for c in applied if c.view != staged]
            w.executemany(
                "INSERT INTO offsets (topic, part, next) VALUES (?, ?, ?)"
                " ON CONFLICT (topic, part) DO UPDATE SET next = excluded.next",
                [(topic, part, nxt) for (topic, part), nxt in offsets.items()],
            )
            w.execute(
                "INSERT INTO batches (one, seq) VALUES (1, ?)"
                " ON CONFLICT (one) DO UPDATE SET seq = excluded.seq",
                (self.seq + 1,),
            )
        self.seq += 1
        if learned or markers or dropped or promoted:
            self._info = info  # readers see the views' new description once it is committed
        self._unanalyzed += len(changes)
        if self._unanalyzed >= ANALYZE_EVERY or self._new_index:
            self.analyze()
        return applied

    def analyze(self) -> None:
        """Statistics for SQLite's planner (`sqlite_stat1`). Without them it guesses that a
        view has ten rows, and reads every row of the view and sorts them for a range of its
        key (psql's `WHERE user_id BETWEEN 10 AND 20 ORDER BY user_id`) rather than reading the
        range through the key index. Each index is sampled (`analysis_limit`), so that the cost
        does not grow with the store (1.3 ms on a 480,000-row store, against 148 ms for all of
        it); but a sample counts at most its own size of rows sharing a view, so the primary
        key's statistic is set to the rows over the views (a view of 160,000 rows was taken for
        one of 2,001, and its whole rows read for a count of a range of its key)."""
        w = self._writer
        w.execute(f"PRAGMA analysis_limit={_ANALYSIS_ROWS}")
        with self._transaction():
            w.execute("ANALYZE")
            views = int(w.execute("SELECT count(*) FROM views").fetchone()[0])
            stat = w.execute("SELECT stat FROM sqlite_stat1 WHERE tbl = 'rows' AND idx = 'rows'").fetchone()
            if stat is not None and views:
                rows = int(str(stat[0]).split()[0])
                shared = f"{rows} {max(1, rows // views)} 1"  # rows; rows a view; rows a key
                w.execute("UPDATE sqlite_stat1 SET stat = ? WHERE tbl = 'rows' AND idx = 'rows'", (shared,))
        self._unanalyzed, self._new_index = 0, False

    def _index(self, view: str, key: list[str], columns: list[dict[str, str]]) -> None:
        """An index of the view's rows on its key columns' typed values, so that SQL's
        `WHERE user_id = 42` (or a range, or ORDER BY the key) reads a few rows, not all: made
        once per key and types (an older one of the view is dropped), in the batch's transaction."""
        kinds = {c["name"]: c.get("type", "string") for c in columns}
        exprs = [column_sql(name, kinds.get(name, "string")) for name in key]
        prefix, name = _index_name(view, exprs)
        if self._indexed.get(view) == name:
            return
        self._new_index = True  # the planner's statistics follow once the batch is in
        w = self._writer
        older = w.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE ? AND name != ?",
            (prefix + "%", name),
        ).fetchall()
        for (old,) in older:
            w.execute(f'DROP INDEX "{old}"')
        on = ", ".join(exprs)
        w.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON rows ({on}) WHERE view = {view_literal(view)}')
        self._indexed[view] = name

    def _stored(self, idents: set[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
        """The stored value of each (view, key), None where there is no row."""
        stored: dict[tuple[str, str], str | None] = dict.fromkeys(idents)
        by_view: dict[str, list[str]] = {}
        for view, key in idents:
            by_view.setdefault(view, []).append(key)
        for view, keys in by_view.items():
            for start in range(0, len(keys), _IN_CHUNK):
                chunk = keys[start : start + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT key, value FROM rows WHERE view = ? AND key IN ({marks})"  # noqa: S608 (placeholders)
                for key, value in self._writer.execute(sql, (view, *chunk)):
                    stored[(view, key)] = value
        return stored

    def _learn(self, change: Change, now_ms: int) -> dict[str, Any]:
        """A view's key and columns from its first row, until a marker names them."""
        columns = infer_columns(json.loads(change.value or "{}"))
        self._writer.execute(
            "INSERT INTO views (view, key_columns, columns, marker, applied_at_ms) VALUES (?, ?, ?, NULL, ?)",
            (change.view, json.dumps(list(change.key_columns)), json.dumps(columns), now_ms),
        )
        return {"key": list(change.key_columns), "columns": columns, "marker": None, "applied_at_ms": now_ms}

    def _transaction(self) -> "_Transaction":
        return _Transaction(self._writer)

    # readers' side (the HTTP handlers)
    def get(self, view: str, key: str) -> str | None:
        row = self._reader.execute(
            "SELECT value FROM rows WHERE view = ? AND key = ?", (view, key)
        ).fetchone()
        return None if row is None else str(row[0])

    def page(
        self,
        view: str,
        filters: list[tuple[str, str, Any]],
        limit: int,
        *,
        after: list[Any] | None = None,
        descending: bool = False,
        max_bytes: int | None = None,
    ) -> tuple[list[str], bool]:
        """Rows whose columns compare as the filters say ((column, op, value); op one of `=`,
        `>=`, `>`, `<=`, `<`; values typed as their columns), in the order of the key's typed
        values (42 before 100; the key index serves it), or the reverse, at most `limit`;
        `after`: the key values of the last row of the page before, to go on after it;
        `max_bytes`: the page ends before the row that would take it over (UTF-8 bytes of the
        rows' JSON; the first row always comes), and says so (the bool: more rows may follow
        though fewer than `limit` came). `view` is a known view's name."""
        info = self._info.get(view) or {}
        kinds = {c["name"]: c.get("type", "string") for c in info.get("columns") or []}
        where, params = "", []
        for column, op, value in filters:
            if op not in _OPERATORS:
                raise ValueError(f"unknown operator {op!r}")
            expr = column_sql(column, kinds.get(column, "string"))
            where += f" AND {expr} {'IS' if op == '=' else op} ?"
            params.append(value)
        keys = [column_sql(k, kinds.get(k, "string")) for k in info.get("key") or []]
        # The key's typed values alone: they tell rows apart (the stored key is made of them),
        # and the key index then serves a range with a limit a page at a time.
        ordered = keys or ["key"]
        if after is not None:
            if len(after) != len(keys):
                raise ValueError("a cursor of another view")
            where += (
                f" AND ({', '.join(ordered)}) {'<' if descending else '>'} ({', '.join('?' * len(ordered))})"
            )
            params += list(after)
        direction = " DESC" if descending else ""
        order = ", ".join(f"{e}{direction}" for e in ordered)
        tail = f" WHERE view = {view_literal(view)}{where} ORDER BY {order} LIMIT ?"
        if keys:
            # Without statistics SQLite reads the view through the primary key and sorts the
            # whole range; the key index reads just the page.
            indexed = f'SELECT value FROM rows INDEXED BY "{_index_name(view, keys)[1]}"{tail}'  # noqa: S608
            try:
                return _within(self._reader.execute(indexed, (*params, limit)), max_bytes)
            except sqlite3.OperationalError as err:
                if "no such index" not in str(err) and "no query solution" not in str(err):
                    raise
        sql = f"SELECT value FROM rows{tail}"  # noqa: S608 (names checked)
        return _within(self._reader.execute(sql, (*params, limit)), max_bytes)

    def snapshot(self, view: str, key: str | None, *, rows: bool = True) -> "Snapshot":
        """The view's rows (or the key's) as of the last batch applied, to read page by page;
        with `rows` false, only the number of that batch (no rows: changes from then on)."""
        # One pass over the table, each page read once: a cache holds little more than the path
        # from the root. 1 MiB, not 8: with many subscribers reading snapshots at once, their
        # caches were half of the service's memory.
        conn = self._connect(1024)
        return Snapshot(conn, view, key, rows=rows)

    def count(self, view: str) -> int:
        return int(self._reader.execute("SELECT COUNT(*) FROM rows WHERE view = ?", (view,)).fetchone()[0])

    def view_info(self, view: str) -> dict[str, Any] | None:
        """The view's key columns, columns, latest marker and when it was applied, if known.
        Kept in memory (a pull query asks for it on every request); the writer replaces it, and
        hands it to the readers' process (`infos`, `learn_infos`)."""
        return self._info.get(view)

    def infos(self) -> dict[str, dict[str, Any]]:
        """Every view's description; a new dict whenever one changed."""
        return self._info

    def learn_infos(self, infos: dict[str, dict[str, Any]]) -> None:
        """The descriptions the writer's process sent."""
        self._info = infos

    def _load_info(self) -> dict[str, dict[str, Any]]:
        rows = self._writer.execute("SELECT view, key_columns, columns, marker, applied_at_ms FROM views")
        return {
            view: {
                "key": json.loads(key),
                "columns": json.loads(columns),
                "marker": ViewMarker.decode(json.loads(marker)) if marker else None,
                "applied_at_ms": applied,
            }
            for view, key, columns, marker, applied in rows
        }


class Snapshot:
    """Rows of a view as of one batch: `seq`, the number of the last batch they hold, then the
    rows in key order, a page at a time. A connection and read transaction of its own: the pull
    queries answered between two pages read the newest rows, not the snapshot's. `close` ends it."""

    def __init__(self, conn: sqlite3.Connection, view: str, key: str | None, *, rows: bool = True) -> None:
        self._conn = conn
        conn.execute("BEGIN")
        row = conn.execute("SELECT seq FROM batches").fetchone()  # the read transaction starts here
        self.seq = int(row[0]) if row else 0
        self._rows: sqlite3.Cursor | None = None
        if not rows:
            self.close()  # nothing more to read: the transaction and connection end now
        elif key is None:
            self._rows = conn.execute("SELECT key, value FROM rows WHERE view = ? ORDER BY key", (view,))
        else:
            self._rows = conn.execute("SELECT key, value FROM rows WHERE view = ? AND key = ?", (view, key))

    def page(self, size: int) -> list[tuple[str, str]]:
        """The next rows, at most `size`; none at the end (and none for a snapshot without rows)."""
        if self._rows is None:
            return []
        rows: list[tuple[str, str]] = self._rows.fetchmany(size)
        return rows

    def close(self) -> None:
        """Ends the read transaction, also in the middle of the rows (a connection closed with a
        statement still open would keep it)."""
        try:
            if self._rows is not None:
                self._rows.close()
            self._conn.rollback()
        except sqlite3.ProgrammingError:  # closed already
            pass
        self._conn.close()


class _Transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


def _within(cursor: sqlite3.Cursor, max_bytes: int | None) -> tuple[list[str], bool]:
    """The cursor's values (one column), up to the one that would take them over `max_bytes`
    (the first always), and whether that cut them short; the cursor is closed either way."""
    try:
        if max_bytes is None:
            return [r[0] for r in cursor], False
        rows: list[str] = []
        weight = 0
        for (value,) in cursor:
            weight += utf8_bytes(value)
            if rows and weight > max_bytes:
                return rows, True
            rows.append(value)
        return rows, False
    finally:
        cursor.close()


def utf8_bytes(value: str | bytes) -> int:
    """A value's bytes as they go out: UTF-8 for text (its length when ASCII, which CPython knows
    without reading it, so a long row is not copied to be weighed)."""
    return len(value) if isinstance(value, bytes) or value.isascii() else len(value.encode())
