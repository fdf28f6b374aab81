"""uvicorn's HTTP/1.1 protocol (httptools), with pull queries answered by the protocol itself.

A pull that finds its row is answered as its request line and headers are parsed: no ASGI task,
no request cycle, one write. uvicorn's request handling cost about 110 us of CPU a pull, nearly
half of what the server spent on one, on the 2-core machine. Everything else (a pull that finds no
row or has a bad key, another path or method, a request pipelined behind one still being
answered, a client not reading its answers) goes through uvicorn to the ASGI app as before, so the
order of answers on a connection is kept and the app's routes say every refusal.
"""

import asyncio
import hmac
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

__all__ = ["Access", "Bounds", "PullProtocol", "RefusalLog", "pull_protocol"]

Pull = Callable[[bytes], bytes | None]  # a request's target -> the row's JSON, or None


@dataclass(frozen=True)
class Bounds:
    """What one request may take before the server answers it: its target and its headers in
    bytes, and the time from the connection (or the last answer) to its last header. uvicorn
    sets none of them for httptools: a 10 MB URL sent slowly took 12.6 s of CPU, and a
    connection that sends nothing was kept for ever."""

    max_url_bytes: int = 8_192
    max_header_bytes: int = 16_384
    head_timeout_s: float = 10.0


@dataclass(frozen=True)
class Access:
    """Who may ask: the Host header's name must be one of `hosts` (None: any), so that a page in a
    browser cannot reach the service through a name that resolves to it (DNS rebinding); and
    with a `token`, every request but /health must carry `Authorization: Bearer <token>`."""

    hosts: frozenset[bytes] | None = frozenset({b"127.0.0.1", b"localhost", b"[::1]"})
    token: bytes | None = None

    def refusal(self, host: bytes | None, authorization: bytes | None, url: bytes) -> tuple[int, str] | None:
        """The status and reason to refuse a request with, or None."""
        if self.hosts is not None:
            name = host.strip().lower() if host else b""
            if b":" in name and not name.endswith(b"]"):
                name = name.rsplit(b":", 1)[0]  # the port
            if name not in self.hosts:
                shown = host.decode("latin-1")[:100] if host else "none"
                return 400, f"Host {shown!r} is not one this service answers to (VIEWS_ALLOWED_HOSTS)"
        if self.token is not None and url.split(b"?", 1)[0] != b"/health":
            if not hmac.compare_digest(authorization or b"", b"Bearer " + self.token):
                return 401, "a bearer token is required (Authorization: Bearer <VIEWS_TOKEN>)"
        return None


log = logging.getLogger("views")


@dataclass
class RefusalLog:
    """Refused requests in the log: the first at once, then one line a minute at most with how
    many of each status came meanwhile. A client sending bad requests in a loop (a 10 MB URL
    5 KB at a time: about ten a second here) would otherwise write a line for each, and uvicorn
    wrote one more for each ("Invalid HTTP request received.", which they were not)."""

    every_s: float = 60.0
    counts: Counter[int] = field(default_factory=Counter)
    reasons: dict[int, str] = field(default_factory=dict)  # the last reason of each status
    last_s: float = float("-inf")

    def refused(self, status: int, reason: str) -> None:
        self.counts[status] += 1
        self.reasons[status] = reason
        now = time.monotonic()
        if now - self.last_s < self.every_s:
            return
        log.warning(
            "refused %d request(s)%s: %s",
            self.counts.total(),
            "" if self.last_s == float("-inf") else f" in the last {now - self.last_s:.0f} s",
            "; ".join(f"{n}x {status} ({self.reasons[status]})" for status, n in sorted(self.counts.items())),
        )
        self.counts.clear()
        self.last_s = now


REFUSALS = RefusalLog()


class _QuietRefusals(logging.Filter):
    """Drops uvicorn's warning for a request the protocol refused and answered itself: the
    refusal stops its parser with an exception, which uvicorn takes for an invalid request."""

    answering = False  # set by a refusal until uvicorn's send_400_response, right after its warning

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.answering and record.getMessage() == "Invalid HTTP request received.")


_QUIET = _QuietRefusals()


class _Refused(Exception):
    """Raised in a parser callback to stop parsing a request that was refused and answered."""


class _Answered:
    """Where uvicorn keeps the request cycle, for a request the protocol answered itself: a
    complete response, so the next request starts at once and a body that follows is ignored."""

    response_complete = True
    message_event = asyncio.Event()  # set by uvicorn when the connection is lost; nothing waits


_ANSWERED = _Answered()


class PullProtocol(HttpToolsProtocol):
    pull: Pull  # set by pull_protocol()
    bounds: Bounds  # likewise
    access: Access  # likewise

    _refused = False
    _header_bytes = 0
    _host: bytes | None = None
    _authorization: bytes | None = None
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_done()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        _QUIET.answering = False
        if not self._refused:  # a refusal of ours stopped the parser: it is answered already
            super().send_400_response(msg)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        self._host = self._authorization = None

    def on_url(self, url: bytes) -> None:
        if len(self.url) + len(url) > self.bounds.max_url_bytes:
            self._refuse(414, f"the request target is over {self.bounds.max_url_bytes} bytes")
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > self.bounds.max_header_bytes:
            self._refuse(431, f"the request's headers are over {self.bounds.max_header_bytes} bytes")
        lowered = name.lower()
        if lowered == b"host":
            self._host = value
        elif lowered == b"authorization":
            self._authorization = value
        super().on_header(name, value)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()  # the next request's head, from now

    def _await_head(self) -> None:
        self._head_done()
        self._head_timer = self.loop.call_later(self.bounds.head_timeout_s, self._head_timed_out)

    def _head_done(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # no answer under way
            self._refuse(408, f"no whole request head within {self.bounds.head_timeout_s:g} s", raise_=False)

    def _refuse(self, status: int, reason: str, *, raise_: bool = True) -> None:
        """Answers `status` with `reason`, closes the connection and stops parsing."""
        self._refused = True
        self._head_done()
        body = json.dumps({"error": reason}).encode()
        challenge = b"www-authenticate: Bearer\r\n" if status == 401 else b""
        self.transport.write(
            STATUS_LINE.get(status, b"HTTP/1.1 %d \r\n" % status)
            + challenge
            + b"content-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n" % len(body)
            + body
        )
        self.transport.close()
        if status != 408:  # a keep-alive connection left idle: routine
            REFUSALS.refused(status, reason)
        if raise_:
            _QUIET.answering = True
            raise _Refused(reason)

    def on_headers_complete(self) -> None:
        self._head_done()
        refusal = self.access.refusal(self._host, self._authorization, self.url)
        if refusal is not None:
            self._refuse(*refusal)
        try:
            row = self.pull(self.url) if self._may_answer() else None
        except Exception:  # noqa: BLE001 - the app's route does it again, and answers and logs the failure
            row = None
        if row is None:
            super().on_headers_complete()
            return
        keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
        head = [b"HTTP/1.1 200 OK\r\n"]
        for name, value in self.server_state.default_headers:  # date, and server if configured
            head += [name, b": ", value, b"\r\n"]
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\n" % len(row))
        if not keep_alive:
            head.append(b"connection: close\r\n")
        self.transport.write(b"".join(head) + b"\r\n" + row)
        self.cycle = _ANSWERED  # type: ignore[assignment]
        if not keep_alive:
            self.transport.close()
        self.on_response_complete()  # counts the request, arms the keep-alive timer

    def _may_answer(self) -> bool:
        """A GET with nothing before it still unanswered on this connection, and a client that
        reads what it is sent."""
        return (
            self.parser.get_method() == b"GET"
            and (self.cycle is None or self.cycle.response_complete)
            and not self.expect_100_continue
            and not self.flow.write_paused
            and not self.parser.should_upgrade()
        )


def pull_protocol(
    pull: Pull, bounds: Bounds | None = None, access: Access | None = None
) -> type[PullProtocol]:
    """The protocol class for uvicorn's `http` setting, answering pulls with `pull`, refusing
    requests past `bounds` and those `access` does not let in."""
    attributes = {"pull": staticmethod(pull), "bounds": bounds or Bounds(), "access": access or Access()}
    if _QUIET not in logging.getLogger("uvicorn.error").filters:
        logging.getLogger("uvicorn.error").addFilter(_QUIET)
    return type("PullProtocol", (PullProtocol,), attributes)
