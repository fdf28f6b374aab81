"""Views as one streaming aggregation, and its changed rows as changelog records.

Spark runs one streaming aggregation per query, and a query per view would read and parse
every enriched rating once per view and pay the fixed cost of a stateful micro-batch (planning,
state commits, checkpoint files) once per view. Instead each rating becomes one row per view
that counts it, tagged with the view's number; the rows are grouped by that number and every
view's group columns (a row carries the other views' as nulls), and each measure aggregates
only its own view's rows. So one query keeps many views, and a batch costs about the same
whatever their number. A view with an event time is the exception: a watermark makes Spark scan
the whole state of its query in every batch, so it is kept alone (`app.queries_of`).

One query also finds the records no view can count or one view refuses (`dead_letter_reason`),
so that no query reads and parses the enriched records only for them: each such record adds one
to a row of its own in that query's state, and a batch that changes that row has dead letters,
which its sink then reads again from the batch's offsets (`app.ViewsSink`).
"""

import operator
from collections.abc import Callable, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from enrichment_job.views.declarations import View

__all__ = [
    "DEAD_LETTERS",
    "VIEW",
    "aggregate_views",
    "changelog_columns",
    "column",
    "dead_letter_reason",
    "view_rows",
]

VIEW = "view"  # the view's number in the declared order
DEAD_LETTERS = "dead_letters"  # the dead letters' count, in the row whose view number is len(views)


def column(view: View, name: str) -> str:
    """The aggregation's column of a view's group column or measure."""
    return f"{view.name}__{name}"


def _group_columns(ratings: DataFrame, views: Sequence[View]) -> StructType:
    """Every view's group columns, with their types (another view's rows carry them as nulls)."""
    return ratings.select(
        *[expr.alias(column(v, name)) for v in views for name, expr in v.group_by.items()]
    ).schema


def dead_letter_reason(views: Sequence[View]) -> Column:
    """Why a parsed record is a dead letter of the views, or null: it is unreadable
    (`dlq_reason`), or a view refuses it ("<view>: <why>"; the other views count it)."""
    reason = F.col("dlq_reason")
    for view in views:
        if view.refuses is not None:
            refused = F.concat(F.lit(f"{view.name}: "), view.refuses)
            reason = F.coalesce(reason, F.when(F.col("dlq_reason").isNull(), refused))
    return reason


def aggregate_views(
    ratings: DataFrame, views: Sequence[View], dead_letter: Column | None = None
) -> DataFrame:
    """Parsed ratings -> one row per (view, group): the view's number, every view's group
    columns (null but the row's own view's) and every view's measures (likewise).

    With `dead_letter` (`dead_letter_reason` of every declared view), `ratings` are all the
    parsed records, readable or not: the views count the readable ones, and each record whose
    `dead_letter` is not null adds one to DEAD_LETTERS in a row of its own (view number
    len(views), every group column null), which a batch then changes."""
    if len([v for v in views if v.event_time]) > 1:
        raise ValueError("one aggregation keeps at most one view with an event_time (one watermark)")
    groups = _group_columns(ratings, views)
    owner = {column(v, name): (v, expr) for v in views for name, expr in v.group_by.items()}

    def entry(number: int, view: View) -> Column:
        fields = [F.lit(number).alias(VIEW)]
        for field in groups.fields:
            owning, expr = owner[field.name]
            value = expr if owning is view else F.lit(None).cast(field.dataType)
            fields.append(value.alias(field.name))
        counted = F.struct(*fields)
        excluded = [
            *([F.col("dlq_reason").isNotNull()] if dead_letter is not None else []),
            *([view.refuses.isNotNull()] if view.refuses is not None else []),
        ]
        return F.when(~reduce(operator.or_, excluded), counted) if excluded else counted

    counting = [entry(n, v) for n, v in enumerate(views)]
    if dead_letter is not None:
        nothing = [F.lit(None).cast(f.dataType).alias(f.name) for f in groups.fields]
        counting.append(F.when(dead_letter.isNotNull(), F.struct(F.lit(len(views)).alias(VIEW), *nothing)))
    entries = F.array(*counting)
    rows = ratings.select("*", F.inline(F.filter(entries, lambda e: e.isNotNull())))
    for view in views:
        if view.event_time:
            rows = rows.withWatermark(column(view, view.event_time), f"{view.watermark_delay_s} seconds")
    measures = [
        fn(F.when(F.col(VIEW) == number, arg)).alias(column(view, name))
        for number, view in enumerate(views)
        for name, (fn, arg) in view.measures.items()
    ]
    if dead_letter is not None:
        measures.append(F.count(F.when(F.col(VIEW) == len(views), F.lit(1))).alias(DEAD_LETTERS))
    return rows.groupBy(VIEW, *groups.fieldNames()).agg(*measures)


def _row(view: View) -> dict[str, Column]:
    return dict(view.row(lambda name: F.col(column(view, name))))


def view_rows(aggregated: DataFrame, views: Sequence[View], view: View) -> DataFrame:
    """One view's rows, as its declared columns."""
    return aggregated.where(F.col(VIEW) == views.index(view)).select(
        *[expr.alias(name) for name, expr in _row(view).items()]
    )


def _by_view(views: Sequence[View], part: Callable[[View, dict[str, Column]], Column]) -> Column:
    """`part` of the row's own view."""
    picked = None
    for number, view in enumerate(views):
        this, value = F.col(VIEW) == number, part(view, _row(view))
        picked = F.when(this, value) if picked is None else picked.when(this, value)
    if picked is None:
        raise ValueError("no views declared")
    return picked


def changelog_columns(views: Sequence[View]) -> list[Column]:
    """What makes each changed row of the aggregation a changelog record: `view` (its name),
    `key` (the key columns as JSON), `value` (the whole row as JSON, nulls kept) and
    `last_rating_time`. The same for every batch: built once, selected per batch."""
    return [
        _by_view(views, lambda v, _: F.lit(v.name)).alias("view"),
        _by_view(views, lambda v, row: F.to_json(F.struct(*[row[k].alias(k) for k in v.key]))).alias("key"),
        _by_view(
            views,
            lambda _, row: F.to_json(
                F.struct(*[e.alias(n) for n, e in row.items()]), {"ignoreNullFields": "false"}
            ),
        ).alias("value"),
        _by_view(views, lambda _, row: row["last_rating_time"]).alias("last_rating_time"),
    ]
