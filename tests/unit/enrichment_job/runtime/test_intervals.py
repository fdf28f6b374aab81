import pydantic
import pytest

from enrichment_job.runtime.intervals import Interval, interval_ms

# What Spark 4's Trigger.ProcessingTime(text).intervalMs() gave for each text (None: refused),
# recorded from Spark itself: the parser must take exactly what a trigger takes.
SPARK_READS = [
    ("500 milliseconds", 500),
    ("1 Second", 1_000),
    ("  1  second  ", 1_000),
    ("1\thour", 3_600_000),
    ("interval 1 minute 30 seconds", 90_000),
    ("INTERVAL  1 second", 1_000),
    ("1 seconds 2 seconds", 3_000),
    ("0.5 seconds", 500),
    (".5 seconds", 500),
    ("5. seconds", 5_000),
    ("0.1234567 seconds", 123),
    ("+1 second", 1_000),
    ("0 seconds", 0),
    ("2 weeks", 1_209_600_000),
    ("1 day 2 hours", 93_600_000),
    ("1500 microseconds", 1),
    ("1 second 500 microseconds", 1_000),
    ("1.0 minutes", None),
    ("0.5 hours", None),
    ("1.5 milliseconds", None),
    ("1 month", None),
    ("1 year", None),
    ("10", None),
    ("", None),
    ("interval", None),
    ("1 ms", None),
    ("1 sec", None),
    ("1second", None),
    ("-1 seconds", None),
    ("1 second ago", None),
    ("1e3 seconds", None),
    ("1,5 seconds", None),
]


@pytest.mark.parametrize(("text", "spark_ms"), SPARK_READS)
def test_an_interval_is_read_as_sparks_trigger_reads_it(text: str, spark_ms: int | None) -> None:
    if spark_ms is None:
        with pytest.raises(ValueError, match="is not an interval"):
            interval_ms(text)
    else:
        assert interval_ms(text) == spark_ms


def test_a_refusal_says_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="only seconds take a fraction"):
        interval_ms("0.5 hours")
    with pytest.raises(ValueError, match="'months' is not a unit of fixed length"):
        interval_ms("1 months")


def test_a_setting_of_the_interval_type_is_refused_by_name() -> None:
    class Settings(pydantic.BaseModel):
        every: Interval

    assert Settings(every="2 seconds").every == "2 seconds"
    with pytest.raises(pydantic.ValidationError, match="every"):
        Settings(every="half a second")
