"""Which of this run's alerts the Slack notifier has posted, from its ledger of posted rating ids
(one id per alert, whether it went out alone or folded into a summary message)."""

from pathlib import Path

from services.slack_notifier.ledger import Ledger, ledger_path


def posted_ids(state_dir: Path, id_range: tuple[int, int]) -> dict[int, float] | None:
    """Rating id -> when its alert was posted (epoch s), for this run's ids."""
    if not ledger_path(state_dir).exists():
        return None
    ledger = Ledger(ledger_path(state_dir))
    try:
        return ledger.posted_between(*id_range)
    finally:
        ledger.close()
