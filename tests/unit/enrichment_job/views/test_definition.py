"""Views declared in SQL: reading a view file, the checks that refuse what Spark would keep
wrongly or not at all (each with its message), the key from the GROUP BY, and the built-in views'
SQL files giving the rows of their declarations."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from support.frames import kafka_rows
from support.services import enriched_record

from enrichment_job.views.aggregation import aggregate_views, view_rows
from enrichment_job.views.declarations import declared
from enrichment_job.views.definition import (
    BUILT_IN,
    VISIBLE,
    ViewFile,
    ViewRefused,
    check,
    compile_view,
    enriched_columns,
    fields_read,
    having_kept,
    parse,
    read,
    rows_of,
)
from enrichment_job.views.settings import ViewsSettings
from enrichment_job.views.transforms import EVERY_FIELD, REQUIRED, parse_enriched

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
HOUR = 1_794_996_000_000  # 2026-11-18T10:00:00Z, an hour boundary
ROOT = Path(__file__).resolve().parents[4]


def _enriched(rating_id: int, **fields: Any) -> bytes:
    """Released a second after its rating time: in time for its hour (the job refuses late ones
    before the aggregation, which the SQL does not say)."""
    record = enriched_record(rating_id, **{"rating_time": HOUR + 1000, "user_id": 7, **fields})
    if "cdc_watermark_ms" not in fields:
        record["cdc_watermark_ms"] = record["rating_time"] + 1000
    return json.dumps(record).encode()


def _readable(spark: SparkSession, records: list[bytes]) -> DataFrame:
    return parse_enriched(kafka_rows(spark, list(records))).where(F.col("dlq_reason").isNull())


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


RECORDS = [
    _enriched(1, stars=5, rating_time=HOUR + 3000),
    _enriched(2, stars=1, rating_time=HOUR + 9000, club_status="platinum", message="bad"),
    _enriched(
        rating_id=3, stars=2, rating_time=HOUR + 9000, club_status="silver"
    ),  # a tie: rating_id decides
    _enriched(4, user_id=8, customer_matched=False, club_status=None, full_name=None),
    _enriched(5, user_id=9, channel=None, stars=4),
    _enriched(
        rating_id=6,
        user_id=9,
        club_status=None,
        rating_time=HOUR + 3_700_000,
        cdc_watermark_ms=HOUR + 3_800_000,
    ),
    _enriched(7, user_id=10, stars=3, channel="app", rating_time=HOUR - 1),
]


@pytest.mark.parametrize("name", ["customer_ratings", "segment_hourly"])
def test_each_built_in_views_sql_file_gives_the_rows_of_its_declaration(
    spark: SparkSession, name: str
) -> None:
    readable = _readable(spark, RECORDS)
    views = declared(ViewsSettings())
    declaration = next(v for v in views if v.name == name)
    expected = [r.asDict() for r in view_rows(aggregate_views(readable, views), views, declaration).collect()]
    from_sql = rows_of(spark, read(BUILT_IN / f"{name}.sql"), enriched_columns(readable))
    assert from_sql.columns == list(declaration.row(F.col))
    assert _sorted([r.asDict() for r in from_sql.collect()]) == _sorted(expected)
    assert len(expected) >= 4


@pytest.mark.parametrize(
    ("name", "key"),
    [("customer_ratings", ("user_id",)), ("segment_hourly", ("club_status", "channel", "hour"))],
)
def test_the_built_in_views_pass_every_check_with_the_key_of_their_declaration(
    spark: SparkSession, name: str, key: tuple[str, ...]
) -> None:
    compiled = check(spark, read(BUILT_IN / f"{name}.sql"))
    assert compiled.key == key
    assert compiled.key == next(v.key for v in declared(ViewsSettings()) if v.name == name)
    assert compiled.rows.isStreaming


def test_a_window_is_selected_by_its_start_and_the_header_gives_the_watermark_and_trigger(
    spark: SparkSession,
) -> None:
    view = parse(
        "channel_hourly",
        "-- Ratings per channel and hour.\n-- watermark: rating_ts 2 hours\n-- trigger: 5 seconds\n"
        "SELECT channel, window.start AS hour, count(*) AS ratings\nFROM enriched\n"
        "GROUP BY channel, window(rating_ts, '1 hour');\n",
    )
    assert view.watermark == ("rating_ts", "2 hours") and view.trigger == "5 seconds"
    assert view.description == "Ratings per channel and hour."
    compiled = check(spark, view)
    assert compiled.key == ("channel", "hour")
    assert compiled.rows.dtypes == [("channel", "string"), ("hour", "timestamp"), ("ratings", "bigint")]
    assert "EventTimeWatermark" in compiled.rows._jdf.queryExecution().analyzed().treeString()


def test_a_sliding_window_is_kept_each_rating_counting_in_every_window_that_holds_it(
    spark: SparkSession,
) -> None:
    """Spark plans a sliding window as an Expand, as it plans GROUPING SETS: only the latter is
    refused."""
    view = parse(
        "sliding",
        "-- watermark: rating_ts 1 hour\n"
        "SELECT channel, window.start AS hour, count(*) AS ratings FROM enriched\n"
        "GROUP BY channel, window(rating_ts, '1 hour', '20 minutes')\n",
    )
    compiled = check(spark, view)
    assert compiled.key == ("channel", "hour") and compiled.window_start == "hour"
    assert compiled.rows_per_record == 3
    rows = rows_of(spark, view, enriched_columns(_readable(spark, RECORDS)))
    counted = {(r["channel"], int(r["hour"].timestamp() * 1000)): r["ratings"] for r in rows.collect()}
    slide = 20 * 60_000
    expected: dict[tuple[str | None, int], int] = {}
    for record in map(json.loads, RECORDS):
        first = record["rating_time"] // slide * slide
        for start in (first - 2 * slide, first - slide, first):  # the windows [start, start + 1 hour)
            key = (record["channel"], start)
            expected[key] = expected.get(key, 0) + 1
    assert counted == expected
    assert sum(counted.values()) == 3 * len(RECORDS) and (None, HOUR - 2 * slide) in counted


_BY_USER = "FROM enriched GROUP BY user_id"


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        (
            "SELECT user_id, count(*) AS n FROM enriched\nGROUP BY user_id,\n  channel frm",
            "line 3, column 11: [PARSE_SYNTAX_ERROR]",
        ),
        ("SELECT user_id, count(*) AS n, nope " + _BY_USER, "line 1, column 32: [UNRESOLVED_COLUMN"),
        (
            "SELECT * FROM (SELECT user_id, count(*) AS n " + _BY_USER + ") WHERE n > 2",  # noqa: S608
            "a filter over the aggregation: write it as the view's HAVING",
        ),
        (
            "SELECT user_id, count(*) AS __having " + _BY_USER,
            "the column name __having is the views job's own",
        ),
        (
            "SELECT user_id, count(*) AS n " + _BY_USER + " ORDER BY n",
            "ORDER BY: a view's rows have no order",
        ),
        ("SELECT user_id, count(*) AS n " + _BY_USER + " LIMIT 5", "LIMIT: a view keeps every group"),
        (
            "SELECT user_id, count(DISTINCT channel) AS n " + _BY_USER,
            "Distinct aggregations are not supported",
        ),
        (
            "SELECT user_id, session_window.start AS s, count(*) AS n FROM enriched"
            " GROUP BY user_id, session_window(rating_ts, '5 minutes')",
            "not supported for session window",
        ),
        (
            "SELECT a.user_id, count(*) AS n FROM enriched a JOIN enriched b ON a.user_id = b.user_id"
            " GROUP BY a.user_id",
            "joins: a view reads the enriched stream alone",
        ),
        (
            "SELECT user_id, max(n) AS m FROM (SELECT user_id, count(*) AS n FROM enriched GROUP BY user_id)"
            " GROUP BY user_id",
            "an aggregate over an aggregate",
        ),
        ("SELECT user_id, count(*) AS n, rand() AS r " + _BY_USER, "rand() is not deterministic"),
        (
            "SELECT user_id, count(*) AS n FROM enriched WHERE rating_time < unix_millis(now())"
            " GROUP BY user_id",
            "now() is not deterministic",
        ),
        ("SELECT count(*) AS n " + _BY_USER, "GROUP BY user_id is not selected"),
        ("SELECT count(*) AS n FROM enriched", "a view needs a GROUP BY"),
        ("SELECT id, count(*) AS n FROM range(3) GROUP BY id", "a view reads FROM enriched"),
        ("SELECT user_id, count(*) AS n, sum(stars) AS n " + _BY_USER, "more than one column named n"),
        ("SELECT user_id, count(*) AS n FROM enriched GROUP BY ROLLUP(user_id)", "ROLLUP"),
        (
            "SELECT channel, club_status, count(*) AS n FROM enriched"
            " GROUP BY GROUPING SETS ((channel), (club_status))",
            "GROUPING SETS, ROLLUP and CUBE: declare one view per grouping",
        ),
        ("SELECT channel, stars, count(*) AS n FROM enriched GROUP BY CUBE(channel, stars)", "CUBE"),
    ],
)
def test_a_view_spark_would_keep_wrongly_or_not_at_all_is_refused_with_one_message(
    spark: SparkSession, sql: str, refusal: str
) -> None:
    with pytest.raises(ViewRefused) as refused:
        check(spark, parse("v", sql))
    assert str(refused.value).startswith("v: ")
    assert refusal in str(refused.value)
    assert "\n" not in str(refused.value) and "Traceback" not in str(refused.value)


@pytest.mark.parametrize(
    ("name", "text", "refusal"),
    [
        ("Bad-Name", "SELECT 1", "view name 'Bad-Name'"),
        (
            "v",
            "-- watermak: rating_ts 1 hour\nSELECT 1",
            "line 1: unknown header 'watermak'; did you mean 'watermark'?",
        ),
        (
            "v",
            "-- trigger: 1 second\n-- trigger: 2 seconds\nSELECT 1",
            "line 2: header 'trigger' given twice",
        ),
        ("v", "-- watermark: rating_ts\nSELECT 1", "give a timestamp column and a delay"),
        ("v", "-- only a comment\n", "no SELECT after the header"),
    ],
)
def test_a_file_with_a_wrong_name_or_header_is_refused_before_spark(
    name: str, text: str, refusal: str
) -> None:
    with pytest.raises(ViewRefused, match="^" + name if name == "v" else "view name") as refused:
        parse(name, text)
    assert refusal in str(refused.value)


@pytest.mark.parametrize(
    ("header", "refusal"),
    [
        (
            "-- watermark: rating_time 1 hour",
            "'rating_time' is not a timestamp column of enriched (rating_ts)",
        ),
        ("-- watermark: rating_ts an hour", "'an hour' is not an interval"),
        ("-- trigger: soon", "header trigger: 'soon' is not an interval"),
        ("-- trigger: 0.5 minutes", "header trigger: '0.5 minutes' is not an interval: only seconds"),
    ],
)
def test_a_header_spark_cannot_use_is_refused(spark: SparkSession, header: str, refusal: str) -> None:
    with pytest.raises(ViewRefused) as refused:
        check(spark, parse("v", f"{header}\nSELECT user_id, count(*) AS n {_BY_USER}"))
    assert refusal in str(refused.value)


def test_prose_in_the_header_is_the_description_not_a_setting() -> None:
    view = parse("v", "-- rating_time: the newest\n-- Note: kept live\nSELECT 1")
    assert view == ViewFile("v", "\n\nSELECT 1", "rating_time: the newest Note: kept live")


def test_validate_prints_each_valid_views_key_and_columns_and_fails_on_a_refused_one(tmp_path: Path) -> None:
    good, bad = tmp_path / "by_user.sql", tmp_path / "unkeyed.sql"
    good.write_text(f"SELECT user_id, count(*) AS ratings {_BY_USER}\n")
    bad.write_text(f"SELECT count(*) AS ratings {_BY_USER}\n")
    done = subprocess.run(
        [sys.executable, "-m", "enrichment_job.views", "validate", str(good), str(bad)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "by_user: valid; key (user_id); columns: user_id int, ratings bigint" in done.stdout
    assert "refused: unkeyed: GROUP BY user_id is not selected" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("path", sorted((ROOT / "views" / "examples").glob("*.sql")), ids=lambda p: p.name)
def test_every_example_view_passes_the_checks(spark: SparkSession, path: Path) -> None:
    compiled = check(spark, read(path))
    assert compiled.key and compiled.rows.isStreaming


_HOURLY = (
    "SELECT channel, window.start AS hour, count(*) AS ratings FROM enriched"
    " GROUP BY channel, window(rating_ts, '1 hour')"
)


def test_a_retention_needs_a_watermark_the_window_start_and_no_less_than_the_delay(
    spark: SparkSession,
) -> None:
    kept = check(spark, parse("v", f"-- watermark: rating_ts 2 hours\n-- retention: 1 day\n{_HOURLY}"))
    assert (kept.window_start, kept.retention_ms) == ("hour", 86_400_000)
    # a 3-hour window sliding by the hour is updated until 2 hours after a newer one started
    sliding = _HOURLY.replace("'1 hour')", "'3 hours', '1 hour')")
    assert "'3 hours', '1 hour'" in sliding
    kept = check(spark, parse("v", f"-- watermark: rating_ts 2 hours\n-- retention: 4 hours\n{sliding}"))
    assert kept.retention_ms == 4 * 3_600_000
    in_microseconds = sliding.replace("'3 hours', '1 hour'", "10800000000, 3600000000")
    with pytest.raises(ViewRefused, match="outlasts its slide"):
        check(spark, parse("v", f"-- watermark: rating_ts 2 hours\n-- retention: 3 hours\n{in_microseconds}"))
    for header, sql, refusal in [
        ("-- retention: 1 day", _HOURLY, "retention needs a watermark"),
        ("-- watermark: rating_ts 2 hours\n-- retention: a while", _HOURLY, "'a while' is not an interval"),
        (
            "-- watermark: rating_ts 2 hours\n-- retention: 1 hour",
            _HOURLY,
            "must be at least the watermark's delay",
        ),
        (
            "-- watermark: rating_ts 2 hours\n-- retention: 1 day",
            _HOURLY.replace("window.start AS hour", "date_format(window.start, 'HH') AS hour"),
            "needs the window's start selected as is",
        ),
        (
            "-- watermark: rating_ts 2 hours\n-- retention: 3 hours",
            _HOURLY.replace("'1 hour')", "'3 hours', '1 hour')"),
            r"delay \(2 hours\) plus what the window outlasts its slide \(7200 s\)",
        ),
    ]:
        with pytest.raises(ViewRefused, match=refusal):
            check(spark, parse("v", f"{header}\n{sql}"))


def test_a_view_s_stream_parses_the_fields_its_sql_names_and_those_every_record_has() -> None:
    def names(sql: str) -> list[str]:
        return [f.name for f in fields_read(sql).fields]

    by_status = names("SELECT CLUB_STATUS, count(*) AS n, max(`Channel`) FROM enriched GROUP BY club_status")
    assert by_status == [
        f.name for f in EVERY_FIELD.fields if f.name in {"club_status", "channel", *REQUIRED}
    ]
    assert "message" not in by_status and "email" not in by_status
    assert names("SELECT user_id, count( * ) FROM enriched GROUP BY user_id") == [
        f.name for f in EVERY_FIELD.fields if f.name in REQUIRED
    ]
    assert fields_read("SELECT * FROM enriched") == EVERY_FIELD  # a star reads every field
    assert fields_read("SELECT user_id, sum(stars * 2) FROM enriched GROUP BY user_id") == EVERY_FIELD


@pytest.mark.parametrize(
    "sql",
    [
        # the condition over a column the SELECT names (Spark's plan: a filter on the aggregation)
        "SELECT user_id, count(*) AS ratings, avg(stars) AS average_stars "
        + _BY_USER
        + " HAVING average_stars < 3",
        # over aggregates the SELECT does not have (a projection above the filter drops them)
        "SELECT user_id AS customer, count(*) AS ratings "
        + _BY_USER
        + " HAVING min(stars) < 3 AND count(*) >= 2",
        # a null condition (no channel but null ones) does not match, as in SQL
        "SELECT user_id, count(*) AS ratings " + _BY_USER + " HAVING max(channel) <> 'web'",
        "SELECT club_status, window.start AS hour, count(*) AS ratings FROM enriched"
        " GROUP BY club_status, window(rating_ts, '1 hour') HAVING sum(stars) > 3",
    ],
)
def test_a_view_with_having_keeps_every_group_with_whether_it_matches_which_are_spark_s_own_rows(
    spark: SparkSession, sql: str
) -> None:
    readable = enriched_columns(_readable(spark, RECORDS))
    view = parse("v", sql)
    native = rows_of(spark, view, readable)  # a batch: Spark's own HAVING
    kept = having_kept(spark, "v", native)
    assert kept is not None and kept.columns == [*native.columns, VISIBLE]
    rows = [r.asDict() for r in kept.collect()]
    matching = [{k: v for k, v in r.items() if k != VISIBLE} for r in rows if r[VISIBLE]]
    assert _sorted(matching) == _sorted([r.asDict() for r in native.collect()])
    assert matching and len(matching) < len(rows)  # some groups match, some do not
    assert all(r[VISIBLE] in (True, False) for r in rows)
    compiled = check(spark, view)  # and as a stream: every check passes
    assert compiled.having and compiled.columns == [c for c in native.dtypes]
    assert compiled.rows.columns == [*native.columns, VISIBLE]
    assert compiled.key == (native.columns[0], *(("hour",) if "window" in sql else ()))


def test_a_view_without_having_is_kept_as_written(spark: SparkSession) -> None:
    readable = enriched_columns(_readable(spark, RECORDS))
    assert (
        having_kept(
            spark, "v", rows_of(spark, parse("v", f"SELECT user_id, count(*) AS n {_BY_USER}"), readable)
        )
        is None
    )
    compiled = check(spark, parse("v", f"SELECT user_id, count(*) AS n {_BY_USER}"))
    assert not compiled.having and compiled.columns == compiled.rows.dtypes


def test_how_many_rows_a_record_can_change_comes_from_the_plan(spark: SparkSession) -> None:
    """A bound on a batch's changed rows (its records times this) sizes what it collects at once."""
    assert check(spark, parse("v", f"SELECT user_id, count(*) AS n {_BY_USER}")).rows_per_record == 1
    hourly = (
        "-- watermark: rating_ts 1 hour\n"
        "SELECT window.start AS hour, count(*) AS n FROM enriched GROUP BY window(rating_ts, '1 hour')"
    )
    assert check(spark, parse("h", hourly)).rows_per_record == 1
    words = (
        "SELECT word, count(*) AS n FROM enriched"
        " LATERAL VIEW explode(split(message, ' ')) w AS word GROUP BY word"
    )
    assert check(spark, parse("w", words)).rows_per_record is None  # as many as the message has words
    # over the enriched stream as the job reads it: its parse is a generator of one row a record
    raw = (
        spark.readStream.format("rate")
        .load()
        .select(
            F.lit(b"k").alias("key"),
            F.lit(_enriched(1)).alias("value"),
            F.lit("enriched").alias("topic"),
            F.lit(0).alias("partition"),
            F.col("value").alias("offset"),
            F.col("timestamp"),
        )
    )
    stream = enriched_columns(parse_enriched(raw, EVERY_FIELD).where(F.col("dlq_reason").isNull()))
    assert (
        compile_view(spark, parse("v", f"SELECT user_id, count(*) AS n {_BY_USER}"), stream).rows_per_record
        == 1
    )
    assert compile_view(spark, parse("w", words), stream).rows_per_record is None
