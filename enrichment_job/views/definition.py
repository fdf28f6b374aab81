"""A view declared in SQL: a file whose text is a Spark SQL `SELECT ... FROM enriched ... GROUP BY
...`, with header comments for what SQL cannot say. Read (`read`), checked and compiled against
a streaming `enriched` relation (`compile_view`) before anything of the view exists: a view
Spark would run wrongly, or not at all, is refused with one message (`ViewRefused`).

The file, e.g. `views/examples/channel_hourly.sql`:

    -- Ratings per channel and UTC hour.
    -- watermark: rating_ts 2 hours
    -- trigger: 5 seconds
    SELECT channel, window.start AS hour, count(*) AS ratings
    FROM enriched
    GROUP BY channel, window(rating_ts, '1 hour')

- The view's name is the file's name without `.sql` (lower case, digits and `_`).
- `enriched` holds the readable enriched ratings: the fields of the enriched topic's records
  (`transforms.EVERY_FIELD`) and `rating_ts`, `rating_time` as a timestamp.
- Header lines `-- <key>: <value>` before the SQL (a key spelt close to one of them is refused):
  `retention: <interval>` (a window's rows leave the view, as tombstones in its changelog, once
  a window that many ms newer has come; needs the watermark, no shorter than its delay plus
  what the window outlasts its slide, and `window.start` selected),
  `watermark: <timestamp column> <delay>`
  (Spark's watermark: the state of a window the watermark has passed is dropped, and a rating
  older than it is no longer counted) and `trigger: <interval>` (how often a batch runs; default
  the job's VIEWS_JOB_SQL_TRIGGER_INTERVAL, 2 seconds). Other comment lines are the view's description.
- The key of the view's rows is its GROUP BY columns, each of which must be selected; a window
  is selected by its start or end, or an expression of them alone (`window.start AS hour`,
  `date_format(window.start, 'yyyy-MM-dd HH') AS hour`). A window tumbles
  (`window(rating_ts, '1 hour')`) or slides (`window(rating_ts, '1 hour', '10 minutes')`: a
  rating counts in each window that holds it).

HAVING is kept exactly, though Spark's update mode never takes a row back: the aggregation keeps
every group, each changed row carries whether it matches the condition (`VISIBLE`), and the
sink writes a row that does not as a tombstone, so that it leaves the view, and comes back when
it matches again (`having_kept`).

Refused: a syntax error (with its position); what Spark refuses for a streaming query in update
mode (distinct aggregates, ORDER BY, LIMIT, session windows, an aggregate over an aggregate);
GROUPING SETS, ROLLUP and CUBE; a filter over the aggregation other than HAVING; joins;
non-deterministic functions (a rebuilt view must give the same rows); a view without GROUP BY,
or with a GROUP BY column that is not selected.
"""

import difflib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from enrichment_job.runtime.intervals import interval_ms
from enrichment_job.views.transforms import EVERY_FIELD, REQUIRED
from foundation.errors import RatingsError

__all__ = [
    "BUILT_IN",
    "EVENT_TIME",
    "HEADERS",
    "NAME",
    "RELATION",
    "VISIBLE",
    "CompiledView",
    "ViewFile",
    "ViewRefused",
    "check",
    "compile_view",
    "enriched_columns",
    "fields_read",
    "having_kept",
    "parse",
    "placeholder",
    "read",
    "rows_of",
]

BUILT_IN = Path(__file__).parent / "builtin"  # the built-in views' SQL (declarations.py runs them)
RELATION = "enriched"
EVENT_TIME = "rating_ts"  # rating_time as a timestamp, beside the enriched fields
NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
HEADERS = ("retention", "trigger", "watermark")
# A view with HAVING: the extra column of its rows that says whether a row matches the condition.
VISIBLE = "__having"
# pyspark logs every SQL error it raises, with the Java stack; a refusal says it once, plainly.
logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
_HEADER = re.compile(r"--\s*([a-z][a-z_]*)\s*:\s*(.*)")
# Functions whose value depends on when a batch runs: a rebuilt view would count otherwise.
_CLOCKS = {"CurrentTimestamp", "Now", "CurrentDate", "LocalTimestamp", "CurrentBatchTimestamp"}
# Plan nodes that may stand above the view's aggregation, and what the others above it mean.
_ABOVE_OK = {"Project", "SubqueryAlias"}
_ABOVE = {
    "Filter": "a filter over the aggregation: write it as the view's HAVING, or filter when you query it",
    "Sort": "ORDER BY: a view's rows have no order; order them when you query it",
    "GlobalLimit": "LIMIT: a view keeps every group; limit when you query it",
    "LocalLimit": "LIMIT: a view keeps every group; limit when you query it",
    "Distinct": "SELECT DISTINCT: the GROUP BY already makes each key's row unique",
    "Window": "window functions (OVER): not kept by a streaming aggregation",
    "Union": "UNION: declare one view per part",
}
# Plan nodes refused below it.
_BELOW = {
    "Join": "joins: a view reads the enriched stream alone (it is joined to the customers already)",
    "Aggregate": "an aggregate over an aggregate: Spark keeps one streaming aggregation per view",
    "Expand": "GROUPING SETS, ROLLUP and CUBE: declare one view per grouping",
    "Union": "UNION: declare one view per part",
    "Window": "window functions (OVER): not kept by a streaming aggregation",
}
# The column an Expand of GROUPING SETS, ROLLUP or CUBE adds; a sliding window's Expand (one row
# a window a record falls in) has none, and Spark keeps it like any other grouping.
_GROUPING_ID = "spark_grouping_id"


class ViewRefused(RatingsError):
    """The view cannot be kept as written; the message says why."""


@dataclass(frozen=True)
class ViewFile:
    """A view as written: its name, SQL and header settings."""

    name: str
    sql: str
    description: str = ""
    watermark: tuple[str, str] | None = None  # (timestamp column, delay)
    trigger: str | None = None
    retention: str | None = None  # how long a window's rows stay after the newest window's start


@dataclass(frozen=True)
class CompiledView:
    """A view checked and planned over a streaming `enriched`: its rows (one per group, update
    mode) and the columns that identify a row."""

    definition: ViewFile
    rows: DataFrame
    key: tuple[str, ...]
    window_start: str | None = None  # the key column that is the window's start, when selected
    retention_ms: int | None = None
    having: bool = False  # `rows` has VISIBLE: a row that does not match HAVING leaves the view

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def rows_per_record(self) -> int | None:
        """How many of the view's rows one enriched record can change, from its plan: one
        group each, times what an Expand makes of a record (a sliding window's windows) and an
        `inline` of an array of k structs (the parse's own, k = 1); None when another generator
        (LATERAL VIEW explode) makes as many rows as the record holds."""
        most = 1
        for node in _nodes([self.rows._jdf.queryExecution().analyzed()]):
            if node.nodeName() == "Generate":
                generator = node.generator()
                if generator.nodeName() != "Inline" or generator.child().nodeName() != "CreateArray":
                    return None
                most *= generator.child().children().size()
            elif node.nodeName() == "Expand":
                most *= node.projections().size()
        return most

    @property
    def columns(self) -> list[tuple[str, str]]:
        """The view's columns and their Spark types, as its rows have them (without VISIBLE)."""
        return [(n, t) for n, t in self.rows.dtypes if not (self.having and n == VISIBLE)]


def read(path: Path) -> ViewFile:
    """The view in the file at `path`; ViewRefused when its name or header is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ViewRefused(f"{path}: cannot read it: {err}") from None
    name = path.name.removesuffix(".sql")
    return parse(name, text)


def parse(name: str, text: str) -> ViewFile:
    """The view named `name` whose file holds `text`."""
    if not NAME.fullmatch(name):
        raise ViewRefused(
            f"view name {name!r}: use a lower-case letter, then lower-case letters, digits or _ (63 at most)"
        )
    headers: dict[str, str] = {}
    described: list[str] = []
    lines = text.splitlines()
    body_from = len(lines)
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("--"):
            body_from = number
            break
        header = _HEADER.fullmatch(stripped)
        if header is None:
            described.append(stripped[2:].strip())
            continue
        key, value = header.group(1), header.group(2).strip()
        if key not in HEADERS:
            close = difflib.get_close_matches(key, HEADERS, n=1, cutoff=0.75)
            if close:  # a misspelt header would be taken for prose, and silently not apply
                raise ViewRefused(
                    f"{name}, line {number + 1}: unknown header {key!r}; did you mean {close[0]!r}?"
                )
            described.append(stripped[2:].strip())
            continue
        if key in headers:
            raise ViewRefused(f"{name}, line {number + 1}: header {key!r} given twice")
        headers[key] = value
    sql = "\n" * body_from + "\n".join(lines[body_from:])  # line numbers in errors stay the file's
    if not sql.strip():
        raise ViewRefused(f"{name}: no SELECT after the header")
    watermark = None
    if "watermark" in headers:
        column, _, delay = headers["watermark"].partition(" ")
        if not column or not delay.strip():
            raise ViewRefused(
                f"{name}: header watermark: give a timestamp column and a delay, e.g. {EVENT_TIME} 2 hours"
            )
        watermark = (column, delay.strip())
    trigger = headers.get("trigger") or None
    retention = headers.get("retention") or None
    return ViewFile(name, sql.rstrip().rstrip(";"), " ".join(described), watermark, trigger, retention)


def enriched_columns(readable: DataFrame) -> DataFrame:
    """What a view reads as `enriched`: the readable enriched ratings (`transforms.parse_enriched`,
    `dlq_reason` null), the fields they were parsed with, and `rating_ts`."""
    present = [f.name for f in EVERY_FIELD.fields if f.name in readable.columns]
    return readable.select(*present, F.timestamp_millis("rating_time").alias(EVENT_TIME))


_COUNT_STAR = re.compile(r"count\s*\(\s*\*\s*\)", re.IGNORECASE)


def fields_read(sql: str) -> StructType:
    """The enriched fields a view's SQL may read, for its stream to parse no others: each field
    whose name its text has as a word (any case; a comment's mention costs a parse, nothing
    else), the fields every record must have (`transforms.REQUIRED`, `rating_time` among them,
    behind `rating_ts`), and every field when a star remains besides count(*). A view's JSON
    parse is most of its backfill's cost, and a record has about 25 fields."""
    if "*" in _COUNT_STAR.sub("", sql):
        return EVERY_FIELD
    named = {word.lower() for word in re.findall(r"\w+", sql)}
    return StructType([f for f in EVERY_FIELD.fields if f.name in named or f.name in REQUIRED])


def placeholder(spark: SparkSession) -> DataFrame:
    """A streaming `enriched` of every field that reads nothing anywhere, to check a view
    without Kafka."""
    source = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    return enriched_columns(
        source.select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in EVERY_FIELD.fields])
    )


def compile_view(spark: SparkSession, view: ViewFile, enriched: DataFrame) -> CompiledView:
    """`view` planned over `enriched` (`enriched_columns` of a stream, or `placeholder`), after
    every check; ViewRefused says what is wrong. Creates nothing: no query starts."""
    source = enriched
    if view.watermark is not None:
        column, delay = view.watermark
        types = dict(enriched.dtypes)
        if types.get(column) != "timestamp":
            known = ", ".join(n for n, t in enriched.dtypes if t == "timestamp")
            raise ViewRefused(
                f"{view.name}: header watermark: {column!r} is not a timestamp column of {RELATION} ({known})"
            )
        try:
            source = enriched.withWatermark(column, delay)
        except PySparkException as err:
            raise ViewRefused(
                f"{view.name}: header watermark: {delay!r} is not an interval ({_first_line(err)})"
            ) from None
    if view.trigger is not None:
        _header_ms(view, "trigger", view.trigger)
    rows = rows_of(spark, view, source)
    if not rows.isStreaming:
        raise ViewRefused(f"{view.name}: a view reads FROM {RELATION}")
    spans = _window_spans_ms(rows)  # from the SQL as parsed, before HAVING's plan replaces it
    kept = having_kept(spark, view.name, rows)
    having = kept is not None
    rows = kept if kept is not None else rows
    plan = rows._jdf.queryExecution().analyzed()
    aggregate = _check_shape(view.name, plan)
    _check_deterministic(view.name, plan)
    jvm = spark._jvm
    assert jvm is not None
    try:
        jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker.checkForStreaming(
            plan, jvm.org.apache.spark.sql.streaming.OutputMode.Update()
        )
    except Exception as err:  # noqa: BLE001 (py4j's error: Spark's AnalysisException inside)
        raise ViewRefused(
            f"{view.name}: Spark cannot keep it as a streaming view: {_java_message(err)}"
        ) from None
    names = list(rows.columns)
    if VISIBLE in names[: len(names) - having]:
        raise ViewRefused(f"{view.name}: the column name {VISIBLE} is the views job's own: name it otherwise")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ViewRefused(f"{view.name}: more than one column named {', '.join(twice)}: name each with AS")
    key, window_start = _key(view.name, aggregate), _window_start(aggregate)
    retention = _retention_ms(view, window_start, spans)
    return CompiledView(view, rows, key, window_start, retention, having)


def having_kept(spark: SparkSession, name: str, rows: DataFrame) -> DataFrame | None:
    """The rows of a view with HAVING as every group's row and VISIBLE, whether it matches the
    condition (null counts as not, as in SQL); None for a view without HAVING.

    Spark plans HAVING as a filter on the aggregation's output (`Filter` over `Aggregate`, under
    a projection when the condition reads an aggregate the SELECT does not). In update mode that
    filter would pass a group's row while it matches and then say nothing once it stops: the
    row would stay in the view for ever. So the filter is taken out of the plan, its condition
    becomes a column beside the SELECT's, and the sink writes the rows that do not match as
    tombstones. The condition and the SELECT's columns are Spark's own resolved expressions,
    given back as SQL over the aggregation's output; ViewRefused when that does not give the
    same columns."""
    plan = rows._jdf.queryExecution().analyzed()
    top = plan if plan.nodeName() == "Project" else None
    node = top.child() if top is not None else plan
    if node.nodeName() != "Filter" or node.child().nodeName() != "Aggregate":
        return None
    condition, aggregate = node.condition(), node.child()
    outputs = [str(a.name()) for a in _seq(aggregate.output())]
    if len({o.lower() for o in outputs}) != len(outputs):
        raise ViewRefused(f"{name}: HAVING: name each aggregate with AS (two have the same name)")
    jvm = spark._jvm
    assert jvm is not None
    try:
        counted = DataFrame(
            jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, aggregate), spark
        )
        selected = (
            [F.expr(str(e.sql())) for e in _seq(top.projectList())]
            if top is not None
            else [F.col("`" + o.replace("`", "``") + "`") for o in outputs]
        )
        visible = F.coalesce(F.expr(str(condition.sql())), F.lit(False)).alias(VISIBLE)
        kept = counted.select(*selected, visible)
    except Exception as err:  # noqa: BLE001 (py4j's or Spark's error: the plan could not be given back)
        raise ViewRefused(f"{name}: HAVING: cannot be kept as written: {_first_line(err)}") from None
    if kept.dtypes[:-1] != rows.dtypes:
        raise ViewRefused(
            f"{name}: HAVING: cannot be kept as written (its columns came out as {kept.dtypes[:-1]})"
        )
    return kept


def _header_ms(view: ViewFile, header: str, text: str) -> int:
    """A header's interval in ms, or ViewRefused naming the header."""
    try:
        return interval_ms(text)
    except ValueError as err:
        raise ViewRefused(f"{view.name}: header {header}: {err}") from None


def _retention_ms(view: ViewFile, window_start: str | None, spans: tuple[int, int] | None) -> int | None:
    """The retention header in ms, after its checks: a windowed view with a watermark, its window's
    start selected, and a retention no shorter than the watermark's delay plus what the window
    outlasts its slide (`spans`: the window's size and slide). A row leaves once a window that
    much newer has started; by then the watermark has passed the row's window end, so Spark no
    longer updates it: a window still updated must not have left the view."""
    if view.retention is None:
        return None
    retention = _header_ms(view, "retention", view.retention)
    if view.watermark is None:
        raise ViewRefused(
            f"{view.name}: header retention needs a watermark: Spark keeps every window without one"
        )
    if window_start is None:
        raise ViewRefused(
            f"{view.name}: header retention needs the window's start selected as is (window.start AS ...):"
            " a row's window is read from it"
        )
    if spans is None:
        raise ViewRefused(
            f"{view.name}: header retention needs the window's size and slide as intervals of fixed"
            f" length, e.g. window({EVENT_TIME}, '1 hour', '10 minutes'): the shortest retention is read"
            " from them"
        )
    delay = _header_ms(view, "watermark", view.watermark[1])
    size, slide = spans
    if retention < delay + size - slide:
        overlap = (
            f" plus what the window outlasts its slide ({(size - slide) / 1000:g} s)" if size > slide else ""
        )
        raise ViewRefused(
            f"{view.name}: header retention ({view.retention}) must be at least the watermark's delay"
            f" ({view.watermark[1]}){overlap}: a window Spark still updates must not have left the view"
        )
    return retention


def _window_spans_ms(rows: DataFrame) -> tuple[int, int] | None:
    """The size and slide in ms of the view's `window(...)` as its SQL gives them (the slide is
    the size for a tumbling window); None without one. Spark takes them as text or as integer
    microseconds, and refuses anything else itself."""
    for node in _nodes([rows._jdf.queryExecution().logical()]):
        for expression in _expressions(list(_seq(node.expressions()))):
            if expression.nodeName() != "UnresolvedFunction" or [
                str(p).lower() for p in _seq(expression.nameParts())
            ] != ["window"]:
                continue
            spans = [_span_ms(a) for a in list(_seq(expression.arguments()))[1:3]] or [None]
            size, slide = spans[0], spans[-1]
            return (size, slide) if size is not None and slide is not None else None
    return None


def _span_ms(argument: Any) -> int | None:
    if argument.nodeName() != "Literal":
        return None
    kind = str(argument.dataType().typeName())
    try:
        if kind == "string":
            return interval_ms(str(argument.value()))
        return int(argument.value()) // 1000 if kind in ("integer", "long") else None
    except ValueError:
        return None  # not of fixed length (a month): the retention cannot be checked against it


def _window_start(aggregate: Any) -> str | None:
    """The selected column that is the GROUP BY window's start (`window.start`), if any."""
    windows = [
        g
        for g in _seq(aggregate.groupingExpressions())
        if str(g.nodeName()) == "AttributeReference" and str(g.name()) == "window"
    ]
    for output in _seq(aggregate.aggregateExpressions()):
        value = output.child() if output.nodeName() == "Alias" else output
        if (
            value.nodeName() == "GetStructField"
            and int(value.ordinal()) == 0
            and any(value.child().semanticEquals(w) for w in windows)
        ):
            return str(output.name())
    return None


def rows_of(spark: SparkSession, view: ViewFile, enriched: DataFrame) -> DataFrame:
    """The view's SQL over `enriched` (a stream, or a batch to recompute a view), unchecked."""
    enriched.createOrReplaceTempView(RELATION)
    try:
        return spark.sql(view.sql)
    except PySparkException as err:
        raise ViewRefused(f"{view.name}: {_sql_error(err, view.sql)}") from None
    finally:
        spark.catalog.dropTempView(RELATION)


def check(spark: SparkSession, view: ViewFile) -> CompiledView:
    """`compile_view` over `placeholder`: what `validate` and a create run first."""
    return compile_view(spark, view, placeholder(spark))


def _check_shape(name: str, plan: Any) -> Any:
    """The view's aggregation: the one Aggregate node, with only projections above it."""
    node = plan
    while node.nodeName() != "Aggregate":
        refused = _ABOVE.get(node.nodeName())
        if refused is not None:
            raise ViewRefused(f"{name}: {refused}")
        children = list(_seq(node.children()))
        if node.nodeName() not in _ABOVE_OK or len(children) != 1:
            raise ViewRefused(
                f"{name}: a view is SELECT ... FROM {RELATION} ... GROUP BY ... (found {node.nodeName()})"  # noqa: S608
            )
        node = children[0]
    if not list(_seq(node.groupingExpressions())):
        raise ViewRefused(f"{name}: a view needs a GROUP BY: its columns are the key of the view's rows")
    for below in _nodes(list(_seq(node.children()))):
        refused = _BELOW.get(below.nodeName())
        if below.nodeName() == "Expand" and not any(
            str(a.name()) == _GROUPING_ID for a in _seq(below.output())
        ):
            refused = None  # a sliding window's
        if refused is not None:
            raise ViewRefused(f"{name}: {refused}")
    return node


def _check_deterministic(name: str, plan: Any) -> None:
    for node in _nodes([plan]):
        for expression in _expressions(list(_seq(node.expressions()))):
            # the function itself, not the expressions around it that it makes non-deterministic
            own = not expression.deterministic() and all(
                c.deterministic() for c in _seq(expression.children())
            )
            if own or expression.nodeName() in _CLOCKS:
                raise ViewRefused(
                    f"{name}: {expression.prettyName()}() is not deterministic: a view rebuilt from the"
                    " topic must give the same rows (use rating_time or rating_ts for time)"
                )


def _key(name: str, aggregate: Any) -> tuple[str, ...]:
    """The selected columns that are the GROUP BY columns, in GROUP BY order."""
    outputs = list(_seq(aggregate.aggregateExpressions()))
    key = []
    for grouped in _seq(aggregate.groupingExpressions()):
        window = str(grouped.nodeName()) == "AttributeReference" and str(grouped.name()) in (
            "window",
            "session_window",
        )
        for output in outputs:
            value = output.child() if output.nodeName() == "Alias" else output
            if value.semanticEquals(grouped) or (window and _only_of(value, grouped)):
                key.append(str(output.name()))
                break
        else:
            shown = "window(...)" if str(grouped.sql()).startswith("window") else str(grouped.sql())
            shown = shown.replace(f"{RELATION}.", "")
            raise ViewRefused(
                f"{name}: GROUP BY {shown} is not selected: a view's key is its GROUP BY columns, so select"
                " each one (a window by its start or end: window.start AS hour)"
            )
    return tuple(key)


def _only_of(value: Any, window: Any) -> bool:
    """Whether `value` is computed from the window alone (its start or end, or of them)."""
    references = list(_iterate(value.references().iterator()))
    return bool(references) and all(r.semanticEquals(window) for r in references)


def _iterate(iterator: Any) -> Iterator[Any]:
    while iterator.hasNext():
        yield iterator.next()


def _seq(seq: Any) -> Iterator[Any]:
    """A Scala Seq's items."""
    for i in range(seq.size()):
        yield seq.apply(i)


def _nodes(roots: list[Any]) -> Iterator[Any]:
    for node in roots:
        yield node
        yield from _nodes(list(_seq(node.children())))


def _expressions(roots: list[Any]) -> Iterator[Any]:
    for expression in roots:
        yield expression
        yield from _expressions(list(_seq(expression.children())))


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _sql_error(err: PySparkException, sql: str) -> str:
    """Spark's message without the SQL it quotes, and where in the file it points: Spark's
    position when it gives one, else the token a syntax error names when it stands once."""
    text = str(err).strip().split("\n== SQL")[0].split("; line ")[0].strip()
    java = getattr(err, "_origin", None)
    try:
        line, position = java.line(), java.startPosition()  # type: ignore[union-attr]
        if line.isDefined() and position.isDefined():
            return f"line {line.get()}, column {position.get() + 1}: {text}"
    except Exception:  # noqa: BLE001, S110 (not an error of Spark's SQL: no position)
        pass
    near = re.search(r"at or near '([^']+)'", text)
    if near is not None and near.group(1) != "end of input":
        found = [m.start() for m in re.finditer(re.escape(near.group(1)), sql)]
        if len(found) == 1:
            before = sql[: found[0]]
            return f"line {before.count(chr(10)) + 1}, column {found[0] - before.rfind(chr(10))}: {text}"
    return text


def _java_message(err: BaseException) -> str:
    java = getattr(err, "java_exception", None)
    text = str(java.getMessage()) if java is not None else str(err)
    return text.split(";\n")[0].strip()
