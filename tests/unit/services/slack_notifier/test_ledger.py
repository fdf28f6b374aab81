"""The ledger of posted alerts: pending before, posted after, durable across a reopen."""

import time
from pathlib import Path

from services.slack_notifier.ledger import Ledger


def test_pending_then_posted(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.mark_pending([1, 2])
    assert set(ledger.pending()) == {1, 2}
    assert ledger.posted([1, 2, 3]) == set()
    ledger.mark_posted([1, 2], "C1", "123.000001")
    assert ledger.pending() == {}
    assert ledger.posted([1, 2, 3]) == {1, 2}
    assert ledger.last_channel() == "C1"


def test_what_was_committed_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.sqlite3"
    ledger = Ledger(path)
    ledger.mark_posted([10], "C1", "1.0")
    ledger.mark_pending([11])
    del ledger  # no close: like a crash
    again = Ledger(path)
    assert again.posted([10, 11]) == {10}
    assert set(again.pending()) == {11}


def test_forget_and_prune(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.mark_pending([1])
    ledger.forget([1])
    assert ledger.pending() == {}
    ledger.mark_posted([2], None, None)
    ledger.conn.execute("UPDATE alerts SET updated_at = ?", (time.time() - 40 * 86400,))
    ledger.conn.commit()
    ledger.mark_posted([3], None, None)
    assert ledger.prune(keep_days=30) == 1
    assert ledger.posted([2, 3]) == {3}


def test_many_ids_at_once(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ids = list(range(2_000))
    ledger.mark_posted(ids, "C1", "1.0")
    assert ledger.posted(ids) == set(ids)
    assert ledger.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
