"""The sink: alerts in, Slack messages out, each alert in Slack exactly once (bot mode).

    1. reconcile: ids the ledger holds as `pending` (a crash or a failed call left them
       undecided) are looked up in the channel's history by message metadata: found -> posted,
       not found -> forgotten, so they are posted below. (Webhook and print mode cannot look:
       they post again, at least once rather than lost.)
    2. skip alerts the ledger holds as posted (a replayed batch) and repeats within the batch
    3. fold: as many single messages as the token bucket allows now, the rest in one summary; each
       single message with the customer's customer_ratings row when the views service gives it
       within SLACK_VIEWS_TIMEOUT_MS
    4. per message: ledger `pending` (committed), wait for a token, post, ledger `posted`
The loop commits the Kafka offsets only after write() returns, so the ledger always leads.
"""

import logging
import time

from foundation.errors import FatalSinkError
from services.core.records import Incoming, Rejected
from services.slack_notifier.alert import Alert
from services.slack_notifier.config import SlackSettings
from services.slack_notifier.history import HistoryLookup
from services.slack_notifier.ledger import Ledger, ledger_path
from services.slack_notifier.message import SlackMessage, covered_ids, fold
from services.slack_notifier.rate import TokenBucket
from services.slack_notifier.responses import MessageRejected
from services.slack_notifier.slack import Delivery, delivery

__all__ = ["HISTORY_MARGIN_S", "SlackSink", "make_sink"]

log = logging.getLogger(__name__)
HISTORY_MARGIN_S = 600.0


class SlackSink:
    def __init__(
        self,
        settings: SlackSettings,
        transport: Delivery,
        ledger: Ledger,
        history: HistoryLookup | None = None,
    ) -> None:
        self.settings, self.transport, self.ledger, self.history = settings, transport, ledger, history
        self.bucket = TokenBucket(settings.max_messages_per_second, settings.burst_messages)
        self._started = False

    def write(self, records: list[Incoming[Alert]]) -> list[Rejected]:
        if not self._started:
            self.transport.check()
            pruned = self.ledger.prune(self.settings.ledger_keep_days)
            log.info("%s mode; ledger %s (%d old ids pruned)", self.transport.mode, self.ledger.path, pruned)
            self._started = True
        self._reconcile()
        todo, rejected = self._not_posted(records)
        alerts = [a for a, _ in todo.values()]
        histories = self.history.rows(alerts) if self.history is not None and alerts else {}
        messages = fold(alerts, self.bucket.available(), self.settings.summary_max_lines, histories)
        for message in messages:
            try:
                self._post(message, {i: todo[i][0].rating for i in message.rating_ids})
            except MessageRejected as err:
                self.ledger.forget(message.rating_ids)
                rejected += [Rejected(r.message, str(err)) for i in message.rating_ids for r in todo[i][1]]
        return rejected

    # 1. pending ids: does Slack have them?
    def _reconcile(self) -> None:
        pending = self.ledger.pending()
        if not pending:
            return
        history = self.transport.history(self.ledger.last_channel(), min(pending.values()) - HISTORY_MARGIN_S)
        if history is None:
            log.warning(
                "%d alert(s) may or may not be in Slack (%s mode cannot read the channel): posting again",
                len(pending),
                self.transport.mode,
            )
            self.ledger.forget(pending)
            return
        found = 0
        for posted in history:
            ids = covered_ids(posted.get("metadata")) & pending.keys()
            if ids:
                self.ledger.mark_posted(ids, self.ledger.last_channel(), str(posted.get("ts")))
                found += len(ids)
        missing = pending.keys() - self.ledger.posted(pending)
        self.ledger.forget(missing)
        log.info(
            "reconciled %d pending alert(s): %d already in Slack, %d to post",
            len(pending),
            found,
            len(missing),
        )

    # 2. what is left to post
    def _not_posted(
        self, records: list[Incoming[Alert]]
    ) -> tuple[dict[int, tuple[Alert, list[Incoming[Alert]]]], list[Rejected]]:
        """The alerts to post, by rating id, each with its records (the same rating more than
        once), and the dead letters: another rating under an id already posted or in the batch."""
        done = self.ledger.ratings(r.value.rating_id for r in records)
        todo: dict[int, tuple[Alert, list[Incoming[Alert]]]] = {}
        rejected: list[Rejected] = []
        for r in records:
            alert = r.value
            said = done[alert.rating_id] if alert.rating_id in done else None
            if alert.rating_id in todo:
                said = todo[alert.rating_id][0].rating
            if said is not None and said != alert.rating:
                where = "" if alert.rating_id in done else " in this batch"
                rejected.append(
                    Rejected(
                        r.message,
                        f"rating_id {alert.rating_id} was alerted already{where} for another rating (its "
                        "user, stars, time, channel or message differ): two ratings share one id",
                    )
                )
            elif alert.rating_id not in done:
                todo.setdefault(alert.rating_id, (alert, []))[1].append(r)
        if done:
            log.info("skipped %d alert(s) already posted (a replay)", len(done))
        return todo, rejected

    # 4. one message, recorded before and after
    def _post(self, message: SlackMessage, ratings: dict[int, str]) -> None:
        self.ledger.mark_pending(message.rating_ids, ratings)
        self.bucket.take()
        started = time.monotonic()
        receipt = self.transport.post(message)
        self.ledger.mark_posted(message.rating_ids, receipt.channel, receipt.ts)
        log.info(
            "posted %s for rating id(s) %s in %.0f ms",
            message.kind,
            _ids(message.rating_ids),
            (time.monotonic() - started) * 1000,
        )

    def close(self) -> None:
        self.ledger.close()
        if self.history is not None:
            self.history.close()


def _ids(ids: tuple[int, ...]) -> str:
    shown = ", ".join(str(i) for i in ids[:5])
    return shown + (f" (+{len(ids) - 5})" if len(ids) > 5 else "")


def make_sink(settings: SlackSettings) -> SlackSink:
    try:
        ledger = Ledger(ledger_path(settings.state_dir))
    except OSError as err:
        raise FatalSinkError(
            f"cannot open the ledger under SLACK_STATE_DIR={settings.state_dir}: {err}"
        ) from err
    history = (
        HistoryLookup(settings.views_url, settings.views_timeout_ms / 1000) if settings.views_url else None
    )
    return SlackSink(settings, delivery(settings), ledger, history)
