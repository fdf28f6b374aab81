"""The views, each declared once: a name, what its rows are grouped by, its measures (an
aggregate function and its input, over parsed enriched ratings: see `transforms.parse_enriched`)
and its row (the output columns, from the group columns and the measures). These are the
compiled form of the built-in views' SQL files (`builtin/`; a test checks that both give the same
rows); users' views are SQL files of their own (`definition.py`, `user_views.py`).

The views without an event time are kept by one stateful query (`aggregation.aggregate_views`):
each rating is read and parsed once for all of them, and one micro-batch updates them all. A
view with an event time (a window) has a query of its own (`app.queries_of`).
"""

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

from enrichment_job.views.settings import ViewsSettings
from enrichment_job.views.transforms import hour_start, late_for_hour

__all__ = ["View", "customer_ratings", "declared", "key_bounded", "segment_hourly"]

# A measure: an aggregate function (F.count, F.sum, F.max, F.collect_set, ... any that skips
# nulls) and its input, an expression over a parsed rating.
Measure = tuple[Callable[[Column], Column], Column]
# The row's columns (name -> expression), given a function that names a group column or a measure.
Row = Callable[[Callable[[str], Column]], Mapping[str, Column]]


@dataclass(frozen=True)
class View:
    name: str
    group_by: Mapping[str, Column]
    measures: Mapping[str, Measure]
    row: Row
    key: tuple[str, ...]  # the row's columns that identify it (the changelog topic's key)
    # Ratings this view does not count, and why (null = counted). They go to the views'
    # dead-letter topic; the other views count them.
    refuses: Column | None = None
    # A timestamp group column whose old values Spark's watermark drops from the state, and how
    # far behind the newest value seen it trails. Such a view is kept by a query of its own.
    event_time: str | None = None
    watermark_delay_s: int = 0


def _unhappy(settings: ViewsSettings) -> Column:
    return (F.col("stars") < settings.unhappy_stars_below).cast("long")


def _average(c: Callable[[str], Column]) -> Column:
    return F.round(c("stars_sum") / c("ratings"), 3)


def customer_ratings(settings: ViewsSettings) -> View:
    """Per customer id (matched or not): counts, average stars, the first and last rating times,
    and the last rating (by rating_time, then rating_id) with the customer as it was then."""
    last = F.struct(
        "rating_time",
        "rating_id",
        "stars",
        "channel",
        "message",
        "club_status",
        "full_name",
        "customer_matched",
    )
    return View(
        name="customer_ratings",
        group_by={"user_id": F.col("user_id")},
        measures={
            "ratings": (F.count, F.lit(1)),
            "unhappy_ratings": (F.sum, _unhappy(settings)),
            "stars_sum": (F.sum, F.col("stars").cast("long")),
            "first_rating_time": (F.min, F.col("rating_time")),
            "last": (F.max, last),
        },
        row=lambda c: {
            "user_id": c("user_id"),
            "ratings": c("ratings"),
            "unhappy_ratings": c("unhappy_ratings"),
            "stars_sum": c("stars_sum"),
            "average_stars": _average(c),
            "first_rating_time": c("first_rating_time"),
            "last_rating_time": c("last").getField("rating_time"),
            "last_rating_id": c("last").getField("rating_id"),
            "last_stars": c("last").getField("stars"),
            "last_channel": c("last").getField("channel"),
            "last_message": c("last").getField("message"),
            "club_status": c("last").getField("club_status"),
            "full_name": c("last").getField("full_name"),
            "customer_matched": c("last").getField("customer_matched"),
        },
        key=("user_id",),
    )


def segment_hourly(settings: ViewsSettings) -> View:
    """Per club status ("unmatched" for ratings without a customer), channel and UTC hour of
    rating_time: counts, average stars and distinct customers. A rating arriving after its
    hour's window has closed is refused (see `transforms.late_for_hour`), and the state of an
    hour is dropped once no rating can still be counted in it."""
    segment = F.when(F.col("customer_matched"), F.coalesce("club_status", F.lit("unknown"))).otherwise(
        F.lit("unmatched")
    )
    return View(
        name="segment_hourly",
        group_by={
            "club_status": segment,
            "channel": F.coalesce("channel", F.lit("unknown")),
            "hour_ts": hour_start(),
        },
        measures={
            "ratings": (F.count, F.lit(1)),
            "stars_sum": (F.sum, F.col("stars").cast("long")),
            "unhappy_ratings": (F.sum, _unhappy(settings)),
            "customers": (F.collect_set, F.col("user_id")),
            "last_rating_time": (F.max, F.col("rating_time")),
        },
        row=lambda c: {
            "club_status": c("club_status"),
            "channel": c("channel"),
            "hour": F.date_format(c("hour_ts"), "yyyy-MM-dd'T'HH"),
            "hour_start_ms": F.unix_millis(c("hour_ts")),
            "ratings": c("ratings"),
            "stars_sum": c("stars_sum"),
            "average_stars": _average(c),
            "unhappy_ratings": c("unhappy_ratings"),
            "customers": F.size(c("customers")),
            "last_rating_time": c("last_rating_time"),
        },
        key=("club_status", "channel", "hour"),
        refuses=late_for_hour(settings.window_lateness_s * 1000),
        event_time="hour_ts",
        # Spark's watermark must never be what refuses a rating (it would drop it silently):
        # rows whose hour is open are at most an hour plus the lateness older than the newest
        # CDC clock seen, and rating_time is always older than its record's clock. Five minutes
        # more cover records of one enrichment transaction read in two batches.
        watermark_delay_s=3600 + settings.window_lateness_s + 300,
    )


def key_bounded(view: View, max_bytes: int) -> View:
    """`view`, refusing as well a rating whose group columns, as text, take more than
    `max_bytes`: a key stands in its changelog record's key and again in its value, and a
    600 KB channel made a record over Kafka's limit, which stopped the views on every retry."""
    size = reduce(
        operator.add, [F.coalesce(F.octet_length(e.cast("string")), F.lit(0)) for e in view.group_by.values()]
    )
    too_large = F.when(
        size > max_bytes,
        F.concat(
            F.lit(f"key of {', '.join(view.group_by)} over {max_bytes} bytes (VIEWS_JOB_MAX_KEY_BYTES): "),
            size.cast("string"),
            F.lit(" bytes"),
        ),
    )
    refuses = too_large if view.refuses is None else F.coalesce(too_large, view.refuses)
    return replace(view, refuses=refuses)


def declared(settings: ViewsSettings) -> tuple[View, ...]:
    views = (customer_ratings(settings), segment_hourly(settings))
    return tuple(key_bounded(v, settings.max_key_bytes) for v in views)
