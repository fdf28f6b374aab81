"""The customer's history beside an alert: their row of the `customer_ratings` materialized view,
asked of the views query service (GET /views/customer_ratings/<user_id>).

A lookup never holds an alert up for long and never loses one: the lookups of a batch run side
by side and the batch waits for them at most `SLACK_VIEWS_TIMEOUT_MS` in all; an alert whose
row did not come in time (the service slow, down, answering an error or something unreadable)
goes out without it.
"""

import concurrent.futures
import json
import logging
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from services.slack_notifier.alert import Alert

__all__ = ["WARN_EVERY_S", "History", "HistoryLookup", "history_text", "ordinal"]

log = logging.getLogger(__name__)
WARN_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class History:
    ratings: int
    unhappy_ratings: int
    average_stars: float
    last_rating_time: int
    last_rating_id: int

    @classmethod
    def parse(cls, row: Any) -> "History | None":
        """The figures of a customer_ratings row, read strictly; None when they are not there."""
        if not isinstance(row, dict):
            return None
        ints = ("ratings", "unhappy_ratings", "last_rating_time", "last_rating_id")
        if any(not isinstance(row.get(k), int) or isinstance(row.get(k), bool) for k in ints):
            return None
        average = row.get("average_stars")
        if not isinstance(average, int | float) or isinstance(average, bool):
            return None
        return cls(
            ratings=int(row["ratings"]),
            unhappy_ratings=int(row["unhappy_ratings"]),
            average_stars=float(average),
            last_rating_time=int(row["last_rating_time"]),
            last_rating_id=int(row["last_rating_id"]),
        )

    def includes(self, alert: Alert) -> bool:
        """Whether the row has counted the alert's rating already (the views job may not have)."""
        return (self.last_rating_time, self.last_rating_id) >= (alert.rating_time_ms, alert.rating_id)


class HistoryLookup:
    def __init__(self, base_url: str, timeout_s: float) -> None:
        self.base_url, self.timeout_s = base_url.rstrip("/"), timeout_s
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="views-lookup")
        self._warned_at = -WARN_EVERY_S

    def rows(self, alerts: list[Alert]) -> dict[int, History]:
        """user id -> History, for the users whose row came within the timeout."""
        deadline = time.monotonic() + self.timeout_s
        futures = {self.pool.submit(self._get, user, deadline): user for user in {a.user_id for a in alerts}}
        done, late = concurrent.futures.wait(futures, timeout=self.timeout_s)
        found: dict[int, History] = {}
        problems: list[str] = (
            [f"{len(late)} lookup(s) slower than {self.timeout_s * 1000:.0f} ms"] if late else []
        )
        for future in done:
            history, problem = future.result()
            if history is not None:
                found[futures[future]] = history
            elif problem:
                problems.append(problem)
        if problems and time.monotonic() - self._warned_at >= WARN_EVERY_S:
            self._warned_at = time.monotonic()
            log.warning("alerts go out without the customer's history: %s (%s)", problems[0], self.base_url)
        return found

    def _get(self, user: int, deadline: float) -> tuple[History | None, str]:
        url = f"{self.base_url}/views/customer_ratings/{user}"
        try:
            with urllib.request.urlopen(url, timeout=max(deadline - time.monotonic(), 0.001)) as answer:  # noqa: S310
                history = History.parse(json.loads(answer.read()))
                return history, "" if history else "a row without the expected figures"
        except urllib.error.HTTPError as err:
            return None, "" if err.code == 404 else f"HTTP {err.code}"  # 404: no rating counted yet
        except (OSError, ValueError) as err:
            return None, f"{type(err).__name__}: {err}"

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def history_text(history: History, alert: Alert) -> str:
    """What the alert says of the customer's history."""
    if history.includes(alert):
        return (
            f"{ordinal(history.unhappy_ratings)} unhappy rating; "
            f"average {history.average_stars:.1f} over {history.ratings} ratings"
        )
    return (
        f"before this one: {history.unhappy_ratings} unhappy of {history.ratings} ratings, "
        f"average {history.average_stars:.1f}"
    )
