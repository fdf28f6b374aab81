"""The views, each declared once: a name, its key columns and its aggregation over parsed
enriched ratings (see `transforms.parse_enriched`). Adding a view is one more `View` here.

An aggregation is a streaming `groupBy(...).agg(...)` plus projections; Spark keeps its state.
Every column it outputs is in the view's rows, and the key columns identify a row.
"""

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from enrichment_job.views.settings import ViewsSettings
from enrichment_job.views.transforms import hour_start, late_for_hour


@dataclass(frozen=True)
class View:
    name: str
    key: tuple[str, ...]
    aggregate: Callable[[DataFrame, ViewsSettings], DataFrame]
    # Records this view does not count, and why (a column: null = counted). They go to the
    # views' dead-letter topic.
    refuses: Callable[[ViewsSettings], Column] | None = None


def _unhappy(settings: ViewsSettings) -> Column:
    return F.sum((F.col("stars") < settings.unhappy_stars_below).cast("long"))


def _average(sum_col: str, count_col: str) -> Column:
    return F.round(F.col(sum_col) / F.col(count_col), 3)


def customer_ratings(ratings: DataFrame, settings: ViewsSettings) -> DataFrame:
    """Per customer id (matched or not): counts, average stars, the first and last rating times,
    and the last rating (by rating_time, then rating_id) with the customer as it was then."""
    last = F.max(
        F.struct(
            "rating_time",
            "rating_id",
            "stars",
            "channel",
            "message",
            "club_status",
            "full_name",
            "customer_matched",
        )
    )
    return (
        ratings.groupBy("user_id")
        .agg(
            F.count(F.lit(1)).alias("ratings"),
            _unhappy(settings).alias("unhappy_ratings"),
            F.sum(F.col("stars").cast("long")).alias("stars_sum"),
            F.min("rating_time").alias("first_rating_time"),
            last.alias("last"),
        )
        .select(
            "user_id",
            "ratings",
            "unhappy_ratings",
            "stars_sum",
            _average("stars_sum", "ratings").alias("average_stars"),
            "first_rating_time",
            F.col("last.rating_time").alias("last_rating_time"),
            F.col("last.rating_id").alias("last_rating_id"),
            F.col("last.stars").alias("last_stars"),
            F.col("last.channel").alias("last_channel"),
            F.col("last.message").alias("last_message"),
            F.col("last.club_status").alias("club_status"),
            F.col("last.full_name").alias("full_name"),
            F.col("last.customer_matched").alias("customer_matched"),
        )
    )


def segment_hourly(ratings: DataFrame, settings: ViewsSettings) -> DataFrame:
    """Per club status ("unmatched" for ratings without a customer), channel and UTC hour of
    rating_time: counts, average stars and distinct customers. State of an hour is dropped once
    no rating can still be counted in it (see `transforms.late_for_hour`)."""
    segment = F.when(F.col("customer_matched"), F.coalesce("club_status", F.lit("unknown"))).otherwise(
        F.lit("unmatched")
    )
    # Spark's watermark must never be what refuses a rating (it would drop it silently): rows
    # whose hour is open are at most an hour plus the lateness older than the newest CDC clock
    # seen, and rating_time is always older than its record's clock. Five minutes more cover
    # records of one enrichment transaction read in two batches.
    delay_s = 3600 + settings.window_lateness_s + 300
    return (
        ratings.select(
            segment.alias("club_status"),
            F.coalesce("channel", F.lit("unknown")).alias("channel"),
            hour_start().alias("hour_ts"),
            "user_id",
            "stars",
            "rating_time",
        )
        .withWatermark("hour_ts", f"{delay_s} seconds")
        .groupBy("club_status", "channel", "hour_ts")
        .agg(
            F.count(F.lit(1)).alias("ratings"),
            F.sum(F.col("stars").cast("long")).alias("stars_sum"),
            _unhappy(settings).alias("unhappy_ratings"),
            F.size(F.collect_set("user_id")).alias("customers"),
            F.max("rating_time").alias("last_rating_time"),
        )
        .select(
            "club_status",
            "channel",
            F.date_format("hour_ts", "yyyy-MM-dd'T'HH").alias("hour"),
            F.unix_millis("hour_ts").alias("hour_start_ms"),
            "ratings",
            "stars_sum",
            _average("stars_sum", "ratings").alias("average_stars"),
            "unhappy_ratings",
            "customers",
            "last_rating_time",
        )
    )


VIEWS = (
    View("customer_ratings", ("user_id",), customer_ratings),
    View(
        "segment_hourly",
        ("club_status", "channel", "hour"),
        segment_hourly,
        refuses=lambda s: late_for_hour(s.window_lateness_s * 1000),
    ),
)
