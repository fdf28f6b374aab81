"""A local stand-in for Slack: a threaded HTTP server that answers like the Web API at `base_url`
(auth.test, chat.postMessage, conversations.history) and like an incoming webhook at
`webhook_url`, and keeps every message it accepted.

Faults, programmable from a test: the next N posts get 429 with Retry-After (`rate_limit`) or a
5xx (`fail`); every call gets a permanent error (`refuse`); or the next post is stored and then
its answer held back until `release()` (`hold`), so a test can kill the service after Slack
accepted a message but before the service heard so."""

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

POST_METHODS = ("chat.postMessage", "webhook")
TOKEN = "xoxb-fake-token"  # noqa: S105 (the fake accepts this one token)
CHANNEL = "C0ALERTS"


class FakeSlack:
    def __init__(self, token: str = TOKEN, channels: tuple[str, ...] = (CHANNEL,)) -> None:
        self.token, self.channels = token, set(channels)
        self.messages: list[dict[str, Any]] = []
        self.calls: Counter[str] = Counter()
        self.lock = threading.Condition()
        self._rate_limited = 0
        self._retry_after = 1
        self._failing = 0
        self._fail_status = 500
        self._refusal: str | None = None
        self._holds = 0
        self.held = threading.Event()
        self.held_messages: list[dict[str, Any]] = []  # stored, their answers held
        self._release = threading.Event()
        self._last_ts = 0.0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    @property
    def webhook_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/services/T0FAKE/B0FAKE/hook-secret"

    # faults
    def rate_limit(self, posts: int, retry_after_s: int = 1) -> None:
        with self.lock:
            self._rate_limited, self._retry_after = posts, retry_after_s

    def fail(self, posts: int, status: int = 500) -> None:
        with self.lock:
            self._failing, self._fail_status = posts, status

    def refuse(self, error: str | None) -> None:
        """Every call answers with this permanent error (None: back to normal)."""
        with self.lock:
            self._refusal = error

    def hold(self, posts: int = 1) -> None:
        with self.lock:
            self._holds = posts
            self.held.clear()
            self._release.clear()

    def release(self) -> None:
        self._release.set()

    # what was posted
    def posts(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.messages)

    def wait_for_posts(self, count: int, timeout_s: float = 60) -> list[dict[str, Any]]:
        """Until at least `count` messages were accepted (or the time is up: then what there is)."""
        with self.lock:
            self.lock.wait_for(lambda: len(self.messages) >= count, timeout_s)
            return list(self.messages)

    def covered(self) -> Counter[int]:
        """How often each rating id appears in the metadata of the accepted messages."""
        seen: Counter[int] = Counter()
        for m in self.posts():
            seen.update(rating_ids(m))
        return seen

    def held_ids(self) -> set[int]:
        """The rating ids of the messages whose answers were held."""
        with self.lock:
            return {i for m in self.held_messages for i in rating_ids(m)}

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    # the server side
    def fault(self, method: str) -> tuple[int, dict[str, str], Any] | None:
        """The programmed fault for this call, if any (and count it down)."""
        with self.lock:
            if self._refusal:
                status = 404 if method == "webhook" else 200
                return status, {}, self._refusal if method == "webhook" else _error(self._refusal)
            if method not in POST_METHODS:
                return None
            if self._rate_limited:
                self._rate_limited -= 1
                return 429, {"Retry-After": str(self._retry_after)}, _error("ratelimited")
            if self._failing:
                self._failing -= 1
                return self._fail_status, {}, "upstream exploded"
        return None

    def store(self, channel: str, body: dict[str, Any], via: str) -> dict[str, Any]:
        with self.lock:
            self._last_ts = max(time.time(), self._last_ts + 0.000001)
            message = {
                "ts": f"{self._last_ts:.6f}",
                "channel": channel,
                "text": body.get("text"),
                "blocks": body.get("blocks"),
                "metadata": body.get("metadata"),
                "request": body,
                "via": via,
                "received_at": time.time(),
            }
            self.messages.append(message)
            hold = self._holds > 0
            self._holds -= 1 if hold else 0
            if hold:
                self.held_messages.append(message)
            self.lock.notify_all()
        if hold:
            self.held.set()
            self._release.wait(120)
        return message

    def history(self, params: dict[str, Any]) -> dict[str, Any]:
        oldest = float(params.get("oldest") or 0)
        limit = int(params.get("limit") or 100)
        start = int(params.get("cursor") or 0)
        with_metadata = str(params.get("include_all_metadata")).lower() in ("true", "1")
        found = [m for m in reversed(self.posts()) if m["channel"] == params.get("channel")]
        found = [m for m in found if float(m["ts"]) > oldest]
        page = found[start : start + limit]
        more = start + limit < len(found)
        keys = ("ts", "text", "blocks", "metadata") if with_metadata else ("ts", "text", "blocks")
        return {
            "ok": True,
            "messages": [{"type": "message", **{k: m[k] for k in keys if m[k] is not None}} for m in page],
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    def answer(self, method: str, token: str | None, params: dict[str, Any]) -> tuple[int, Any]:
        if method == "webhook":
            self.store("C0WEBHOOK", params, "webhook")
            return 200, "ok"
        if token != self.token:
            return 200, _error("invalid_auth" if token else "not_authed")
        if method == "auth.test":
            return 200, {"ok": True, "team": "Fake Team", "user_id": "U0BOT", "bot_id": "B0BOT"}
        return 200, self.in_channel(method, params)

    def in_channel(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method not in ("chat.postMessage", "conversations.history"):
            return _error("unknown_method")
        if params.get("channel") not in self.channels:
            return _error("channel_not_found")
        if method == "conversations.history":
            return self.history(params)
        message = self.store(str(params["channel"]), params, "api")
        return {"ok": True, "channel": message["channel"], "ts": message["ts"], "message": {}}


def rating_ids(message: dict[str, Any]) -> list[int]:
    """The rating ids a stored message names in its metadata."""
    payload = (message.get("metadata") or {}).get("event_payload", {})
    return [int(i) for i in payload.get("rating_ids", [])]


def _error(code: str) -> dict[str, Any]:
    return {"ok": False, "error": code}


def _handler(slack: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            method = url.path.removeprefix("/api/") if url.path.startswith("/api/") else "webhook"
            params = self._params(url.query)
            auth = self.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ").strip() or params.get("token")
            with slack.lock:
                slack.calls[method] += 1
            fault = slack.fault(method)
            if fault is not None:
                status, headers, body = fault
            else:
                headers = {}
                status, body = slack.answer(method, token, params)
            self._send(status, headers, body)

        do_GET = do_POST

        def _params(self, query: str) -> dict[str, Any]:
            params: dict[str, Any] = {k: v[-1] for k, v in parse_qs(query).items()}
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if "json" in self.headers.get("Content-Type", ""):
                params.update(json.loads(raw or b"{}"))
            elif raw:
                params.update({k: v[-1] for k, v in parse_qs(raw.decode()).items()})
            return params

        def _send(self, status: int, headers: dict[str, str], body: Any) -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            kind = "text/plain" if isinstance(body, str) else "application/json; charset=utf-8"
            with contextlib.suppress(OSError):  # the client may be gone (killed while held)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

    return Handler


@contextlib.contextmanager
def fake_slack(**kwargs: Any) -> Iterator[FakeSlack]:
    slack = FakeSlack(**kwargs)
    try:
        yield slack
    finally:
        slack.close()
