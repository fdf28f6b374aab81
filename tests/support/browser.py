"""Headless Chromium in tests, driven through Debian's chromedriver with the W3C WebDriver
protocol (JSON over HTTP: a session, a page, its elements' text, a screenshot). A few calls of
the protocol are all the page's test needs, so no client library is pinned for them."""

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# As the machine needs them: without the background-networking flags, Chromium's connections to
# Google's hosts are refused by the closed network, many at a time.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
]


class Browser:
    def __init__(self) -> None:
        for program in (CHROMIUM, CHROMEDRIVER):
            if not Path(program).exists():
                raise FileNotFoundError(f"{program} is missing: make install installs Debian's chromium")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.profile = tempfile.mkdtemp(prefix="chromium-")
        self.driver = subprocess.Popen(
            [CHROMEDRIVER, f"--port={self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self._call("GET", "/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        options = {"binary": CHROMIUM, "args": [*FLAGS, f"--user-data-dir={self.profile}"]}
        session = self._call(
            "POST", "/session", {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}}
        )
        self.session = session["sessionId"]

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 (the local chromedriver)
                return json.loads(answer.read())["value"]
        except urllib.error.HTTPError as err:
            raise RuntimeError(f"webdriver {method} {path}: {err.read().decode()[:2000]}") from None

    def open(self, url: str) -> None:
        self._call("POST", f"/session/{self.session}/url", {"url": url})

    def script(self, source: str) -> Any:
        """The value of a script run in the page (`return ...`)."""
        return self._call("POST", f"/session/{self.session}/execute/sync", {"script": source, "args": []})

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self._call("GET", f"/session/{self.session}/screenshot")))

    def close(self) -> None:
        try:
            self._call("DELETE", f"/session/{self.session}")
        finally:
            self.driver.terminate()
            self.driver.wait(10)
            shutil.rmtree(self.profile, ignore_errors=True)
