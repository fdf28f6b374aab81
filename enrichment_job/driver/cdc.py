"""Debezium change events of a micro-batch -> customer versions, the compacted `customers`
topic's records, dead letters, and the CDC state after them (clock = watermark, position).

CDC is small next to the ratings (a heartbeat every 100 ms and the customers' changes): the
batch's change events are read on the driver by a consumer kept open, parsed there as Arrow
columns (`change_events`), and turned into versions and records without a Spark job.
"""

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import closing
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError
from pyspark.sql import SparkSession

from enrichment_job.customers.table import CdcState
from enrichment_job.customers.versions import VersionStore
from enrichment_job.kafka.batches import concat, to_records
from enrichment_job.kafka.reader import KAFKA, RecordsDeleted, TopicReader
from enrichment_job.kafka.transactions import Header, Records
from enrichment_job.records import change_events
from enrichment_job.records.change_events import Position
from enrichment_job.records.json_columns import json_objects
from enrichment_job.records.schemas import CUSTOMER_COLUMNS, VERSION_FIELDS
from enrichment_job.settings import JobSettings

__all__ = [
    "IN_FLIGHT",
    "UNAVAILABLE",
    "VERSION_SCHEMA",
    "CdcReader",
    "CdcResult",
    "Prefetch",
    "chain",
    "fill_unavailable",
    "in_order",
    "ingest",
    "ingest_events",
    "ingest_ranges",
]

log = logging.getLogger("enrichment_job")
# What Debezium writes for a column it could not read (PostgreSQL: a TOASTed value an update left
# unchanged, on a table whose REPLICA IDENTITY is not FULL): toasted.value.placeholder's default.
UNAVAILABLE = "__debezium_unavailable_value"


@dataclass(frozen=True)
class CdcResult:
    state: CdcState  # after this batch
    versions: pa.Table  # new customer versions (VERSION_FIELDS), in CDC order
    customers_topic: str
    dead: Records  # unreadable change events
    events: int  # CDC records read (heartbeats and tombstones included)
    duplicates: int  # changes Debezium sent again, skipped
    regressions: int = 0  # of the duplicates, those in an earlier binlog file than one read
    # Snapshots that took the binlog position back (a history started over): (from, to).
    rewinds: tuple[tuple[Position, Position], ...] = ()
    records: Records | None = None  # `customers`, once `with_customers` made them

    @property
    def changes(self) -> int:
        return int(self.versions.num_rows)

    @property
    def customers(self) -> Records:
        """The compacted customers topic's records of these versions: the latest of each
        customer alone, in the order of those (what compaction keeps of them, and what a
        `read_committed` reader sees of them once they are committed together), its row as
        JSON (its null columns left out, as Spark's to_json writes it), none for a delete.
        Made from the versions when asked for, unless `with_customers` made them: a fresh
        start's history of 300,000 changes becomes about 100,000 records, and only those are
        written as JSON."""
        if self.records is not None:
            return self.records
        versions = self.versions
        ids = versions.column("id").to_numpy()
        # The last change of each customer: its first place in the reversed order.
        _, first_from_end = np.unique(ids[::-1], return_index=True)
        kept = np.sort(len(ids) - 1 - first_from_end)
        latest = versions.take(pa.array(kept, pa.int64())) if len(kept) < len(ids) else versions
        keys = pc.cast(latest.column("id"), pa.string()).cast(pa.binary())
        rows = latest.select(["id", *CUSTOMER_COLUMNS]).to_struct_array()
        values = pc.if_else(latest.column("deleted"), None, json_objects(rows))
        return Records(self.customers_topic, keys.to_pylist(), values.cast(pa.binary()).to_pylist())

    def with_customers(self) -> "CdcResult":
        """This result with its customers topic's records made now (`customers`), kept by
        `then` while nothing after it changes a customer: the CDC read-ahead makes them while
        Spark starts, not in the first batch."""
        return self if self.records is not None else replace(self, records=self.customers)

    def then(self, later: "CdcResult") -> "CdcResult":
        """This result followed by `later`, which read on from this one's state."""
        return chain([self, later])


def chain(results: Sequence[CdcResult]) -> CdcResult:
    """The results one after the other, each read on from the state of the one before, joined
    at once: a long read of many chunks copies each chunk's rows once, not again for every
    chunk after it."""
    first = results[0]
    same_customers = all(r.changes == 0 for r in results[1:])
    return CdcResult(
        records=first.records if same_customers else None,
        state=results[-1].state,
        versions=concat([r.versions for r in results]),
        customers_topic=first.customers_topic,
        dead=_joined([r.dead for r in results]),
        events=sum(r.events for r in results),
        duplicates=sum(r.duplicates for r in results),
        regressions=sum(r.regressions for r in results),
        rewinds=tuple(rewind for r in results for rewind in r.rewinds),
    )


def _joined(parts: list[Records]) -> Records:
    headers = None
    if any(part.headers is not None for part in parts):
        headers = [
            h for part in parts for h in (part.headers if part.headers is not None else [None] * len(part))
        ]
    return Records(
        parts[0].topic,
        [key for part in parts for key in part.keys],
        [value for part in parts for value in part.values],
        headers,
    )


class CdcReader(TopicReader):
    """Reads the CDC topic from where the committed state left it to where it ends now: at most
    `max_offsets_per_trigger` records a read.

    Not Spark's batch Kafka reader: that one sets up an admin client for every read, about
    0.25 s a batch on this machine, where a consumer kept open reads the few events of a batch
    (heartbeats, changes) in milliseconds."""

    def __init__(self, settings: JobSettings, group_id: str, timeout_s: float = 60) -> None:
        super().__init__(settings, settings.cdc_topic, group_id, timeout_s, timestamps=False)
        self.accept_deleted = False  # the customer table must never miss a change
        self.accept_partial_history = settings.accept_partial_cdc_history

    def ranges(
        self, cdc_to: dict[int, int], until: dict[int, int] | None = None, *, whole: bool = False
    ) -> dict[int, tuple[int, int]]:
        """As the reader's, but a first read (no offsets yet: a fresh state) of a topic whose
        head was deleted stops the job, unless ENRICH_ACCEPT_PARTIAL_CDC_HISTORY: it would not
        know the customers created in that head, and their ratings would come out unmatched."""
        if not cdc_to:
            cut = {p: low for p, (low, _) in self.bounds().items() if low > 0}
            if cut:
                where = ", ".join(
                    f"{self.topic}[{p}] starts at offset {low}" for p, low in sorted(cut.items())
                )
                text = (
                    f"{where}: the head of the CDC history was deleted (retention, delete-records), so a job"
                    " on a fresh state would not know the customers created in it"
                )
                if not self.accept_partial_history:
                    raise RecordsDeleted(
                        KafkaError(
                            KafkaError.OFFSET_OUT_OF_RANGE,
                            f"{text}. Start the job on the state folder it had, or snapshot the database"
                            " into the topic again and set ENRICH_ACCEPT_PARTIAL_CDC_HISTORY=true",
                        )
                    )
                log.warning("%s; reading what is left, as ENRICH_ACCEPT_PARTIAL_CDC_HISTORY allows", text)
        return super().ranges(cdc_to, until, whole=whole)

    def in_cdc_order(self, ranges: dict[int, tuple[int, int]], size: int) -> Generator[pa.Table]:
        """The records of `ranges` a chunk of at most `size` at a time, a partition after the
        other: CDC order, as a batch's limited reads take them."""
        for p in sorted(ranges):
            with closing(self.chunks({p: ranges[p]}, size)) as chunks:
                yield from chunks


def ingest(
    raw: pa.Table, state: CdcState, customers_topic: str, dlq_topic: str, spark: SparkSession
) -> CdcResult:
    """`raw`: records of the CDC topic (Kafka columns), read after `state`."""
    return ingest_events(change_events.read(in_order(raw), spark), state, customers_topic, dlq_topic)


def _reason(headers: list[Header] | None) -> str:
    """A dead letter's reason, from its headers."""
    reason = dict(headers or []).get("dlq.reason")
    return reason.decode() if isinstance(reason, bytes) else str(reason)


def ingest_events(events: pa.Table, state: CdcState, customers_topic: str, dlq_topic: str) -> CdcResult:
    """`events`: CDC records read after `state`, parsed (`change_events.EVENTS`, in CDC order)."""
    result = _result(events, state, customers_topic, dlq_topic)
    if len(result.dead):
        reasons = Counter(_reason(h) for h in result.dead.headers or [])
        log.error(
            "%d change events went to %s and changed no customer: %s",
            len(result.dead),
            dlq_topic,
            "; ".join(f"{n}x {reason}" for reason, n in reasons.most_common()),
        )
    for furthest, snapshot in result.rewinds:
        log.warning(
            "a snapshot in the CDC topic at position %s (GTID sequence number or last commit LSN, "
            "binlog file, position or LSN, row) starts below the furthest position read before it, "
            "%s: the database's log started over (RESET MASTER, a restore, a failover) and a "
            "connector snapshotted it again; following the new history",
            snapshot,
            furthest,
        )
    if result.regressions:
        log.error(
            "%d CDC events came from an earlier binlog file than the furthest position read, %s, and were "
            "skipped as re-sends. If the database's binlog started over (RESET MASTER, a restore, a "
            "failover to a server without the same GTIDs), the customer table is frozen while "
            "heartbeats still move the watermark: "
            "snapshot the database again with a new connector (or new connector offsets) into the "
            "same CDC topic, and the job follows the new history from its snapshot",
            result.regressions,
            state.position,
        )
    return result


_ORDER = [("partition", "ascending"), ("offset", "ascending")]


def in_order(raw: pa.Table) -> pa.Table:
    """`raw` in CDC order (partition, offset). A reader's chunk is in that order already, and
    sorting it anyway (or joining its chunks) copied every value: 0.4 s of a fresh start's
    500,000 events."""
    partition = raw.column("partition").to_numpy()
    offset = raw.column("offset").to_numpy()
    later = (partition[1:] > partition[:-1]) | (
        (partition[1:] == partition[:-1]) & (offset[1:] > offset[:-1])
    )
    return raw if bool(np.all(later)) else raw.sort_by(_ORDER)


def ingest_ranges(
    reader: "CdcReader",
    ranges: dict[int, tuple[int, int]],
    state: CdcState,
    spark: SparkSession,
    *,
    topics: tuple[str, str],  # the customers topic, the dead-letter topic
    chunk_size: int = 100_000,
) -> CdcResult:
    """The CDC records of `ranges`, read after `state`, ingested a chunk at a time as they
    come, a partition after the other (CDC order): a long read never holds more than a chunk
    of records as Python objects, nor the whole range in the driver's JVM."""
    results = [ingest(KAFKA.empty_table(), state, *topics, spark)]
    with closing(reader.in_cdc_order(ranges, chunk_size)) as chunks:
        for chunk in chunks:
            results.append(ingest(chunk, results[-1].state, *topics, spark))
    return chain(results)


# Chunks of the read-ahead read but not yet ingested, at most: the memory it holds, and what a
# stop waits for.
IN_FLIGHT = 2


class Prefetch:
    """The CDC topic from `state` to where it ends as this starts, read and ingested in a thread
    of its own: a fresh start or a restart after a long stop reads the topic while the Spark
    session starts, instead of in its first batch.

    The records are parsed by Arrow and ingested as they come, a chunk at a time in a second
    thread, while the consumer fetches the next: the read and the work overlap, and no more
    than a chunk of records is ever held as Python objects. Each chunk is ingested after the
    one before, in CDC order, as a batch's limited reads are. The read-ahead stops before the
    first chunk Arrow cannot read (an unreadable event, which needs Spark's parse to say why),
    and the first batch reads on from there."""

    def __init__(
        self,
        reader: "CdcReader",
        state: CdcState,
        customers_topic: str,
        dlq_topic: str,
        *,
        chunk_size: int = 100_000,  # records parsed and ingested at a time
    ) -> None:
        self.state = state
        self.reader = reader
        self.chunk_size = chunk_size
        self._topics = (customers_topic, dlq_topic)
        self._parts: list[CdcResult] = []  # a chunk's result each, in CDC order
        self._result: CdcResult | None = None  # the parts chained, once all are in
        self._unreadable = False
        self._failure: BaseException | None = None
        self._started = time.monotonic()
        self._ranges: dict[int, tuple[int, int]] = {}
        try:  # the end as it is now, before this returns: what is produced later is a batch's
            self._ranges = reader.ranges(state.cdc_to, whole=True)
        except Exception as err:  # noqa: BLE001 - whatever it was, the first batch reads the topic itself
            self._failure = err
        self._thread = threading.Thread(target=self._run, name="cdc-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._failure is not None:
            return
        try:
            # Three stages, a thread each: this one reads a chunk while the one before is
            # parsed and the one before that is folded into the table.
            with (
                ThreadPoolExecutor(1, thread_name_prefix="cdc-parse") as parsing,
                ThreadPoolExecutor(1, thread_name_prefix="cdc-ingest") as ingesting,
                closing(self.reader.in_cdc_order(self._ranges, self.chunk_size)) as chunks,
            ):
                pending: deque[Future[None]] = deque()
                for chunk in chunks:
                    if len(pending) == IN_FLIGHT:  # the read waits for the ingest
                        wait([pending.popleft()])
                    if self._unreadable or self._failure is not None:
                        break
                    parsed = parsing.submit(self._parse, chunk)
                    pending.append(ingesting.submit(self._ingest, parsed))
                    pending[-1].add_done_callback(self._check)
            if self._parts and self._failure is None:
                # The customers topic's records too, for the first batch's transaction.
                self._result = chain(self._parts).with_customers()
                log.info(
                    "CDC topic read while Spark started: %d events, %d changes of %d customers in %.1f s%s",
                    self._result.events,
                    self._result.changes,
                    len(self._result.customers),
                    time.monotonic() - self._started,
                    "; the first batch reads on from an unreadable event" if self._unreadable else "",
                )
        except Exception as err:  # noqa: BLE001 - whatever it was, the first batch reads the topic itself
            self._failure = err

    def _parse(self, chunk: pa.Table) -> pa.Table | None:
        if self._unreadable or self._failure is not None:
            return None
        return change_events.read_arrow(in_order(chunk))

    def _ingest(self, parsed: "Future[pa.Table | None]") -> None:
        """One chunk after the one before (the single worker runs them in order)."""
        events = parsed.result()
        if self._unreadable or self._failure is not None:
            return
        if events is None:
            self._unreadable = True
            return
        state = self._parts[-1].state if self._parts else self.state
        self._parts.append(ingest_events(events, state, *self._topics))

    def _check(self, future: "Future[None]") -> None:
        if future.exception() is not None and self._failure is None:
            self._failure = future.exception()

    def take(self) -> CdcResult | None:
        """The CDC topic read ahead and ingested, once it is; None when nothing was."""
        self._thread.join()
        if self._failure is not None:
            log.warning("reading the CDC topic ahead failed (%s); the first batch reads it", self._failure)
            return None
        return self._result


def _result(events: pa.Table, state: CdcState, customers_topic: str, dlq_topic: str) -> CdcResult:
    unreadable = pc.or_(events.column("is_tombstone"), pc.is_valid(events.column("dlq_reason")))
    # The records' bytes only matter for dead letters: filtering them is most of a filter's time.
    good = events.drop_columns(["key", "value", "headers"]).filter(pc.invert(unreadable))
    clock = change_events.Clock(good, state.clock_ms, state.position)
    duplicate = pa.array(clock.duplicate, pa.bool_())
    is_change = pc.and_(pc.equal(good.column("table"), "customers"), pc.invert(duplicate))
    changes = good.append_column("clock_ms", clock.clock_ms).filter(is_change)
    cdc_to = dict(state.cdc_to)
    if events.num_rows:
        ends = events.group_by("partition").aggregate([("offset", "max")])
        for p, o in zip(
            ends.column("partition").to_pylist(), ends.column("offset_max").to_pylist(), strict=True
        ):
            cdc_to[int(p)] = int(o) + 1
    is_bad = pc.and_(unreadable, pc.invert(events.column("is_tombstone")))
    bad = events.filter(is_bad) if pc.any(is_bad).as_py() else events.slice(0, 0)
    return CdcResult(
        state=CdcState(clock.end_clock_ms, clock.position, cdc_to),
        versions=_versions(changes),
        customers_topic=customers_topic,
        dead=to_records(bad.select(["key", "value", "headers"]), dlq_topic),
        events=events.num_rows,
        duplicates=int(clock.duplicate.sum()),
        regressions=int(clock.regressed.sum()),
        rewinds=tuple(clock.rewinds),
    )


def _versions(changes: pa.Table) -> pa.Table:
    """Change events as versions (VERSION_FIELDS): create/read/update open a version with the
    row's values; a delete opens a `deleted` version, which ends the one before.

    A change is valid from the database clock at its place in the binlog. A snapshot read ("r")
    carries the snapshot's time instead, so it is valid from the row's own update_ts when it has
    one: a customer that existed before the connector started still matches older ratings."""
    op = changes.column("op")
    deleted = pc.equal(op, "d")
    after = changes.column("after").combine_chunks()
    columns = {
        "id": changes.column("customer_id"),
        **{
            name: pc.if_else(
                deleted, pa.nulls(len(deleted), after.type.field(name).type), pc.struct_field(after, name)
            )
            for name in CUSTOMER_COLUMNS
        },
        "valid_from": pc.if_else(
            pc.equal(op, "r"),
            pc.coalesce(changes.column("update_ms"), changes.column("source_ts_ms")),
            changes.column("clock_ms"),
        ),
        "deleted": deleted,
        "op": op,
        "source_file": changes.column("source_file"),
        "source_pos": changes.column("source_pos"),
        "source_row": changes.column("source_row"),
        "cdc_partition": changes.column("partition"),
        "cdc_offset": changes.column("offset"),
    }
    return pa.table(columns).cast(VERSION_SCHEMA)


def _arrow_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415

    return to_arrow_schema(VERSION_FIELDS)


VERSION_SCHEMA = _arrow_schema()


def fill_unavailable(result: CdcResult, known: VersionStore) -> CdcResult:
    """`result` with every column Debezium marked unavailable (`UNAVAILABLE`) set to the
    customer's value before the change: from the latest earlier change of the batch, else from
    the table's latest version (null when the job knows none). The placeholder never becomes a
    customer's value in the table, the join or the customers topic."""
    versions = result.versions
    marked = {
        name: np.asarray(pc.fill_null(pc.equal(versions.column(name), UNAVAILABLE), False).to_numpy(), bool)
        for name in CUSTOMER_COLUMNS
        if pa.types.is_string(versions.schema.field(name).type)
    }
    rows = np.flatnonzero(np.logical_or.reduce(list(marked.values()))) if marked else np.array([], int)
    if not len(rows):
        return result
    columns = {name: versions.column(name).to_pylist() for name in marked}
    ids = versions.column("id").to_pylist()
    last_row: dict[int, int] = {}  # the batch's latest change per customer, before the row at hand
    unknown = 0
    order = iter(rows)
    pending = next(order, None)
    for i, customer in enumerate(ids):
        if i == pending:
            earlier = last_row.get(customer)
            before = None if earlier is not None else _latest(known, customer)
            for name, flags in marked.items():
                if flags[i]:
                    if earlier is not None:
                        columns[name][i] = columns[name][earlier]
                    elif before is not None:
                        columns[name][i] = before[name]
                    else:
                        columns[name][i] = None
                        unknown += 1
            pending = next(order, None)
        last_row[customer] = i
    log.warning(
        "%d customer changes had columns Debezium could not read (%s; a TOASTed value on a table "
        "whose REPLICA IDENTITY is not FULL): given the customer's value before the change%s",
        len(rows),
        UNAVAILABLE,
        f"; {unknown} values unknown to the job left null" if unknown else "",
    )
    for name, values in columns.items():
        versions = versions.set_column(
            versions.schema.get_field_index(name), name, pa.array(values, versions.schema.field(name).type)
        )
    return replace(result, versions=versions, records=None)  # its customers' records made from these


def _latest(known: VersionStore, customer: int) -> dict[str, str | None] | None:
    """The customer's latest version in the table, or None."""
    picks = known.pick(pa.array([customer], pa.int32()), pa.array([np.iinfo(np.int64).max], pa.int64()), 0)
    index = picks.index[0].as_py()
    if index is None:
        return None
    return {name: picks.table.column(name)[index].as_py() for name in CUSTOMER_COLUMNS}
