"""A PostgreSQL session's own statements: transactions, SET, RESET and SHOW, answered as a
read-only PostgreSQL answers the ones drivers send, and refused with an SQLSTATE otherwise."""

import pytest

from services.views.cursors import Rows
from services.views.session import SERVER_VERSION, Session
from services.views.sql import Result, SqlError, pg_column


def _shown(session: Session, sql: str) -> str | None:
    answer = session.command(sql)
    assert isinstance(answer, Result)
    assert answer.tag(1) == "SHOW"  # PostgreSQL's tag for SHOW has no count
    return answer.rows[0][0]


def test_the_settings_drivers_send_are_taken_and_shown() -> None:
    session = Session()
    assert session.command("SET extra_float_digits = 3") == "SET"  # JDBC, as it connects
    assert session.command("SET application_name = 'PostgreSQL JDBC Driver'") == "SET"
    assert session.command("set SESSION search_path TO public;") == "SET"
    assert session.command("SET TIME ZONE 'Europe/Paris'") == "SET"
    assert session.command("SET client_encoding TO 'utf8'") == "SET"
    assert (
        session.command("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED") == "SET"
    )
    assert _shown(session, "SHOW application_name") == "PostgreSQL JDBC Driver"
    assert _shown(session, "SHOW EXTRA_FLOAT_DIGITS") == "3"
    assert _shown(session, "show time zone") == "Europe/Paris"
    assert _shown(session, "SHOW client_encoding") == "UTF8"
    assert _shown(session, "SHOW transaction isolation level") == "read committed"
    assert _shown(session, "SHOW server_version") == SERVER_VERSION
    assert session.command("RESET application_name") == "RESET"
    assert _shown(session, "SHOW application_name") == ""
    assert session.command("RESET ALL") == "RESET"
    assert _shown(session, "SHOW timezone") == "UTC"
    every = session.command("SHOW ALL")
    assert isinstance(every, Result) and [c.name for c in every.columns] == ["name", "setting", "description"]
    settings = {name: value for name, value, _ in every.rows}
    assert settings["server_version"] == SERVER_VERSION and settings["transaction_read_only"] == "on"
    assert settings.keys() >= {"application_name", "TimeZone", "DateStyle", "search_path"}


@pytest.mark.parametrize(
    ("sql", "sqlstate", "text"),
    [
        (
            "SET lock_timeout = 1000",
            "0A000",
            "SET lock_timeout is not served (these are: application_name",
        ),
        ("SET statement_timeout = 'soon'", "22023", 'invalid value for parameter "statement_timeout"'),
        ("SET client_encoding = 'LATIN1'", "22023", "only UTF8 is served"),
        ("SET extra_float_digits = 9", "22023", "an integer from -15 to 3"),
        ("SET TRANSACTION READ WRITE", "25006", "read only"),
        ("SET", "42601", "SET name = value"),
        ("SHOW work_mem", "42704", 'unrecognized configuration parameter "work_mem"'),
        ("RESET work_mem", "0A000", "RESET work_mem is not served"),
        ("RELEASE", "42601", "syntax error in RELEASE"),
    ],
)
def test_a_setting_not_served_is_refused_with_its_sqlstate(sql: str, sqlstate: str, text: str) -> None:
    with pytest.raises(SqlError) as refused:
        Session().command(sql)
    assert refused.value.sqlstate == sqlstate and text in str(refused.value)


def test_a_failed_transaction_refuses_all_but_its_end_and_commit_of_it_rolls_back() -> None:
    session = Session()
    assert session.command("BEGIN") == "BEGIN" and session.state == b"T"
    session.failed()
    assert session.state == b"E"
    with pytest.raises(SqlError) as refused:
        session.command("SHOW application_name")
    assert refused.value.sqlstate == "25P02"
    assert session.command("COMMIT") == "ROLLBACK" and session.state == b"I"
    session.failed()  # outside a transaction a failure leaves the session idle
    assert session.state == b"I"
    assert session.command("START TRANSACTION READ ONLY") == "START TRANSACTION" and session.state == b"T"
    assert session.command("END") == "COMMIT" and session.state == b"I"


def test_savepoints_nest_in_a_transaction_and_rolling_back_to_one_ends_a_failure() -> None:
    session = Session()
    with pytest.raises(SqlError) as outside:
        session.command("SAVEPOINT a")
    assert outside.value.sqlstate == "25P01"
    session.command("BEGIN")
    assert session.command("SAVEPOINT _pg3_1") == "SAVEPOINT"
    assert session.command('SAVEPOINT "B"') == "SAVEPOINT"
    session.failed()
    with pytest.raises(SqlError, match="aborted"):
        session.command("RELEASE SAVEPOINT _pg3_1")
    assert session.command("ROLLBACK TO SAVEPOINT _pg3_1") == "ROLLBACK" and session.state == b"T"
    with pytest.raises(SqlError) as gone:
        session.command('RELEASE "B"')  # rolled back past it
    assert gone.value.sqlstate == "3B001"
    session.state = b"T"
    assert session.command("RELEASE _pg3_1") == "RELEASE" and session.savepoints == []
    assert session.command("COMMIT") == "COMMIT" and session.state == b"I"


def test_comments_before_a_session_statement_are_skipped_as_postgresql_skips_them() -> None:
    session = Session()
    assert Session.is_command("-- a driver's note\nBEGIN") and Session.is_command("/* x */ SET a = b")
    assert not Session.is_command("-- BEGIN\nSELECT 1")
    assert session.command("-- opened by the report\n  BEGIN;") == "BEGIN" and session.state == b"T"
    assert session.command("/* set by the tool */ SET application_name = 'report'") == "SET"
    assert _shown(session, "-- what it is\nSHOW application_name") == "report"
    assert session.command("/* done */ COMMIT") == "COMMIT" and session.state == b"I"


def test_a_cursor_without_hold_ends_with_its_transaction_one_with_hold_outlives_its_commit() -> None:
    session = Session()
    rows = Result((pg_column("k", "int"),), [("1",)])
    session.declare("outside", Rows(rows, hold=True))  # declared with no transaction: kept
    session.command("BEGIN")
    session.declare("plain", Rows(rows, hold=False))
    session.declare("held", Rows(rows, hold=True))
    assert session.command("COMMIT") == "COMMIT"
    assert sorted(session.cursors) == ["held", "outside"]
    session.command("BEGIN")
    session.declare("rolled_back", Rows(rows, hold=True))
    session.command("ROLLBACK")  # the transaction that declared it: gone; the others stay
    assert sorted(session.cursors) == ["held", "outside"]
    session.command("BEGIN")
    session.declare("failed", Rows(rows, hold=True))
    session.failed()
    assert session.command("COMMIT") == "ROLLBACK"  # a failed transaction's COMMIT rolls back
    assert sorted(session.cursors) == ["held", "outside"]
    session.close_cursors()
    assert session.cursors == {}


@pytest.mark.parametrize(
    ("value", "shown", "seconds"),
    [
        ("0", "0", None),
        ("1500", "1500ms", 1.5),
        ("'2s'", "2s", 2.0),
        ("120000", "2min", 120.0),
        ("DEFAULT", "0", None),
    ],
)
def test_statement_timeout_is_read_as_postgresql_reads_it(
    value: str, shown: str, seconds: float | None
) -> None:
    session = Session()
    assert session.command(f"SET statement_timeout = {value}") == "SET"
    assert _shown(session, "SHOW statement_timeout") == shown
    assert session.statement_timeout_s == seconds
    session.command("RESET statement_timeout")
    assert session.statement_timeout_s is None
