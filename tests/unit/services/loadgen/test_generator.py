"""The load loop's customer changes while the database is away: they back off, and resume."""

import logging
from typing import Any

from services.loadgen.config import LoadgenSettings
from services.loadgen.customers import Change
from services.loadgen.database import CustomerDb, DatabaseUnavailable
from services.loadgen.generator import DB_BACKOFF_MAX_S, LoadGenerator


class _Outage(CustomerDb):
    """The customer database as the generator sees it: away for `down` calls, then back."""

    def __init__(self, down: int) -> None:  # no connection: nothing here reaches a server
        self.down, self.applied = down, 0

    def apply(self, change: Change) -> int | None:
        if self.down > 0:
            self.down -= 1
            raise DatabaseUnavailable("customer database at 127.0.0.1:3306: (2013, 'Lost connection')")
        self.applied += 1
        return None


def test_changes_back_off_while_the_database_is_away_and_resume_at_their_rate(caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    db = _Outage(down=8)
    generator = LoadGenerator(LoadgenSettings(changes_per_s=4), db, producer=None)  # type: ignore[arg-type]
    generator.ids = [1, 2, 3]
    waits = [generator._change() for _ in range(8)]
    assert waits == sorted(waits) and waits[0] == 0.5 and waits[-1] == DB_BACKOFF_MAX_S
    assert [r.levelname for r in caplog.records].count("WARNING") == 1  # once per outage
    assert generator._change() == 0.25 and db.applied == 1
    assert "reachable again" in caplog.text
    assert sum(generator.changes.values()) == 1
