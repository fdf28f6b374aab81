"""Rating values as the web site writes them (JSON), for tests."""

import json
from typing import Any


def rating_value(**overrides: Any) -> bytes:
    """A readable rating; a field given as `...` is left out."""
    fields = {
        "rating_id": 1,
        "user_id": 7,
        "stars": 4,
        "route_id": 3,
        "rating_time": 1_000,
        "channel": "web",
        "message": "ok",
    }
    fields.update(overrides)
    return json.dumps({k: v for k, v in fields.items() if v is not ...}).encode()
