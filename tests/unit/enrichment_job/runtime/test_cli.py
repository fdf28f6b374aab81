"""How the job ends when a query fails: with its own reason alone when it has one (records it
had to read were deleted), else with Spark's."""

import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError
from pyspark.errors import StreamingQueryException

from enrichment_job.kafka.reader import RecordsDeleted
from enrichment_job.runtime.cli import run_until_stopped

TRACEBACK = "Traceback (most recent call last):\n  File ...\n" * 50


def _failing_spark() -> Any:
    def await_any(_: float) -> bool:
        raise StreamingQueryException(message=TRACEBACK)

    return SimpleNamespace(streams=SimpleNamespace(awaitAnyTermination=await_any))


def test_records_deleted_under_the_job_end_it_with_their_reason_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reason = RecordsDeleted(
        KafkaError(KafkaError.OFFSET_OUT_OF_RANGE, "ratings[2]: offsets 10..19 (10 records) were deleted")
    )
    assert str(reason) == "ratings[2]: offsets 10..19 (10 records) were deleted"
    stopped: list[bool] = []
    log = logging.getLogger("test-cli")
    with caplog.at_level(logging.ERROR, logger="test-cli"):
        code = run_until_stopped(
            _failing_spark(), lambda: stopped.append(True), log, threading.Event(), explain=lambda: reason
        )
    assert code == 1 and stopped == [True]
    assert caplog.messages == ["the job stops: ratings[2]: offsets 10..19 (10 records) were deleted"]


def test_any_other_failure_ends_it_with_spark_s_text(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test-cli")
    with caplog.at_level(logging.ERROR, logger="test-cli"):
        code = run_until_stopped(_failing_spark(), lambda: None, log, threading.Event())
    assert code == 1
    assert caplog.messages[0].startswith("a query failed; the job stops")
    assert "Traceback" in caplog.messages[0]


class _Streams:
    """Spark's query manager as the views job sees it: a view's query fails, another is
    dropped (it ends), and each is reported until the job resets what ended."""

    def __init__(self, stopping: threading.Event) -> None:
        self.outcomes: list[Any] = [StreamingQueryException(message="view failed"), True, False]
        self.stopping, self.resets, self.asked = stopping, 0, 0

    def awaitAnyTermination(self, _: float) -> bool:
        self.asked += 1
        if not self.outcomes or self.asked > 20:  # done, or spinning: stop either way
            self.stopping.set()
            return False
        outcome = self.outcomes[0]
        if isinstance(outcome, Exception):
            raise outcome
        if not outcome:  # nothing ended this second
            self.outcomes.pop(0)
        return bool(outcome)

    def resetTerminated(self) -> None:
        self.resets += 1
        self.outcomes.pop(0)


def test_a_query_the_job_can_go_on_without_is_reset_once_and_the_job_goes_on() -> None:
    stopping = threading.Event()
    streams = _Streams(stopping)
    asked: list[bool] = []

    def goes_on() -> bool:
        asked.append(True)
        return True

    spark: Any = SimpleNamespace(streams=streams)
    code = run_until_stopped(spark, lambda: None, logging.getLogger("test-cli"), stopping, goes_on=goes_on)
    assert code == 0
    assert streams.resets == 2 and len(asked) == 2  # the failure and the end, each reset once
    assert streams.asked == 4  # no spin on a failure that was already handled


def test_tick_is_called_every_turn_while_the_queries_run() -> None:
    stopping, ticks = threading.Event(), []

    def await_any(_: float) -> bool:
        if len(ticks) == 3:
            stopping.set()
        return False  # nothing ended within the second

    spark = SimpleNamespace(streams=SimpleNamespace(awaitAnyTermination=await_any))
    code = run_until_stopped(
        spark,  # type: ignore[arg-type]
        lambda: None,
        logging.getLogger("test-cli"),
        stopping,
        tick=lambda: ticks.append(1),
    )
    assert code == 0 and len(ticks) == 3
