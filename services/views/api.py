"""The HTTP API (Starlette): views, rows by key, filtered scans, changes as Server-Sent Events,
health, and Prometheus metrics. Every refusal is a 4xx with {"error": "..."} that says what is wrong."""

import asyncio
import base64
import functools
import json
import logging
import re
import sqlite3
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import date
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from foundation.view_marker import ViewMarker
from services.views import timestamps
from services.views.changelog import ChangelogProcess
from services.views.config import ViewsApiSettings
from services.views.hub import REPLACED, Hub, RowFilter, Subscriber, Turns, change_data, sse
from services.views.metrics import ViewsCollector
from services.views.sql import SqlError
from services.views.store import STAGED, Change, Snapshot, Store, key_of, still_loading

__all__ = ["Api", "BadRequest", "decode_cursor", "encode_cursor", "parse_value", "scan_filters"]

log = logging.getLogger("views")
JSON = "application/json"
# A subscriber's events go out this many to a write, and the pull queries that came meanwhile
# are answered between two writes: a whole view's snapshot written in one go held the event loop
# for seconds, and a large batch of changes for milliseconds.
_EVENTS_PER_WRITE = 500


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# What a number may look like: ASCII digits only. Python's int() and float() also take "4_2"
# (42), other scripts' digits, "nan" and "inf"; "nan" matched every null.
_INTEGER = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def parse_value(text: str, kind: str, what: str) -> Any:
    """A key part or filter value as its column's type."""
    if kind in ("int", "long", "double"):
        pattern = _DECIMAL if kind == "double" else _INTEGER
        if pattern.fullmatch(text) is None:
            raise BadRequest(400, f"{what}: {text!r} is not a {kind}")
        return float(text) if kind == "double" else int(text)
    if kind == "boolean":
        if text not in ("true", "false"):
            raise BadRequest(400, f"{what}: {text!r} is not true or false")
        return text == "true"
    if kind in ("timestamp", "date"):  # in the stored form, which compares as text by instant
        found = timestamps.stored(text) if kind == "timestamp" else _iso_date(text)
        if found is None:
            raise BadRequest(400, f"{what}: {text!r} is not a {kind} (ISO 8601: 2026-12-07T05:00:00Z)")
        return found
    return text


def _iso_date(text: str) -> str | None:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        return None


_PAGE = Path(__file__).parent / "page"
_PAGE_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript", "css": "text/css"}
# The page's own script and style only: a row's text (what customers typed) never runs.
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


@functools.cache
def _page_file(name: str) -> bytes:
    return (_PAGE / name).read_bytes()


_RANGES = {"gte": ">=", "gt": ">", "lte": "<=", "lt": "<"}


def scan_filters(param: str, text: str, types: dict[str, str], name: str) -> list[tuple[str, str, Any]]:
    """A scan's filter: `column=v` (equal), `column.gte=v` (also gt, lte, lt) or
    `column.between=low,high` (both included), each value typed as its column."""
    column, _, op = param.partition(".")
    if column not in types:
        raise BadRequest(400, f"unknown column {column!r}; view {name!r} has {', '.join(types)}")
    kind = types[column]
    if not op:
        return [(column, "=", parse_value(text, kind, f"filter {column}"))]
    if op == "between":
        low, comma, high = text.partition(",")
        if not comma:
            raise BadRequest(400, f"filter {param}: give low,high (both included)")
        return [
            (column, ">=", parse_value(low, kind, f"filter {param}")),
            (column, "<=", parse_value(high, kind, f"filter {param}")),
        ]
    if op not in _RANGES:
        raise BadRequest(400, f"filter {param}: {op!r} is not one of {', '.join([*_RANGES, 'between'])}")
    return [(column, _RANGES[op], parse_value(text, kind, f"filter {param}"))]


def encode_cursor(key: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(text: str, info: dict[str, Any], name: str) -> list[Any]:
    """The key values a scan's `after` cursor (its `next`) holds."""
    try:
        key = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError:
        key = None
    if not isinstance(key, list) or len(key) != len(info["key"]):
        raise BadRequest(400, f"after: {text!r} is not a cursor of view {name!r} (use the 'next' of a scan)")
    return key


class Api:
    def __init__(
        self, settings: ViewsApiSettings, store: Store, hub: Hub, changelog: ChangelogProcess
    ) -> None:
        self.settings, self.store, self.hub, self.changelog = settings, store, hub, changelog
        self.turns = Turns()  # subscribers' writes, a few between two polls for I/O
        self.built_in = [settings.view_name(t) for t in settings.changelog_topics]
        self._topics = dict(zip(self.built_in, settings.changelog_topics, strict=True))
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ViewsCollector(lambda: self.names, self.loading_views, store, hub, changelog))

    @property
    def names(self) -> list[str]:
        """The views: the configured ones, then those declared in SQL that the store knows (a
        new version still backfilling is not one: it shows with the view it replaces)."""
        declared = sorted(n for n in self.store.infos() if n not in self._topics and STAGED not in n)
        return [*self.built_in, *declared]

    def topic(self, name: str) -> str:
        marker = (self.store.view_info(name) or {}).get("marker")
        declared = marker.topic if marker is not None else None
        return self._topics.get(name) or declared or f"{self.settings.topic_prefix}{name}"

    def app(self) -> ASGIApp:
        routes = [
            Route("/", self.page),
            Route("/page.js", self.page),
            Route("/page.css", self.page),
            Route("/health", self.health),
            Route("/metrics", self.metrics),
            Route("/views", self.catalog),
            Route("/views/{name}", self.scan),
            Route("/views/{name}/changes", self.changes),
            Route("/views/{name}/{key:path}", self.row),
        ]
        return Starlette(
            routes=routes,
            exception_handlers={BadRequest: _refused, HTTPException: _http_error, Exception: _bug},
        )

    def pull(self, target: bytes) -> bytes | None:
        """The row a GET of `target` (its path and query) asks for, for the HTTP protocol to
        answer without the app; None for anything else, which the routes answer, refusals
        included."""
        parts = target.decode("latin-1").split("?", 1)[0].split("/")  # "", "views", name, key parts
        if len(parts) < 4 or parts[1] != "views" or parts[2] not in self.names or self.loading(parts[2]):
            return None
        if len(parts) == 4 and parts[3] == "changes":
            return None
        info = self.store.view_info(parts[2])
        if info is None:
            return None
        try:
            key = self._key(info, [urllib.parse.unquote(p) for p in parts[3:]], parts[2])
        except BadRequest:
            return None
        value = self.store.get(parts[2], key)
        return None if value is None else value.encode()

    # what a view is
    def loading_views(self) -> frozenset[str]:
        """The views whose changelog topic is not yet read to its end since the service began
        reading it: every view, until the changelog process has said which."""
        loading = self.changelog.loading
        return frozenset(self.names) if loading is None else loading

    def loading(self, name: str) -> bool:
        return name in self.loading_views()

    def _view(self, name: str) -> dict[str, Any]:
        if name not in self.names:
            raise BadRequest(404, f"view {name!r} does not exist; the views are {', '.join(self.names)}")
        if self.loading(name):
            raise BadRequest(503, still_loading(name))
        info = self.store.view_info(name)
        if info is None:
            raise BadRequest(404, f"view {name!r} has no data yet")
        if not info.get("columns"):
            said = info.get("marker")
            state = (said.state if said is not None else None) or "not started"
            error = (said.error if said is not None else None) or ""
            raise BadRequest(409, f"view {name!r} is {state}: {error}")
        return info

    def _key(self, info: dict[str, Any], parts: list[str], name: str) -> str:
        key_columns: list[str] = info["key"]
        if len(parts) != len(key_columns):
            spelled = "/".join(f"<{c}>" for c in key_columns)
            raise BadRequest(
                400, f"view {name!r} is keyed by {', '.join(key_columns)}: /views/{name}/{spelled}"
            )
        types = {c["name"]: c["type"] for c in info["columns"]}
        return key_of(
            [
                parse_value(p, types.get(c, "string"), f"key column {c}")
                for c, p in zip(key_columns, parts, strict=True)
            ]
        )

    # the routes
    async def health(self, _: Request) -> Response:
        if self.changelog.failed is not None:
            return JSONResponse({"status": "failed", "error": str(self.changelog.failed)}, 503)
        if not self.changelog.caught_up.is_set():
            return JSONResponse({"status": "catching up with the changelog topics"}, 503)
        return JSONResponse({"status": "ok"})

    async def page(self, request: Request) -> Response:
        """The views page (`page/`): the catalog and one view as a live table."""
        name = request.url.path.lstrip("/") or "index.html"
        kind = _PAGE_TYPES[name.rsplit(".", 1)[-1]]
        return Response(_page_file(name), media_type=kind, headers=_PAGE_HEADERS)

    async def metrics(self, _: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def catalog(self, _: Request) -> Response:
        infos = self.store.infos()
        views = []
        for name in self.names:
            info = infos.get(name) or {}
            described = self._described(name, info)
            staged = [v for v in infos if v.startswith(f"{name}{STAGED}")]
            if staged:  # a new version: backfilling, or refused or failed
                newest = max(staged, key=lambda v: int(v.rsplit(STAGED, 1)[1]))
                described["replacing"] = self._described(name, infos[newest])
            views.append(described)
        return JSONResponse({"views": views})

    def _described(self, name: str, info: dict[str, Any]) -> dict[str, Any]:
        marker = info.get("marker") or ViewMarker(name)
        known = info.get("marker") is not None
        served = STAGED not in name and bool(info.get("columns"))
        return {
            "name": name,
            "topic": marker.topic or self.topic(name),
            "state": marker.state or ("live" if known else "loading"),
            "loading": served and self.loading(name),  # its queries answer 503 until it is read
            "error": marker.error,
            "sql": marker.sql,
            "created_at_ms": marker.created_at_ms,
            "key": info.get("key"),
            "columns": info.get("columns"),
            "rows": self.store.count(name) if served else None,
            "freshness": {
                "enriched_to": marker.enriched_to,
                "max_rating_time": marker.max_rating_time,
                "batch_id": marker.batch_id,
                "written_at_ms": marker.written_at_ms,
                "applied_at_ms": info.get("applied_at_ms") if known else None,
            },
        }

    async def row(self, request: Request) -> Response:
        name = request.path_params["name"]
        info = self._view(name)
        raw = request.scope.get("raw_path", request.url.path.encode()).decode()
        tail = raw.split("?", 1)[0].split("/", 3)[3]  # after /views/<name>/
        parts = [urllib.parse.unquote(p) for p in tail.split("/")]
        key = self._key(info, parts, name)
        value = self.store.get(name, key)
        if value is None:
            raise BadRequest(404, f"no row of view {name!r} with key {'/'.join(parts)}")
        return Response(value, media_type=JSON)

    async def scan(self, request: Request) -> Response:
        name = request.path_params["name"]
        info = self._view(name)
        types = {c["name"]: c["type"] for c in info["columns"]}
        limit, filters, after, descending = self.settings.scan_limit, [], None, False
        for param, text in request.query_params.multi_items():
            if param == "limit":
                if _INTEGER.fullmatch(text) is None or not 0 < int(text) <= self.settings.scan_limit_max:
                    raise BadRequest(
                        400, f"limit: {text!r} is not a number from 1 to {self.settings.scan_limit_max}"
                    )
                limit = int(text)
            elif param == "order":
                if text not in ("asc", "desc"):
                    raise BadRequest(400, f"order: {text!r} is not asc or desc (the key's order)")
                descending = text == "desc"
            elif param == "after":
                after = decode_cursor(text, info, name)
            else:
                filters += scan_filters(param, text, types, name)
        # In a worker thread: a filter that matches few rows reads the whole view (SQLite lets
        # go of the interpreter while it does), and pulls go on meanwhile.
        most = self.settings.scan_max_bytes
        page = functools.partial(self.store.page, after=after, descending=descending, max_bytes=most)
        rows, cut = await asyncio.to_thread(page, name, filters, limit)
        following = "null"
        if len(rows) == limit or cut:  # cut: the next row would have taken it over VIEWS_SCAN_MAX_BYTES
            last = json.loads(rows[-1])
            following = json.dumps(encode_cursor([last.get(k) for k in info["key"]]))
        return Response('{"rows":[' + ",".join(rows) + '],"next":' + following + "}", media_type=JSON)

    async def changes(self, request: Request) -> Response:
        name = request.path_params["name"]
        info = self._view(name)
        key_text = request.query_params.get("key")
        key = None if key_text is None else self._key(info, key_text.split("/"), name)
        types = {c["name"]: c["type"] for c in info["columns"]}
        # ?snapshot=false: no rows first, only the changes of the batches applied from now on
        # (Materialize's SUBSCRIBE ... WITH (SNAPSHOT = false)).
        snapshot_text = request.query_params.get("snapshot")
        with_rows = snapshot_text is None or parse_value(snapshot_text, "boolean", "snapshot")
        filters = [
            f
            for p, t in request.query_params.multi_items()
            if p not in ("key", "snapshot")
            for f in scan_filters(p, t, types, name)
        ]
        rows_filter = RowFilter(filters, tuple(info["key"])) if filters else None
        return StreamingResponse(
            self._subscribed(name, info, key, with_rows, rows_filter),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    def follow(self, name: str, with_rows: bool = True) -> AsyncGenerator[str, None]:
        """A view's stream of SSE events, as GET /views/<name>/changes gives it: its rows
        (unless `with_rows` is false), then its changes, with the same bounds; the PostgreSQL
        protocol's SUBSCRIBE reads it. SqlError where the route answers an error, with
        PostgreSQL's SQLSTATE for it."""
        try:
            return self._subscribed(name, self._view(name), None, with_rows, None)
        except BadRequest as err:
            if err.status == 503:  # loading, or the subscribers' cap
                sqlstate = "57P03" if name in self.loading_views() else "53300"
            else:
                sqlstate = {404: "42P01", 409: "55000"}.get(err.status, "22023")
            raise SqlError(sqlstate, str(err)) from None

    def _subscribed(
        self, name: str, info: dict[str, Any], key: str | None, with_rows: bool, rows_filter: RowFilter | None
    ) -> AsyncGenerator[str, None]:
        if self.hub.count() >= self.settings.max_subscribers:
            raise BadRequest(
                503,
                f"{self.settings.max_subscribers} subscribers already (VIEWS_MAX_SUBSCRIBERS): try later",
            )
        sub = Subscriber(
            name,
            key,
            asyncio.Queue(self.settings.subscriber_queue),
            rows=rows_filter,
            snapshot=with_rows,
            max_bytes=self.settings.subscriber_queue_bytes,
        )
        self.hub.add(sub)  # first: the changelog process sends changes from now on
        try:
            snapshot = self._snapshot(sub)
            sub.after = snapshot.seq
        except BaseException:
            self.hub.remove(sub)
            raise
        return self._stream(sub, snapshot, tuple(info["key"]))

    async def _stream(
        self, sub: Subscriber, snapshot: Snapshot, key_columns: tuple[str, ...]
    ) -> AsyncGenerator[str, None]:
        try:
            while True:
                async for text in self._session(sub, snapshot, key_columns):
                    yield text
                if not sub.replaced:
                    break
                # The view's new version took over: its snapshot, then its changes, on this stream.
                try:
                    info = self._view(sub.view)
                except BadRequest as err:
                    yield sse("error", json.dumps({"error": str(err)}))
                    break
                self.hub.remove(sub)
                key_columns = tuple(info["key"])
                rows = RowFilter(sub.rows.filters, key_columns) if sub.rows is not None else None
                sub = Subscriber(
                    sub.view,
                    sub.key,
                    asyncio.Queue(self.settings.subscriber_queue),
                    rows=rows,
                    snapshot=sub.snapshot,
                    max_bytes=sub.max_bytes,
                )
                self.hub.add(sub)
                yield sse("replaced", json.dumps({"view": sub.view, "key": list(key_columns)}))
                snapshot = self._snapshot(sub)
                sub.after = snapshot.seq
        finally:
            snapshot.close()
            self.hub.remove(sub)

    def _snapshot(self, sub: Subscriber) -> Snapshot:
        """The subscriber's snapshot, closed at VIEWS_SNAPSHOT_TIMEOUT_S whatever happens to its
        stream (also one the server never starts: its client went at once)."""
        snapshot = self.store.snapshot(sub.view, sub.key, rows=sub.snapshot)
        asyncio.get_running_loop().call_later(self.settings.snapshot_timeout_s, snapshot.close)
        return snapshot

    async def _session(
        self, sub: Subscriber, snapshot: Snapshot, key_columns: tuple[str, ...]
    ) -> AsyncIterator[str]:
        """The snapshot, then the changes, until the subscriber overflows or its view is replaced.

        The snapshot is read from the store a page at a time as the client takes it: a
        subscriber holds one page, not the view. Its read transaction keeps the store's log from
        being checkpointed past it, so a client that has not taken the whole snapshot within
        VIEWS_SNAPSHOT_TIMEOUT_S is cut off (the transaction ends at that moment, even while the
        client reads nothing at all)."""
        try:
            while True:
                await self.turns.take()  # the pull queries that came meanwhile first
                if not (page := snapshot.page(_EVENTS_PER_WRITE)):
                    break
                if kept := _passing(page, sub.rows):
                    yield "".join(
                        sse("snapshot", change_data(Change(sub.view, k, key_columns, v))) for k, v in kept
                    )
        except sqlite3.ProgrammingError:  # closed at the timeout (`_snapshot`)
            log.warning("an SSE subscriber of %s took longer than the snapshot timeout: cut off", sub.view)
            error = f"the snapshot was not read within {self.settings.snapshot_timeout_s:g} s"
            yield sse("error", json.dumps({"error": f"{error} (VIEWS_SNAPSHOT_TIMEOUT_S); subscribe again"}))
            return
        finally:
            snapshot.close()
        yield sse("live", "{}")
        async for text in self._changes(sub):
            yield text

    async def _changes(self, sub: Subscriber) -> AsyncIterator[str]:
        """The subscriber's changes after its snapshot, numbered, until it overflows or its view
        is replaced."""
        seq = 0
        while not sub.overflowed:
            try:
                data = await asyncio.wait_for(sub.queue.get(), self.settings.heartbeat_s)
                sub.taken(data)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            # The changes waiting go out together (a send a change cost too much), a page a write.
            if sub.overflowed:
                break
            await self.turns.take()
            events = []
            while data != REPLACED:
                passing = data if sub.rows is None else sub.rows.passing(data)
                if passing is not None:
                    seq += 1
                    events.append(sse("change", passing, seq))
                if len(events) == _EVENTS_PER_WRITE or sub.queue.empty():
                    break
                data = sub.queue.get_nowait()
                sub.taken(data)
            if events:
                yield "".join(events)
            if data == REPLACED:
                return
        log.warning(
            "an SSE subscriber of %s fell more than VIEWS_SUBSCRIBER_QUEUE (%d changes) or"
            " VIEWS_SUBSCRIBER_QUEUE_BYTES (%d) behind: cut off",
            sub.view,
            self.settings.subscriber_queue,
            self.settings.subscriber_queue_bytes,
        )
        yield sse("error", json.dumps({"error": "this subscriber fell too far behind; subscribe again"}))


def _passing(page: list[tuple[str, str]], rows_filter: RowFilter | None) -> list[tuple[str, str]]:
    """The snapshot rows of `page` that `rows_filter` lets through (which it then remembers)."""
    if rows_filter is None:
        return page
    kept = [(k, v, json.loads(v)) for k, v in page]
    kept = [(k, v, row) for k, v, row in kept if rows_filter.matches(row)]
    for _, _, row in kept:
        rows_filter.show(row)
    return [(k, v) for k, v, _ in kept]


async def _refused(_: Request, err: Exception) -> Response:
    assert isinstance(err, BadRequest)
    retry = {"Retry-After": "1"} if err.status == 503 else None  # loading, or subscribers at the cap
    return JSONResponse({"error": str(err)}, err.status, headers=retry)


async def _http_error(_: Request, err: Exception) -> Response:
    assert isinstance(err, HTTPException)
    message = "no such path; see GET /views" if err.status_code == 404 else str(err.detail)
    return JSONResponse({"error": message}, err.status_code)


async def _bug(_: Request, err: Exception) -> Response:
    log.error("internal error: %r", err, exc_info=err)
    return JSONResponse({"error": "internal error"}, 500)
