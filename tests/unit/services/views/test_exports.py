"""COPY TO STDOUT: the statements as psql's \\copy and drivers send them, and the rows written as
PostgreSQL writes them in text and CSV."""

import csv
import io

import pytest

from services.views.exports import Export, lines, parse
from services.views.sql import Result, SqlError, pg_column

COLUMNS = (pg_column("user_id", "int"), pg_column("message", "string"), pg_column("vip", "boolean"))


@pytest.mark.parametrize(
    ("sql", "export"),
    [
        (  # psql's \copy (...) TO 'file' CSV HEADER
            "COPY ( SELECT * FROM customer_ratings WHERE user_id < 4 ) TO STDOUT CSV HEADER",
            Export(
                "SELECT * FROM customer_ratings WHERE user_id < 4",
                csv=True,
                header=True,
                delimiter=",",
                null="",
            ),
        ),
        (
            "copy (select 1) to stdout with (format csv, header true, delimiter ';', null 'n/a');",
            Export("select 1", csv=True, header=True, delimiter=";", null="n/a"),
        ),
        ("COPY (SELECT 1) TO STDOUT (FORMAT text)", Export("SELECT 1")),
        (
            "COPY (SELECT 1) TO STDOUT WITH DELIMITER AS '|' NULL ''",
            Export("SELECT 1", delimiter="|", null=""),
        ),
        ("COPY customer_ratings TO STDOUT", Export("SELECT * FROM customer_ratings")),
        (
            'COPY public."Odd v" (a, "B") TO STDOUT WITH (FORMAT csv)',
            Export('SELECT a, "B" FROM "Odd v"', csv=True, delimiter=",", null=""),
        ),
        ("COPY (SUBSCRIBE customer_ratings) TO STDOUT", None),  # SUBSCRIBE's
        ("SELECT 'COPY (SELECT 1) TO STDOUT'", None),
    ],
)
def test_statements_as_psql_and_drivers_send_them(sql: str, export: Export | None) -> None:
    assert parse(sql) == export


@pytest.mark.parametrize(
    ("sql", "sqlstate", "named"),
    [
        ("COPY customer_ratings FROM STDIN", "25006", "read only"),
        ("COPY customer_ratings (user_id) FROM '/tmp/x'", "25006", "read only"),
        ("COPY customer_ratings TO '/tmp/x.csv'", "0A000", "writes no file"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT binary)", "0A000", "binary"),
        ("COPY (SELECT 1) TO STDOUT BINARY", "0A000", "binary"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT csv, FORCE_QUOTE *)", "42601", "FORCE_QUOTE"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT csv, ESCAPE '!')", "0A000", "escape"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT xml)", "22023", "xml"),
        ("COPY (SELECT 1) TO STDOUT (DELIMITER 'ab')", "22023", "one byte"),
        ("COPY (SELECT 1) TO STDOUT (DELIMITER 'x')", "22023", "one byte"),  # a letter, in text
        ("COPY (SELECT 1) TO STDOUT (FORMAT csv, DELIMITER '\"')", "22023", "no quote"),
        ("COPY (SELECT 1) TO STDOUT CSV FORCE QUOTE *", "42601", "FORCE QUOTE"),
    ],
)
def test_what_is_not_served_is_refused_naming_it(sql: str, sqlstate: str, named: str) -> None:
    with pytest.raises(SqlError, match=f"(?i){named}") as refused:
        parse(sql)
    assert refused.value.sqlstate == sqlstate


ROWS = Result(
    COLUMNS,
    [
        ("1", "plain", "t"),
        ("2", 'tab\there, "quoted", a;semicolon', None),
        ("3", "two\nlines \\ and a backslash", "f"),
        ("4", "", "t"),
    ],
)


def test_text_format_escapes_as_postgresql_does_and_writes_null_as_backslash_n() -> None:
    export = parse("COPY (SELECT 1) TO STDOUT")
    assert export is not None
    assert list(lines(ROWS, export)) == [
        b"1\tplain\tt\n",
        b'2\ttab\\there, "quoted", a;semicolon\t\\N\n',
        b"3\ttwo\\nlines \\\\ and a backslash\tf\n",
        b"4\t\tt\n",
    ]
    semicolons = parse("COPY (SELECT 1) TO STDOUT (DELIMITER ';', HEADER)")
    assert semicolons is not None
    written = list(lines(ROWS, semicolons))
    assert written[0] == b"user_id;message;vip\n"
    assert written[2] == b'2;tab\\there, "quoted", a\\;semicolon;\\N\n'


def test_csv_reads_back_as_the_rows_with_null_and_empty_told_apart() -> None:
    export = parse("COPY (SELECT 1) TO STDOUT WITH (FORMAT csv, HEADER)")
    assert export is not None
    text = b"".join(lines(ROWS, export)).decode()
    assert text.splitlines()[-1] == '4,"",t'  # an empty string is quoted, null is nothing
    read = list(csv.reader(io.StringIO(text)))
    assert read[0] == ["user_id", "message", "vip"]
    assert read[1:] == [[v if v is not None else "" for v in row] for row in ROWS.rows]
    assert text.splitlines()[2] == '2,"tab\there, ""quoted"", a;semicolon",'  # null: nothing at all
