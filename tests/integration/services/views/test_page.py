"""The views page in headless Chromium: it lists the views, shows one as a live table, a new
batch of the changelog changes the row on screen, and customers' text stays text. A screenshot
is kept in .state/test-artifacts/ (TEST_ARTIFACTS overrides)."""

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.browser import Browser
from support.views_api import Service, Views, customer

StackEnv = dict[str, str]
ROOT = Path(__file__).resolve().parents[4]
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", ROOT / ".state" / "test-artifacts"))
ROWS = (
    "return [...document.querySelectorAll('#rows tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
)


def until(check: Callable[[], Any], what: str, timeout_s: float = 30) -> Any:
    deadline, seen = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        seen = check()
        if seen:
            return seen
        time.sleep(0.2)
    pytest.fail(f"the page did not show {what} within {timeout_s} s (last seen: {seen!r})")


def test_the_page_lists_the_views_and_a_new_batch_changes_the_row_on_screen(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    hostile = '<img src=x onerror="document.title=1">'
    views.write(
        [customer(i, i) for i in range(1, 6)] + [customer(6, 6, hostile)],
        [{"club_status": "platinum", "channel": "web", "hour": "2026-11-24T03", "ratings": 7}],
    )
    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    browser = Browser()
    try:
        browser.open(f"http://127.0.0.1:{service.port}/")
        listed = "return [...document.querySelectorAll('#catalog tbody tr')].map(r => r.cells[0].textContent)"
        assert until(lambda: browser.script(listed), "the views") == ["customer_ratings", "segment_hourly"]
        rows = until(lambda: len(browser.script(ROWS)) == 6 and browser.script(ROWS), "six rows")
        header = browser.script("return [...document.querySelectorAll('#rows th')].map(c => c.textContent)")
        assert header == ["user_id", "ratings", "average_stars", "club_status", "customer_matched"]
        assert ["3", "3", "2.5", "gold", "true"] in rows
        assert ["6", "6", "2.5", hostile, "true"] in rows  # text, not markup
        assert browser.script("return document.querySelectorAll('#rows img').length") == 0

        views.write([customer(3, 99, "platinum")])
        changed = until(
            lambda: ["3", "99", "2.5", "platinum", "true"] in browser.script(ROWS), "the changed row"
        )
        assert changed
        flashed = "return [...document.querySelectorAll('#rows tr.changed')].map(r => r.cells[0].textContent)"
        assert browser.script(flashed) == ["3"]
        assert len(browser.script(ROWS)) == 6
        browser.screenshot(ARTIFACTS / "views-page.png")
        assert (ARTIFACTS / "views-page.png").stat().st_size > 10_000
    finally:
        browser.close()
        service.stop()
