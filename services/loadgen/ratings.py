"""Fake ratings as the web site writes them (DESIGN.md, "Records"), and the occasional unreadable
one, so the dead-letter path shows in the demo."""

import json
import random
from typing import Any

__all__ = ["BAD_RECORDS", "CHANNELS", "MESSAGES", "STAR_WEIGHTS", "bad_record", "encode", "fake_rating"]

CHANNELS = ("web", "iOS", "android")
STAR_WEIGHTS = (10, 10, 20, 30, 30)  # stars 1..5
MESSAGES = (
    "Exceeded all my expectations. Thank you!",
    "more peanuts please",
    "why is it so difficult to keep the bathrooms clean?",
    "Surprisingly good, maybe you are getting your mojo back at long last!",
    "thank you for the most friendly, helpful experience today at your new lounge",
    "airport refurb looks great, will fly with you again!",
    "your team here rocks!",
    "meh",
    "(expletive deleted)",
    "worst. flight. ever. #neveragain",
    "is this as good as it gets? really ?",
    "the delay was long and nobody told us why",
)
BAD_RECORDS = (
    b"{not json",
    b'{"rating_id": 1, "user_id": 2, "stars": 9, "rating_time": 1}',
    b'{"user_id": 2, "stars": 3}',
)


def fake_rating(
    rnd: random.Random, rating_id: int, user_ids: list[int], unmatched_share: float, now_ms: int
) -> dict[str, Any]:
    if user_ids and rnd.random() >= unmatched_share:
        user_id = rnd.choice(user_ids)
    else:
        user_id = 900_000_000 + rnd.randrange(1_000_000)  # no customer has such an id
    return {
        "rating_id": rating_id,
        "user_id": user_id,
        "stars": rnd.choices(range(1, 6), STAR_WEIGHTS)[0],
        "route_id": rnd.randrange(1, 100),
        "rating_time": now_ms,
        "channel": rnd.choice(CHANNELS),
        "message": rnd.choice(MESSAGES),
    }


def encode(rating: dict[str, Any]) -> tuple[bytes, bytes]:
    return str(rating["user_id"]).encode(), json.dumps(rating).encode()


def bad_record(rnd: random.Random) -> bytes:
    return rnd.choice(BAD_RECORDS)
