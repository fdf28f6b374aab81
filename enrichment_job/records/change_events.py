"""Debezium change events of a micro-batch, parsed into one Arrow table (`EVENTS`), and the
database clock and re-send scan over them.

A batch's change events are already on the driver as Arrow (the CDC reader's records). Arrow's
JSON reader parses all of them in one call, on the driver's threads: about 1 s for 300,000
events here, where a Spark job took 40 s, most of it a window over the events in one task for
the clock, and the hand-over from Python to the JVM and back. Arrow reads a batch only when
every event is a readable change event of the expected shape; a batch with anything else (not
UTF-8, not JSON, a field of another type, an unknown op, no customer id, a row without every
customer column) is parsed by Spark
(`transforms.parse_cdc`), which says for each event what is wrong with it. Both give the same
table, and the clock is computed from it the same way.
"""

from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_type

from enrichment_job.kafka.batches import concat
from enrichment_job.records.json_columns import object_shaped, read_objects, utf8_valid
from enrichment_job.records.schemas import CUSTOMER_FIELDS
from enrichment_job.records.transforms import HEARTBEAT_TABLE, dead_letter_headers, parse_cdc
from enrichment_job.runtime.plans import Columns, select

RAW_SCHEMA = "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP"
CUSTOMER = to_arrow_type(CUSTOMER_FIELDS)
OPS = ("c", "r", "u", "d")
STAGE = "cdc"  # dlq.stage of the change events' dead letters, and their claim-check folder
DLQ_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

# One row per CDC record, in CDC order (partition, offset). `dlq_reason` is null for a readable
# change event; a tombstone (`is_tombstone`) has nothing but its Kafka columns.
EVENTS = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("is_tombstone", pa.bool_()),
        ("dlq_reason", pa.string()),
        ("op", pa.string()),
        ("table", pa.string()),
        ("customer_id", pa.int32()),
        ("after", CUSTOMER),
        ("update_ms", pa.int64()),  # after.update_ts, epoch ms
        ("reading_ms", pa.int64()),  # the database time the event tells; null for a snapshot read
        ("source_ts_ms", pa.int64()),
        ("source_file", pa.string()),
        ("source_pos", pa.int64()),  # MariaDB: the binlog position; PostgreSQL: the event's LSN
        ("source_row", pa.int32()),
        ("binlog_file", pa.int64()),  # the number at the end of source_file
        # What orders transactions: MariaDB, the sequence number of source.gtid (domain-server-seq),
        # null without; PostgreSQL, the last commit's LSN of source.sequence (else the event's LSN).
        ("gtid_seq", pa.int64()),
        ("source_snapshot", pa.string()),  # Debezium's source.snapshot ("true", "last", "incremental", ...)
        ("headers", DLQ_HEADERS),  # an unreadable event's dead-letter headers
    ]
)


def _envelope() -> pa.Schema:
    """What Arrow's reader takes of an envelope: the customer row (the heartbeat's `ts` beside
    its columns), op and the source block. Other fields are ignored."""
    row = pa.struct([*CUSTOMER, pa.field("ts", pa.string())])
    source = pa.struct(
        [
            ("ts_ms", pa.int64()),
            ("table", pa.string()),
            ("file", pa.string()),
            ("pos", pa.int64()),
            ("row", pa.int32()),
            ("snapshot", pa.string()),
            ("gtid", pa.string()),
            ("lsn", pa.int64()),
            ("sequence", pa.string()),
        ]
    )
    return pa.schema([("before", row), ("after", row), ("op", pa.string()), ("source", source)])


ENVELOPE = _envelope()
_PARSE = pj.ParseOptions(explicit_schema=ENVELOPE, unexpected_field_behavior="ignore")


def read(raw: pa.Table, spark: SparkSession) -> pa.Table:
    """`raw`'s records (the Kafka columns, in CDC order) as `EVENTS`."""
    events = read_arrow(raw)
    # One chunk for Spark: PySpark's createDataFrame stops reading at an empty chunk.
    return events if events is not None else read_spark(spark.createDataFrame(concat([raw]), RAW_SCHEMA))


def read_arrow(raw: pa.Table) -> pa.Table | None:
    """`EVENTS` parsed by Arrow, or None when a record is not a readable change event of the
    expected shape (it then needs Spark's parse, which tells why)."""
    values = raw.column("value").combine_chunks()
    present = pc.is_valid(values)
    given = values.filter(present) if values.null_count else values  # tombstones left out
    if not pc.all(utf8_valid(given)).as_py():
        return None
    envelopes = ENVELOPE.empty_table() if len(given) == 0 else None
    if envelopes is None and pc.all(object_shaped(given)).as_py():
        envelopes = read_objects(given, _PARSE)
    if envelopes is None:
        return None
    op = envelopes.column("op")
    source = envelopes.column("source").combine_chunks()
    before = envelopes.column("before").combine_chunks()
    after = envelopes.column("after").combine_chunks()
    deleted = pc.fill_null(pc.equal(op, "d"), False)
    customer_id = pc.if_else(deleted, pc.struct_field(before, "id"), pc.struct_field(after, "id"))
    ts_ms = pc.struct_field(source, "ts_ms")
    readable = pc.and_(
        pc.and_(pc.fill_null(pc.is_in(op, pa.array(OPS)), False), pc.is_valid(customer_id)),
        pc.is_valid(ts_ms),
    )
    if not pc.all(readable).as_py():
        return None
    table = pc.struct_field(source, "table")
    if not _every_column(given, op, table, before, after):
        return None
    try:
        beat_ms = _millis(pc.struct_field(after, "ts"))
        update_ms = _millis(pc.struct_field(after, "update_ts"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    heartbeat = pc.fill_null(pc.equal(table, HEARTBEAT_TABLE), False)
    reading = pc.if_else(
        pc.fill_null(pc.equal(op, "r"), False),
        pa.nulls(len(op), pa.int64()),
        pc.if_else(heartbeat, pc.coalesce(beat_ms, ts_ms), ts_ms),
    )
    file = pc.struct_field(source, "file")
    lsn = pc.struct_field(source, "lsn")
    commit = pc.coalesce(
        _gtid_seq(pc.struct_field(source, "gtid")), _last_commit(pc.struct_field(source, "sequence")), lsn
    )
    parsed = {
        "op": op,
        "table": table,
        "customer_id": customer_id,
        "after": _customer(after),
        "update_ms": update_ms,
        "reading_ms": reading,
        "source_ts_ms": ts_ms,
        "source_file": file,
        "source_pos": pc.coalesce(pc.struct_field(source, "pos"), lsn),
        "source_row": pc.struct_field(source, "row"),
        "binlog_file": _file_number(file),
        "gtid_seq": commit,
        "source_snapshot": pc.struct_field(source, "snapshot"),
    }
    # Spread back over all records: a tombstone's fields are null.
    spots = pc.subtract(pc.cumulative_sum(present.cast(pa.int32())), 1)
    take = pc.if_else(present, spots, pa.nulls(len(present), pa.int32()))
    columns: dict[str, Any] = {
        "topic": raw.column("topic"),
        "partition": raw.column("partition"),
        "offset": raw.column("offset"),
        "key": raw.column("key"),
        "value": values,
        "is_tombstone": pc.invert(present),
        "dlq_reason": pa.nulls(raw.num_rows, pa.string()),
        "headers": pa.nulls(raw.num_rows, DLQ_HEADERS),
        **{name: pc.take(column, take) for name, column in parsed.items()},
    }
    return pa.table(columns, schema=EVENTS)


# A member's name in compact or spaced JSON: inside a JSON string a quote is always escaped, so
# this finds only members.
_MEMBER = r'"{}"\s*:'


def _named(name: str, times: int) -> str:
    """A pattern that matches a value naming the member `name` at least `times` times."""
    return "(?s)" + ".*".join([_MEMBER.format(name)] * times)


def _every_column(
    values: pa.Array, op: pa.ChunkedArray, table: pa.Array, before: pa.Array, after: pa.Array
) -> bool:
    """Whether each customer row names every customer column. Debezium writes every column,
    null or not, and Arrow reads a missing one as null: a column renamed or dropped in the
    database would silently change the customer (its club_status null turns its alerts off).
    Where a column read null, its name must stand as a member once per row of the event
    (`before` and `after`); an event where it does not is left to Spark's parse, which looks at
    `after` alone and says which columns are missing. Only the values with a null are searched,
    and a search stops at the match it needs (a count of every member took twice as long:
    `gender` and `comments` are null in nearly every row of a fresh start's history). Where
    most values are searched, the search runs over all of them and the others' answers are
    ignored: filtering first copied nearly every value, once per column, and the copies cost
    three times the search."""
    rows = pc.add(pc.is_valid(before).cast(pa.int32()), pc.is_valid(after).cast(pa.int32()))
    kept = pc.fill_null(pc.and_(pc.not_equal(op, "d"), pc.not_equal(table, HEARTBEAT_TABLE)), True)
    for name in CUSTOMER.names:
        unread = pc.and_(kept, pc.fill_null(pc.is_null(pc.struct_field(after, name)), False))
        if not pc.any(unread).as_py():
            continue
        for times in (1, 2):
            searched = pc.and_(unread, pc.equal(rows, times))
            count = pc.sum(searched).as_py() or 0
            if count == 0:
                continue
            pattern = _named(name, times)
            if 2 * count > len(values):
                named = pc.or_kleene(pc.invert(searched), pc.match_substring_regex(values, pattern))
            else:
                named = pc.match_substring_regex(values.filter(searched), pattern)
            if not pc.all(pc.fill_null(named, False)).as_py():
                return False
    return True


def _millis(text: pa.Array) -> pa.Array:
    """ISO-8601 times (MariaDB's in whole seconds or ms, PostgreSQL's in microseconds) as epoch ms."""
    micros = pc.cast(pc.cast(text, pa.timestamp("us", tz="UTC")), pa.int64())
    return pc.floor(pc.divide(micros.cast(pa.float64()), 1000.0)).cast(pa.int64())


def _number(text: pa.Array, pattern: str) -> pa.Array:
    """The digits `pattern`'s group `n` finds in each text, as int64; null where none."""
    number = pc.struct_field(pc.extract_regex(text, pattern), "n")
    return pc.cast(pc.if_else(pc.equal(number, ""), None, number), pa.int64())


def _file_number(file: pa.Array) -> pa.Array:
    """The binlog file's number: the digits at the end of its name."""
    return _number(file, r"(?P<n>\d+)$")


def _gtid_seq(gtid: pa.Array) -> pa.Array:
    """A MariaDB GTID's sequence number: the digits after its last dash (domain-server-seq)."""
    return _number(gtid, r"-(?P<n>\d+)$")


def _last_commit(sequence: pa.Array) -> pa.Array:
    """PostgreSQL: the first LSN of Debezium's source.sequence (["last commit LSN", "LSN"]): with
    the event's own LSN it orders the events as the connector streams them, in commit order
    (a transaction's changes can have LSNs below those of one committed before it). Null before
    the connector has seen a commit (a snapshot, its first transaction): the event's LSN then."""
    return _number(sequence, r'^\["?(?P<n>\d+)')


def _customer(row: pa.StructArray) -> pa.StructArray:
    """The customer columns of a parsed row (without the heartbeat's `ts`)."""
    fields = list(CUSTOMER)
    return pa.StructArray.from_arrays(
        [pc.struct_field(row, f.name) for f in fields], fields=fields, mask=pc.is_null(row)
    )


def read_spark(raw: DataFrame) -> pa.Table:
    """`EVENTS` parsed by Spark: every record, with `dlq_reason` for the unreadable ones."""
    table = select(parse_cdc(raw), _spark_columns()).toArrow()
    table = table.sort_by([("partition", "ascending"), ("offset", "ascending")])
    return table.cast(EVENTS)


@cache
def _spark_columns() -> Columns:
    digits = F.regexp_extract(F.col("source.file"), r"(\d+)$", 1)
    seq = F.regexp_extract(F.col("source.gtid"), r"-(\d+)$", 1)
    commit = F.regexp_extract(F.col("source.sequence"), r'^\["?(\d+)', 1)
    return Columns(
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        F.col("is_tombstone"),
        F.col("dlq_reason"),
        F.col("op"),
        F.col("source.table").alias("table"),
        F.col("customer_id"),
        F.col("after"),
        F.unix_millis(F.try_to_timestamp(F.col("after.update_ts"))).alias("update_ms"),
        F.col("reading_ms"),
        F.col("source.ts_ms").alias("source_ts_ms"),
        F.col("source.file").alias("source_file"),
        F.coalesce(F.col("source.pos"), F.col("source.lsn")).alias("source_pos"),
        F.col("source.row").alias("source_row"),
        F.when(digits != "", digits.cast("long")).alias("binlog_file"),
        F.coalesce(
            F.when(seq != "", seq.cast("long")),
            F.when(commit != "", commit.cast("long")),
            F.col("source.lsn"),
        ).alias("gtid_seq"),
        F.col("source.snapshot").alias("source_snapshot"),
        F.when(F.col("dlq_reason").isNotNull(), dead_letter_headers(STAGE)).alias("headers"),
    )


# MariaDB: GTID sequence number, binlog file number, position, row; PostgreSQL: the last commit's
# LSN, -1, the event's LSN, -1.
Position = tuple[int, int, int, int]


class Clock:
    """The database clock and the re-send scan over readable change events in CDC order,
    carried on from the events before (`clock_ms`, `position`).

    `clock_ms`: the running maximum of the database times read so far (heartbeat readings in ms,
    change times in whole seconds). The CDC topic is in binlog order, which is commit order, so
    every later change was committed at or after it: it is a lower bound of each change's commit
    time, and the completeness watermark: no change still to come can be valid before it.

    `duplicate`: a change at or before the furthest position (GTID sequence number, binlog
    file, position, row) already seen is Debezium sending it again after a restart
    (at-least-once). Null parts of a position order first. The GTID's sequence number comes
    first: a replica promoted after a failover writes the same GTIDs at binlog files and
    positions of its own, so a connector that follows it (GTID mode) sends changes whose file
    and position may be below the old server's, and they are still later changes. Without GTIDs
    (null everywhere) the binlog position alone decides. One GTID domain is assumed: sequence
    numbers of different domains do not order each other.

    PostgreSQL's events fill the same position with (the last commit's LSN, -1, the event's own
    LSN, -1), from Debezium's source.sequence and source.lsn: the connector streams
    transactions in commit order, and a transaction's changes may have LSNs below those of one
    committed before it, so the last commit's LSN comes first, as the GTID does.

    A snapshot (reads, op "r", other than an incremental snapshot's) starts the binlog history
    over from its own position, where the connector then streams from: its rows are the table
    as of that position. So after RESET MASTER, a restore or a failover, a new connector's
    snapshot lets the changes after it through, even though their positions are below the old
    history's furthest. `rewound` marks such snapshot reads (the position went back).
    `regressed` marks a duplicate in an earlier binlog file than the furthest position with no
    snapshot between: skipped as a re-send, and reported, since it may be a history that
    started over without a new snapshot."""

    def __init__(self, events: pa.Table, clock_ms: int | None, position: Position | None) -> None:
        floor = np.iinfo(np.int64).min
        readings = pc.fill_null(events.column("reading_ms"), floor).to_numpy()
        running = np.maximum.accumulate(readings) if len(readings) else readings
        if clock_ms is not None:
            running = np.maximum(running, clock_ms)
        self.clock_ms = pa.array(running, pa.int64(), mask=running == floor)
        ends = [int(running[-1])] if len(running) and running[-1] != floor else []
        self.end_clock_ms = ends[0] if ends else clock_ms

        def flag(column: str, value: str) -> np.ndarray:
            equal = pc.fill_null(pc.equal(events.column(column), value), False)
            return np.asarray(equal.to_numpy(zero_copy_only=False), bool)

        snapshot = flag("op", "r")
        restart = snapshot & ~flag("source_snapshot", "incremental")
        placed = ~snapshot | restart  # events whose position counts
        parts = [
            pc.fill_null(events.column(name).cast(pa.int64()), -1).to_numpy()
            for name in ("gtid_seq", "binlog_file", "source_pos", "source_row")
        ]
        # A snapshot's position is where the binlog ended as it read, and the first transaction
        # streamed after it may report that very position, row 0 (MariaDB here reports one a
        # GTID event further). So a snapshot read ranks just below it (no GTID of its own, row
        # -2; a null row is -1): such a transaction is no re-send.
        reported = tuple(part.copy() for part in parts)
        parts[0] = np.where(snapshot, -1, parts[0])
        parts[3] = np.where(restart, -2, parts[3])
        # Positions ranked in binlog order, the carried one last: a running maximum of ranks
        # is then the furthest position so far.
        carried = np.array([position] if position is not None else [], np.int64).reshape(-1, 4)
        keys = np.concatenate([np.stack([part[placed] for part in parts], axis=1), carried])
        order = np.lexsort(keys.T[::-1])
        step = np.ones(len(order), np.int64)
        step[1:] = np.any(keys[order][1:] != keys[order][:-1], axis=1)
        ranks = np.empty(len(order), np.int64)
        ranks[order] = np.cumsum(step) - 1
        by_rank = np.empty((len(order), 4), np.int64)
        by_rank[ranks] = keys
        own = np.full(len(snapshot), -1, np.int64)
        own[placed] = ranks[: len(keys) - len(carried)]
        carried_rank = int(ranks[-1]) if len(carried) else -1
        # The running maximum starts over at each snapshot read: each one opens a segment whose
        # ranks are lifted above every earlier segment's, so one accumulate serves them all.
        segment = np.cumsum(restart)
        lift = segment * (len(order) + 2)
        upto = np.maximum.accumulate(np.maximum(own + lift, np.where(segment == 0, carried_rank, -1)))
        upto = upto - lift if len(own) else own
        before = np.concatenate([[carried_rank], upto[:-1]]) if len(own) else own
        seen = before >= 0
        self.duplicate = ~snapshot & seen & (own <= before)
        # A snapshot read has no GTID: whether it took the history back is a matter of binlog
        # position alone, (file, position, row) compared in order, for all the snapshot reads at
        # once (a fresh start reads every snapshot the topic holds, 100,000 reads each here).
        self.rewound = np.zeros(len(snapshot), bool)
        reads = np.flatnonzero(restart & seen)
        if len(reads):
            here = np.stack([part[reads] for part in parts[1:]], axis=1)
            furthest = by_rank[before[reads], 1:]
            differs = here != furthest
            first = np.argmax(differs, axis=1)  # the first part that differs (0 when none does)
            rows = np.arange(len(reads))
            self.rewound[reads] = differs.any(axis=1) & (here[rows, first] < furthest[rows, first])
        # Each rewind: the furthest position before it, and the snapshot's (as Debezium gave it).
        self.rewinds: list[tuple[Position, Position]] = [
            (_position(by_rank[before[i]]), _position(np.array([part[i] for part in reported])))
            for i in np.flatnonzero(self.rewound)
        ]
        furthest_file = by_rank[np.maximum(before, 0), 1] if len(by_rank) else before
        self.regressed = self.duplicate & (parts[1] < furthest_file)
        last = int(upto[-1]) if len(upto) else carried_rank
        self.position: Position | None = _position(by_rank[last]) if last >= 0 else None


def _position(ranked: np.ndarray) -> Position:
    return int(ranked[0]), int(ranked[1]), int(ranked[2]), int(ranked[3])
