"""The fault matrix's judge, from figures alone: which exits a row's fault explains, and when a
row (or a self-test built to fail) is met."""

import signal
from collections import Counter

from infra.demo.reconcile import NOT_UTF8, WITHOUT_BYTES, Check
from infra.faults.run import Exit, Row, last_error, unexpected, unmet_without_column

KILLED = -signal.SIGKILL


def test_an_exit_of_a_process_the_fault_does_not_declare_is_unexpected_even_when_it_killed_it() -> None:
    exits = [Exit("enrichment", KILLED, ""), Exit("views", KILLED, "")]
    injected = Counter({("enrichment", KILLED): 1, ("views", KILLED): 1})
    assert unexpected(exits, injected, ("enrichment",)) == [Exit("views", KILLED, "")]


def test_exits_beyond_what_was_injected_or_with_another_code_are_unexpected() -> None:
    injected = Counter({("enrichment", KILLED): 2, ("enrichment", 3): 1})
    exits = [
        Exit("enrichment", KILLED, ""),
        Exit("enrichment", 1, "ERROR a query failed"),  # a crash the fault did not cause
        Exit("enrichment", KILLED, ""),
        Exit("enrichment", 3, "fenced"),
        Exit("enrichment", KILLED, ""),  # a third kill: only two were injected
    ]
    assert unexpected(exits, injected, ("enrichment",)) == [exits[1], exits[4]]
    assert unexpected([], injected, ("enrichment",)) == []


def test_the_last_error_line_is_the_one_a_reader_wants() -> None:
    log = "INFO batch 1\nERROR views: MSG_SIZE_TOO_LARGE\n%3|librdkafka noise\nINFO stopping\n"
    assert last_error(log) == "ERROR views: MSG_SIZE_TOO_LARGE"
    assert last_error("INFO started\nINFO stopping\n") == "INFO stopping"
    assert last_error("") == "(no log)"


def _met(**fields: object) -> Row:
    row = Row("r", "i", "e", views_ok=True, recovered_s=1.0, ok=True)
    for name, value in fields.items():
        setattr(row, name, value)
    return row


def test_a_row_is_judged_by_its_verdict_and_a_self_test_by_failing_for_its_reason() -> None:
    assert _met().judged
    assert not _met(ok=False).judged
    exited = _met(
        ok=False, unexpected_exits=["views (-9, SIGKILL): x"], built_to_fail="unexpected exit of views"
    )
    assert exited.judged and exited.exits == "views (-9, SIGKILL)"
    wrong = _met(
        ok=False, views_ok=False, views_differ=["segment_hourly"], built_to_fail="segment_hourly differs"
    )
    assert wrong.judged and wrong.views == "NO: segment_hourly"
    # A self-test row that was met, or failed for another reason, shows the judge is broken.
    assert not _met(built_to_fail="unexpected exit of views").judged
    other = _met(
        ok=False, views_ok=False, views_differ=["customer_ratings"], built_to_fail="segment_hourly differs"
    )
    assert not other.judged
    assert other.as_json()["judged_ok"] is False


def test_a_row_fails_on_records_not_utf8_or_dead_letters_whose_bytes_are_nowhere() -> None:
    """Counts no column shows: the judge must still see them."""
    met = {NOT_UTF8: Check(NOT_UTF8, 0, 0), WITHOUT_BYTES: Check(WITHOUT_BYTES, 0, 0)}
    assert unmet_without_column(met) == []
    lost = {**met, WITHOUT_BYTES: Check(WITHOUT_BYTES, 1, 0)}
    assert unmet_without_column(lost) == [lost[WITHOUT_BYTES]]
    assert unmet_without_column({**met, NOT_UTF8: Check(NOT_UTF8, 2, 0)}) == [Check(NOT_UTF8, 2, 0)]
    assert unmet_without_column({"lake rows": Check("lake rows", 9, 10)}) == []  # a column of its own
